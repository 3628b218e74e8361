"""ModelRunner: the GPU side of the engine -- model, GDN state backend, KV cache, CUDA graphs.

It knows nothing about requests or text: it prefills a slot from token ids, runs one verify/decode
step for a batch of slots, and commits the accepted counts to the GDN state and the KV cache together.
Steps are captured in CUDA graphs for a short list of batch sizes (the batch is padded with slot -1
rows up to the next size). With a device drafter (``RunnerConfig(device_drafter="mtp")``),
``draft_and_verify`` drafts the window inside the step, in the same graph as the verify
(``engine.drafter.DeviceDrafter``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..models.model import HybridLM
from ..models.step import Step, StepKind
from ..state import GDNStatePool, PoolConfig
from ..state.backend import GDNStateBackend, Parked
from ..state.kv import KVCache
from ..state.lockstep import LockstepPool
from .mtp import MTPDrafter

GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class RunnerConfig:
    backend: str = "replay"
    max_slots: int = 16
    max_len: int = 1024
    window: int = 4  # T: last accepted token + drafts (1 = plain decode only)
    ring_len: int = 16
    cuda_graphs: bool = True
    validate: bool = True  # host-side protocol checks (turned off automatically for graph capture)
    shadow_backend: str | None = None  # a second pool fed the same inputs (LockstepPool), for bitwise checks
    device_drafter: str | None = None  # "mtp": draft inside the step with the model's MTP head (window >= 2)


@dataclass(frozen=True)
class ParkedRequest:
    """A preempted request's state on the CPU: its GDN slots, its KV cache rows, its device drafter's state."""

    gdn: Parked
    kv: dict[str, torch.Tensor]
    drafter: dict | None = None


def _padded(n: int) -> int:
    return next((b for b in GRAPH_BATCH_SIZES if b >= n), n)


def _uses_graphs(model: HybridLM, cfg: RunnerConfig) -> bool:
    return cfg.cuda_graphs and next(model.parameters()).is_cuda and model.config.num_experts == 0


def pool_config(model: HybridLM, cfg: RunnerConfig) -> PoolConfig:
    """The GDN state layout a runner of ``cfg`` needs for ``model`` (on the model's device, in its dtype)."""
    mc, p = model.config, next(model.parameters())
    shape = mc.gdn_shape
    return PoolConfig(
        num_slots=cfg.max_slots, num_layers=len(mc.gdn_layers), H=shape.H, HV=shape.HV, K=shape.K, V=shape.V,
        window=cfg.window, ring_len=max(cfg.ring_len, 2 * cfg.window), backend=cfg.backend, dtype=p.dtype,
        conv_kernel=mc.conv_kernel, max_batch=_padded(cfg.max_slots), device=p.device,
        validate=cfg.validate and not _uses_graphs(model, cfg),
    )  # fmt: skip


class ModelRunner:
    """``pool``: a GDN state backend built elsewhere for ``pool_config(model, cfg)`` (e.g. the drift study's
    lockstep pools); default: a ``GDNStatePool`` of ``cfg.backend``, with a lockstep shadow when
    ``cfg.shadow_backend`` is set."""

    def __init__(self, model: HybridLM, cfg: RunnerConfig, *, pool: GDNStateBackend | None = None):
        self.model, self.cfg = model, cfg
        mc = model.config
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.use_graphs = _uses_graphs(model, cfg)
        want = pool_config(model, cfg)
        if pool is None:
            pool = GDNStatePool(want)
            if cfg.shadow_backend is not None:
                pool = LockstepPool(pool, GDNStatePool(replace(want, backend=cfg.shadow_backend)))
        elif pool.cfg != want or cfg.shadow_backend is not None:
            raise ValueError(f"pool must be built for pool_config(model, cfg) = {want} (and no shadow_backend), "
                             f"got {pool.cfg}")  # fmt: skip
        self.pool: GDNStateBackend = pool
        self.kv = KVCache(len(mc.attention_layers), cfg.max_slots, cfg.max_len, mc.num_kv_heads, mc.head_dim,
                          dtype=self.dtype, device=self.device)  # fmt: skip
        self.drafter: MTPDrafter | None = None
        if cfg.device_drafter is not None:
            if cfg.device_drafter != "mtp":
                raise ValueError(f"device_drafter must be None or 'mtp', got {cfg.device_drafter!r}")
            self.drafter = MTPDrafter(model, num_slots=cfg.max_slots, max_len=cfg.max_len, window=cfg.window)
        self._graphs: dict[tuple, tuple] = {}
        self._in_flight: tuple[torch.Tensor, int] | None = None  # (slots [B] on the device, B) awaiting commit

    @property
    def num_free(self) -> int:
        return self.pool.num_free

    def alloc(self) -> int:
        slot = self.pool.alloc(1)
        self.kv.reset(slot)
        return int(slot[0])

    def free(self, slot: int) -> None:
        self.pool.free(self._slots([slot]))

    def _slots(self, ids: list[int]) -> torch.Tensor:
        return torch.tensor(ids, dtype=torch.int32, device=self.device)

    @torch.no_grad()
    def prefill(self, slot: int, ids: list[int]) -> torch.Tensor:
        """Run a whole prompt into a fresh slot; returns the logits of its last token [vocab] (fp32)."""
        if len(ids) + self.cfg.window > self.cfg.max_len:
            raise ValueError(
                f"prompt of {len(ids)} tokens + window {self.cfg.window} exceeds max_len {self.cfg.max_len}"
            )
        slots = self._slots([slot])
        t = torch.tensor(ids, dtype=torch.long, device=self.device)
        step = Step.build(StepKind.PREFILL, slots, len(ids), self.kv)
        hidden = self.model.hidden(t, step, self.pool, self.kv)
        if self.drafter is not None:
            self.drafter.prefill(slot, t, hidden)
        self.kv.commit(slots, torch.tensor([len(ids)], dtype=torch.int32, device=self.device))
        return self.model.lm_head(hidden[-1]).float()

    @torch.no_grad()
    def step(self, slots: list[int], tokens: torch.Tensor) -> torch.Tensor:
        """One step for the rows ``slots``: tokens [B, T] long, T = 1 a plain decode, T > 1 a verify of the
        window. Returns logits [B, T, vocab] fp32. Nothing is advanced until ``commit``."""
        return self._run(slots, tokens, draft=False)[0]

    @torch.no_grad()
    def draft_and_verify(self, slots: list[int], last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One verify step whose T-1 drafts the device drafter writes inside the step. last: [B] long, each
        row's last emitted token. Returns logits [B, T, vocab] fp32 and the verified window [B, T] long."""
        if self.drafter is None:
            raise ValueError("draft_and_verify needs a device drafter: RunnerConfig(device_drafter='mtp')")
        return self._run(slots, last.reshape(-1, 1), draft=True)

    def _forward(self, kind: StepKind, slots: torch.Tensor, tokens: torch.Tensor, T: int, contiguous: bool,
                 draft: bool) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """Everything on the device (graph-capturable). tokens: [B, T], or [B, 1] when drafting."""
        step = Step.build(kind, slots, T, self.kv, contiguous=contiguous)
        window = torch.cat([tokens, self.drafter.propose(step, tokens[:, 0])], 1) if draft else tokens
        hidden = self.model.hidden(window.reshape(-1), step, self.pool, self.kv)
        if self.drafter is not None:
            self.drafter.observe(step, window, hidden)
        return self.model.lm_head(hidden).view(slots.shape[0], T, -1), window

    def _run(self, slots: list[int], tokens: torch.Tensor, draft: bool) -> tuple[torch.Tensor, torch.Tensor]:
        if self._in_flight is not None:
            raise RuntimeError("the previous step is not committed yet; commit() it first")
        B = tokens.shape[0]
        T = self.cfg.window if draft else tokens.shape[1]
        kind = StepKind.DECODE if T == 1 else StepKind.VERIFY
        contiguous = slots == list(range(B))
        if not self.use_graphs:
            s = self._slots(slots)
            logits, window = self._forward(kind, s, tokens.to(self.device), T, contiguous, draft)
            self._in_flight = (s, B)
            return logits.float(), window
        Bg = _padded(B)
        key = (kind, Bg, T, contiguous, draft)
        if key not in self._graphs:
            self._graphs[key] = self._capture(kind, Bg, T, contiguous, draft)
        graph, ids_buf, slots_buf, (logits, window) = self._graphs[key]
        ids_buf.zero_()
        ids_buf[:B].copy_(tokens)
        slots_buf.fill_(-1)
        slots_buf[:B].copy_(torch.tensor(slots, dtype=torch.int32))
        graph.replay()
        self._in_flight = (slots_buf[:B], B)
        return logits[:B].float(), window[:B]

    def _capture(self, kind: StepKind, B: int, T: int, contiguous: bool, draft: bool):
        ids_buf = torch.zeros(B, 1 if draft else T, dtype=torch.long, device=self.device)
        slots_buf = torch.full((B,), -1, dtype=torch.int32, device=self.device)

        def run():
            return self._forward(kind, slots_buf, ids_buf, T, contiguous, draft)

        # Warm-up (compiles kernels) on padding rows only: no state is touched.
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            run()
            run()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = run()
        return g, ids_buf, slots_buf, out

    def commit(self, num_accepted: list[int]) -> None:
        """End the step in flight: keep ``num_accepted[i]`` tokens (bonus included; 1 after a decode) of row
        i's window in the GDN state and the KV cache of every layer."""
        if self._in_flight is None:
            raise RuntimeError("no step to commit")
        slots, B = self._in_flight
        if len(num_accepted) != B:
            raise ValueError(f"num_accepted has {len(num_accepted)} entries for a step of {B} rows")
        n = torch.tensor(num_accepted, dtype=torch.int32).to(self.device)
        self.pool.commit(slots, n)
        self.kv.commit(slots, n)
        if self.drafter is not None:
            self.drafter.commit(slots, n)
        self._in_flight = None

    def offload(self, slot: int) -> ParkedRequest:
        """Move a committed slot's state (GDN checkpoint, ring, cursors, conv; KV rows; drafter state) to the CPU
        and free it."""
        s = self._slots([slot])
        drafter = self.drafter.park(s) if self.drafter is not None else None
        parked = ParkedRequest(self.pool.offload(s), self.kv.gather(s), drafter)
        self.pool.free(s)
        return parked

    def restore(self, parked: ParkedRequest) -> int:
        """A new slot holding ``parked``; it continues bit for bit where it stopped."""
        if (self.drafter is None) != (parked.drafter is None):
            raise ValueError("parked with a different drafter setup than this runner's (device_drafter)")
        slot = self.pool.restore(parked.gdn)
        self.kv.scatter(slot, parked.kv)
        if self.drafter is not None:
            self.drafter.unpark(slot, parked.drafter)
        return int(slot[0])

    def states_equal(self, slots: list[int]) -> bool:
        """With ``shadow_backend``: the committed states of both pools are bitwise equal at every layer."""
        if not isinstance(self.pool, LockstepPool):
            raise ValueError("states_equal needs RunnerConfig(shadow_backend=...)")
        return self.pool.states_equal(self._slots(slots))

    def memory_report(self) -> dict[str, int]:
        return self.pool.memory_report()
