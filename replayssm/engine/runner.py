"""ModelRunner: the GPU side of the engine -- model, GDN state backend, KV cache, CUDA graphs.

It knows nothing about requests or text: it prefills a slot from token ids, runs one verify/decode
step for a batch of slots, and commits the accepted counts to the GDN state and the KV cache together.
Steps are captured in CUDA graphs for a short list of batch sizes (the batch is padded with slot -1
rows up to the next size). With a device drafter (``RunnerConfig(device_drafter="mtp")``),
``draft_and_verify`` drafts the window inside the step, in the same graph as the verify
(``engine.drafter.DeviceDrafter``).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, replace

import torch

from ..models.model import HybridLM
from ..models.step import Step, StepKind
from ..ops.ring import ring_length_for
from ..state import GDNStatePool, PoolConfig
from ..state.backend import GDNStateBackend, Parked
from ..state.config import BACKENDS
from ..state.kv import KVCache
from ..state.lockstep import LockstepPool
from .mtp import MTPDrafter

GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class RunnerConfig:
    """``window`` = T (last accepted token + drafts; 1 = plain decode only). ``ring_len``: the shortest ring the
    replay backend may use; the pool's ring is ``ring_length_for(window, at_least=ring_len)``, the smallest power
    of two >= 2 * window and >= ring_len. ``validate``: the pool's host-side protocol checks (turned off
    automatically with CUDA graphs). ``shadow_backend``: a second pool fed the same inputs (``LockstepPool``),
    for bitwise checks. Errors name the field as the caller passed it (``window=``, ``ring_len=``, ...)."""

    backend: str = "replay"
    max_slots: int = 16
    max_len: int = 1024
    window: int = 4
    ring_len: int = 16
    cuda_graphs: bool = True
    validate: bool = True
    shadow_backend: str | None = None
    device_drafter: str | None = None  # "mtp": draft inside the step with the model's MTP head (window >= 2)

    def __post_init__(self):
        for name in ("max_slots", "max_len", "window", "ring_len"):
            val = getattr(self, name)
            if not isinstance(val, int) or isinstance(val, bool) or val < 1:
                raise ValueError(f"{name}={val!r}: must be a positive int")
        if self.ring_len & (self.ring_len - 1):
            raise ValueError(f"ring_len={self.ring_len}: must be a power of two (the ring grows to fit the window)")
        for name in ("backend", "shadow_backend"):
            val = getattr(self, name)
            if not (val is None and name == "shadow_backend") and val not in BACKENDS:
                raise ValueError(f"{name}={val!r}: must be one of {BACKENDS}")
        for name in ("cuda_graphs", "validate"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}={getattr(self, name)!r}: must be a bool")
        if self.window + 1 > self.max_len:
            raise ValueError(f"max_len={self.max_len} leaves no room for a prompt and a window of {self.window}")
        if self.device_drafter not in (None, "mtp"):
            raise ValueError(f"device_drafter must be None or 'mtp', got {self.device_drafter!r}")

    @property
    def ring_length(self) -> int:
        """The ring length L of the replay pool: a power of two >= 2 * window and >= ring_len."""
        return ring_length_for(self.window, at_least=self.ring_len)


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
        window=cfg.window, ring_len=cfg.ring_length, backend=cfg.backend, dtype=p.dtype,
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
        self._in_flight: tuple[torch.Tensor, int, int] | None = None  # (slots [B] on the device, B, T) to commit

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

    def check_token_ids(self, ids, name: str = "token ids") -> None:
        """``ids``: a 1-D or 2-D integer tensor, or a sequence of ints, all in [0, vocab)."""
        vocab = self.model.config.vocab_size
        if isinstance(ids, torch.Tensor):
            if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
                raise TypeError(f"{name} must be integers, got a {ids.dtype} tensor")
            bad = ids[(ids < 0) | (ids >= vocab)].tolist() if ids.numel() else []
        else:
            wrong = [t for t in ids if not isinstance(t, numbers.Integral) or isinstance(t, bool)]
            if wrong:
                raise TypeError(f"{name} must be ints, got {wrong[:3]!r}")
            bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"{name} {bad[:5]} are outside the vocabulary [0, {vocab})")

    @torch.no_grad()
    def prefill(self, slot: int, ids: list[int]) -> torch.Tensor:
        """Run a whole prompt into a fresh slot; returns the logits of its last token [vocab] (fp32). On failure the
        slot's state is unspecified (free it)."""
        if len(ids) == 0:
            raise ValueError("a prompt must hold at least one token")
        self.check_token_ids(ids, "prompt token ids")
        if len(ids) + self.cfg.window > self.cfg.max_len:
            raise ValueError(
                f"prompt of {len(ids)} tokens + window {self.cfg.window} exceeds max_len={self.cfg.max_len}"
            )
        slots = self._slots([slot])
        t = torch.tensor(ids, dtype=torch.long, device=self.device)
        step = Step.build(StepKind.PREFILL, slots, len(ids), self.kv)
        hidden = self.model.hidden(t, step, self.pool, self.kv)
        if self.drafter is not None:
            self.drafter.prefill(slot, t, hidden)
        self.kv.commit(slots, torch.tensor([len(ids)], dtype=torch.int32, device=self.device))
        return self.model.lm_head(hidden[-1]).float()

    def _check_step(self, slots: list[int], tokens: torch.Tensor) -> None:
        if self._in_flight is not None:
            raise RuntimeError("the previous step is not committed yet; commit() or abort() it first")
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
            raise ValueError(f"tokens must be a [B, T] tensor, got {tokens!r:.80}")
        B, T = tokens.shape
        if not 1 <= T <= self.cfg.window:
            raise ValueError(f"tokens has windows of {T} tokens; this runner verifies 1..{self.cfg.window} (window=)")
        if not isinstance(slots, (list, tuple)) or len(slots) != B or B == 0:
            raise ValueError(f"slots must list one slot per row of tokens ({B} rows), got {slots!r:.80}")
        wrong = [s for s in slots if not isinstance(s, numbers.Integral) or isinstance(s, bool)]
        if wrong or len(set(slots)) != B or not all(0 <= s < self.cfg.max_slots for s in slots):
            raise ValueError(f"slots must be {B} distinct ints in [0, {self.cfg.max_slots}), got {list(slots)}")
        self.check_token_ids(tokens)

    @torch.no_grad()
    def step(self, slots: list[int], tokens: torch.Tensor) -> torch.Tensor:
        """One step for the rows ``slots``: tokens [B, T] long, T = 1 a plain decode, T > 1 a verify of the
        window. Returns logits [B, T, vocab] fp32. Nothing is advanced until ``commit``; if the step fails it
        is aborted (``abort``) before the exception propagates."""
        self._check_step(slots, tokens)
        return self._run(slots, tokens, draft=False)[0]

    @torch.no_grad()
    def draft_and_verify(self, slots: list[int], last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One verify step whose T-1 drafts the device drafter writes inside the step. last: [B] long, each
        row's last emitted token. Returns logits [B, T, vocab] fp32 and the verified window [B, T] long."""
        if self.drafter is None:
            raise ValueError("draft_and_verify needs a device drafter: RunnerConfig(device_drafter='mtp')")
        if not isinstance(last, torch.Tensor) or last.dim() != 1:
            raise ValueError(f"last must be a [B] tensor of token ids, got {last!r:.80}")
        self._check_step(slots, last.reshape(-1, 1))
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
        B = tokens.shape[0]
        T = self.cfg.window if draft else tokens.shape[1]
        kind = StepKind.DECODE if T == 1 else StepKind.VERIFY
        contiguous = list(slots) == list(range(B))
        if not self.use_graphs:
            s = self._slots(list(slots))
            self._in_flight = (s, B, T)
            try:
                logits, window = self._forward(kind, s, tokens.to(self.device), T, contiguous, draft)
            except BaseException:
                self.abort()
                raise
            return logits.float(), window
        Bg = _padded(B)
        key = (kind, Bg, T, contiguous, draft)
        if key not in self._graphs:
            self._graphs[key] = self._capture(kind, Bg, T, contiguous, draft)
        graph, ids_buf, slots_buf, (logits, window) = self._graphs[key]
        ids_buf.zero_()
        ids_buf[:B].copy_(tokens)
        slots_buf.fill_(-1)
        slots_buf[:B].copy_(torch.tensor(list(slots), dtype=torch.int32))
        graph.replay()
        self._in_flight = (slots_buf[:B], B, T)
        return logits[:B].float(), window[:B]

    def abort(self) -> None:
        """Drop the step in flight, if any: the GDN state and the KV cache keep their committed contents (the
        window's KV entries past the committed length are overwritten by the next step). A device drafter's
        observed window is not rolled back: later drafts may differ from an unaborted run, outputs do not."""
        if self._in_flight is None:
            return
        slots = self._in_flight[0]
        self._in_flight = None
        self.pool.abort(slots)

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
        slots, B, T = self._in_flight
        if not isinstance(num_accepted, (list, tuple)) or len(num_accepted) != B:
            got = len(num_accepted) if isinstance(num_accepted, (list, tuple)) else type(num_accepted).__name__
            raise ValueError(f"num_accepted has {got} entries for a step of {B} rows")
        bad = [n for n in num_accepted if not isinstance(n, numbers.Integral) or isinstance(n, bool) or not 1 <= n <= T]
        if bad:
            raise ValueError(f"num_accepted {bad} outside [1, {T}] (the step's window)")
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
        """A new slot holding ``parked``; it continues bit for bit where it stopped. Refused, with nothing
        allocated, when ``parked`` does not fit this runner."""
        if not isinstance(parked, ParkedRequest):
            raise TypeError(f"parked must be a ParkedRequest (from offload), got {type(parked).__name__}")
        if (self.drafter is None) != (parked.drafter is None):
            raise ValueError("parked with a different drafter setup than this runner's (device_drafter)")
        self.kv.check_parked(parked.kv, 1)
        self.pool.check_restore(parked.gdn)
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
