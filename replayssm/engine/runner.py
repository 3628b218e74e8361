"""ModelRunner: the GPU side of the engine -- model, GDN state backend, paged KV cache, CUDA graphs.

It knows nothing about requests or text: it prefills slots from token ids, runs one verify/decode step for a
batch of slots, and commits the accepted counts to the GDN state and the KV cache together. The engine's path
is ``step_and_commit``: forward, acceptance (``engine.accept``) and commit run on the device as one CUDA graph
(captured for a short list of batch sizes; the batch is padded with slot -1 rows up to the next size), and
only the accepted counts and tokens come back. ``step`` + ``commit`` expose the logits in between (tests,
studies). A device drafter (``RunnerConfig(device_drafter="mtp")``, ``engine.drafter.DeviceDrafter``) drafts
the window inside the step, in the same graph (``step_and_commit(..., device_drafts=True)``, or
``draft_and_verify`` for the logits).
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
from .accept import Greedy, Rule
from .graphs import DeviceStep, capture
from .mtp import MTPDrafter

GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
GREEDY = Greedy()
PREFILL_TOKENS = 8192  # tokens of one prefill forward (prompts of one length are batched up to it)


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
    kv_tokens: int | None = None  # paged KV memory shared by all slots, in tokens (None: max_len for every slot)
    page_size: int = 64  # KV cache page, in tokens
    device_drafter: str | None = None  # "mtp": draft inside the step with the model's MTP head (window >= 2)
    draft_head: str = "auto"  # the device drafter's LM head: "model", "fp8" or "auto" (engine/draft_head.py)


@dataclass(frozen=True)
class ParkedRequest:
    """A preempted request's state on the CPU: its GDN slots, its KV cache rows, its device drafter's state."""

    gdn: Parked
    kv: dict[str, torch.Tensor]
    drafter: dict | None = None


def _padded(n: int) -> int:
    return next((b for b in GRAPH_BATCH_SIZES if b >= n), n)


def _uses_graphs(model: HybridLM, cfg: RunnerConfig) -> bool:
    return cfg.cuda_graphs and next(model.parameters()).is_cuda


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
        pages = None if cfg.kv_tokens is None else -(-cfg.kv_tokens // cfg.page_size)
        self.kv = KVCache(len(mc.attention_layers), cfg.max_slots, cfg.max_len, mc.num_kv_heads, mc.head_dim,
                          dtype=self.dtype, device=self.device, page_size=cfg.page_size, num_pages=pages)  # fmt: skip
        self._lens = [0] * cfg.max_slots  # host mirror of kv.lens: pages are reserved from it, never read back
        model.fuse_projections()
        self.drafter: MTPDrafter | None = None  # its propose/observe/commit run inside the step (``_forward``)
        if cfg.device_drafter is not None:
            if cfg.device_drafter != "mtp":
                raise ValueError(f"device_drafter must be None or 'mtp', got {cfg.device_drafter!r}")
            self.drafter = MTPDrafter(model, num_slots=cfg.max_slots, max_len=cfg.max_len, window=cfg.window,
                                      head=cfg.draft_head)  # fmt: skip
        self._graphs: dict[tuple, tuple] = {}
        self._graph_pool = torch.cuda.graph_pool_handle() if self.use_graphs else None
        self._in_flight: tuple[torch.Tensor, list[int]] | None = None  # slots on the device and the host

    @property
    def num_free(self) -> int:
        return self.pool.num_free

    def alloc(self) -> int:
        slot = self.pool.alloc(1)
        self.kv.reset(slot)
        s = int(slot[0])
        self._lens[s] = 0
        return s

    def free(self, slot: int) -> None:
        self.pool.free(self._slots([slot]))
        self.kv.release([slot])

    def _slots(self, ids: list[int]) -> torch.Tensor:
        return torch.tensor(ids, dtype=torch.int32, device=self.device)

    @torch.no_grad()
    def prefill(self, slot: int | list[int], ids: list[int] | list[list[int]]) -> torch.Tensor:
        """Run whole prompts into fresh slots: one slot and its prompt, or lists of them (prompts of one length
        run as one batch). Returns the logits of each prompt's last token, [vocab] or [n, vocab] (fp32)."""
        if isinstance(slot, int):
            return self.prefill([slot], [ids])[0]
        longest = max(len(p) for p in ids)
        if longest + self.cfg.window > self.cfg.max_len:
            raise ValueError(
                f"prompt of {longest} tokens + window {self.cfg.window} exceeds max_len {self.cfg.max_len}"
            )
        self.kv.reserve(slot, [len(p) + self.cfg.window for p in ids])
        out = torch.empty(len(slot), self.model.config.vocab_size, dtype=torch.float32, device=self.device)
        for P in sorted({len(p) for p in ids}):
            same = [i for i, p in enumerate(ids) if len(p) == P]
            per = max(1, PREFILL_TOKENS // P)  # bounds the activations of one forward
            for rows in (same[j : j + per] for j in range(0, len(same), per)):
                slots = self._slots([slot[i] for i in rows])
                t = torch.tensor([ids[i] for i in rows], dtype=torch.long, device=self.device).view(-1)
                step = Step.build(StepKind.PREFILL, slots, P, self.kv)
                hidden = self.model.hidden(t, step, self.pool, self.kv)  # [len(rows) * P, D]
                if self.drafter is not None:
                    for j, i in enumerate(rows):
                        self.drafter.prefill(slot[i], t[j * P : (j + 1) * P], hidden[j * P : (j + 1) * P])
                self.kv.commit(slots, torch.full((len(rows),), P, dtype=torch.int32, device=self.device))
                last = hidden.view(len(rows), P, -1)[:, -1]
                out[torch.tensor(rows, device=self.device)] = self.model.lm_head(last).float()
                for i in rows:
                    self._lens[slot[i]] = P
        return out

    def _begin(self, slots: list[int], T: int) -> StepKind:
        if self._in_flight is not None:
            raise RuntimeError("the previous step is not committed yet; commit() it first")
        self.kv.reserve(slots, [self._lens[s] + T for s in slots])
        return StepKind.DECODE if T == 1 else StepKind.VERIFY

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

    def _forward(self, step: Step, window: torch.Tensor, draft: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The model on a step's window [B, T] (graph-capturable); with ``draft`` only its first column is read
        and the device drafter writes the rest. Returns logits [B, T, vocab] (model dtype) and the window."""
        if draft:
            window = torch.cat([window[:, :1], self.drafter.propose(step, window[:, 0])], 1)
        hidden = self.model.hidden(window.reshape(-1), step, self.pool, self.kv)
        if self.drafter is not None:
            self.drafter.observe(step, window, hidden)
        return self.model.lm_head(hidden).view(step.B, step.T, -1), window

    def _run(self, slots: list[int], tokens: torch.Tensor, draft: bool) -> tuple[torch.Tensor, torch.Tensor]:
        B = tokens.shape[0]
        T = self.cfg.window if draft else tokens.shape[1]
        kind = self._begin(slots, T)
        if not self.use_graphs:
            s = self._slots(slots)
            step = Step.build(kind, s, T, self.kv, contiguous=slots == list(range(B)))
            logits, window = self._forward(step, tokens.to(self.device), draft)
            self._in_flight = (s, list(slots))
            return logits.float(), window
        key = ("logits", kind, _padded(B), T, draft)
        if key not in self._graphs:
            self._graphs[key] = self._capture_logits(kind, _padded(B), T, draft)
        graph, ids_buf, slots_buf, (logits, window) = self._graphs[key]
        ids_buf.zero_()
        ids_buf[:B, : tokens.shape[1]].copy_(tokens)
        slots_buf.fill_(-1)
        slots_buf[:B].copy_(torch.tensor(slots, dtype=torch.int32))
        graph.replay()
        self._in_flight = (slots_buf[:B], list(slots))
        return logits[:B].float(), window[:B]

    def _capture_logits(self, kind: StepKind, B: int, T: int, draft: bool):
        ids_buf = torch.zeros(B, T, dtype=torch.long, device=self.device)
        slots_buf = torch.full((B,), -1, dtype=torch.int32, device=self.device)

        def run():
            return self._forward(Step.build(kind, slots_buf, T, self.kv), ids_buf, draft)

        g, out = capture(run, self._graph_pool)  # warm-up on padding rows only: no state is touched
        return g, ids_buf, slots_buf, out

    def commit(self, num_accepted: list[int]) -> None:
        """End the step in flight: keep ``num_accepted[i]`` tokens (bonus included; 1 after a decode) of row
        i's window in the GDN state and the KV cache of every layer."""
        if self._in_flight is None:
            raise RuntimeError("no step to commit")
        slots, ids = self._in_flight
        if len(num_accepted) != len(ids):
            raise ValueError(f"num_accepted has {len(num_accepted)} entries for a step of {len(ids)} rows")
        n = torch.tensor(num_accepted, dtype=torch.int32).to(self.device)
        self.pool.commit(slots, n)
        self.kv.commit(slots, n)
        if self.drafter is not None:
            self.drafter.commit(slots, n)
        for s, k in zip(ids, num_accepted):
            self._lens[s] += k
        self._in_flight = None

    @torch.no_grad()
    def step_and_commit(self, slots: list[int], tokens: torch.Tensor, num_drafts: list[int] | None,
                        rule: Rule = GREEDY, *, prescribed: list[int] | None = None,
                        uniforms: torch.Tensor | None = None, temperature: float = 1.0,
                        device_drafts: bool = False) -> tuple[list[int], list[list[int]]]:  # fmt: skip
        """The engine's step: forward, acceptance on the device by ``rule`` and commit, in one CUDA graph.

        tokens [B, T] long (CPU): each row's window, last emitted token first; num_drafts[i]: how many of row
        i's T-1 drafts are real (the rest is padding, never accepted). With ``device_drafts`` the runner's device
        drafter writes the T = window - 1 drafts inside the step (same graph): tokens is [B, 1], the last emitted
        tokens, and num_drafts is None. ``Sampling`` reads ``uniforms`` [B, 2T] (fp32, from the caller's seeded
        generator) and ``temperature``; ``Prescribed`` reads ``prescribed``. Returns (num_accepted, tokens
        produced) per row; nothing else comes back from the device."""
        B, T = tokens.shape
        if device_drafts:
            if self.drafter is None:
                raise ValueError("device_drafts needs a runner with a device drafter")
            T = self.cfg.window
            tokens = torch.cat([tokens, tokens.new_zeros(B, T - 1)], 1)
            num_drafts = [T - 1] * B
        kind = self._begin(slots, T)
        Bg = _padded(B) if self.use_graphs else B
        key = ("step", kind, Bg, T, type(rule), device_drafts)
        if key not in self._graphs:
            self._graphs[key] = DeviceStep(self, kind, Bg, T, rule, device_drafts)
        res = self._graphs[key].run(slots, tokens, num_drafts, prescribed, uniforms, temperature)
        n = res[:, 0].tolist()
        for s, k in zip(slots, n):
            self._lens[s] += k
        return n, [row[1 : 1 + k] for row, k in zip(res.tolist(), n)]

    def offload(self, slot: int) -> ParkedRequest:
        """Move a committed slot's state (GDN checkpoint, ring, cursors, conv; KV rows; drafter state) to the CPU
        and free it."""
        s = self._slots([slot])
        drafter = self.drafter.park(s) if self.drafter is not None else None
        parked = ParkedRequest(self.pool.offload(s), self.kv.gather(s), drafter)
        self.free(slot)
        return parked

    def restore(self, parked: ParkedRequest) -> int:
        """A new slot holding ``parked``; it continues bit for bit where it stopped."""
        if (self.drafter is None) != (parked.drafter is None):
            raise ValueError("parked with a different drafter setup than this runner's (device_drafter)")
        slot = self.pool.restore(parked.gdn)
        self.kv.scatter(slot, parked.kv)
        self._lens[int(slot[0])] = int(parked.kv["lens"][0])
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

    def kv_len(self, slot: int) -> int:
        """Committed KV length of ``slot`` (host mirror; nothing is read back)."""
        return self._lens[slot]

    def pad_kv(self, slots: list[int], n: int) -> None:
        """FOR BENCHMARKS ONLY: the slots pretend to hold ``n`` more committed tokens, whose keys and values are
        whatever their new pages hold. Memory and attention cost become those of a longer context without
        prefilling it; what the model computes from then on is meaningless."""
        self.kv.reserve(slots, [self._lens[s] + n + self.cfg.window for s in slots])
        self.kv.lens[self._slots(slots).long()] += n
        for s in slots:
            self._lens[s] += n
