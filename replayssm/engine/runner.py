"""ModelRunner: the GPU side of the engine -- model, GDN state backend, paged KV cache, CUDA graphs.

It knows nothing about requests or text: it prefills slots from token ids, runs one verify/decode step for a
batch of slots, and commits the accepted counts to the GDN state and the KV cache together. The engine's path
is ``step_and_commit``: forward, acceptance (``engine.accept``) and commit run on the device as one CUDA graph
(captured for a short list of batch sizes; the batch is padded with slot -1 rows up to the next size), and
only the accepted counts and tokens come back. ``step`` + ``commit`` expose the logits in between (tests,
studies). A device drafter (``RunnerConfig(device_drafter="mtp")``, ``engine.drafter.DeviceDrafter``) drafts
the window inside the step, in the same graph (``step_and_commit(..., device_drafts=True)``, or
``draft_and_verify`` for the logits). Slot allocation and parking (``alloc``, ``free``, ``offload``,
``restore``, ...) are in ``engine/slots.py``.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ..models.model import HybridLM
from ..models.step import Step, StepKind
from ..state import GDNStatePool
from ..state.backend import GDNStateBackend
from ..state.kv import KVCache
from ..state.lockstep import LockstepPool
from . import step_end, weights
from .accept import Greedy, Rule
from .checks import check_acceptance, check_prompts, check_slots, check_token_ids, check_tokens, is_int
from .config import GRAPH_BATCH_SIZES, ParkedRequest, RunnerConfig, padded, pool_config, uses_graphs
from .graphs import DeviceStep, PendingStep, capture
from .mtp import MTPDrafter
from .slots import SlotBook

__all__ = ["GRAPH_BATCH_SIZES", "ModelRunner", "ParkedRequest", "RunnerConfig", "pool_config"]

GREEDY = Greedy()
PREFILL_TOKENS = 8192  # tokens of one prefill forward (prompts of one length are batched up to it)


class ModelRunner(SlotBook):
    """``pool``: a GDN state backend built elsewhere for ``pool_config(model, cfg)`` (e.g. the drift study's
    lockstep pools); default: a ``GDNStatePool`` of ``cfg.backend``, with a lockstep shadow when
    ``cfg.shadow_backend`` is set."""

    def __init__(self, model: HybridLM, cfg: RunnerConfig, *, pool: GDNStateBackend | None = None):
        self.model, self.cfg = model, cfg
        mc = model.config
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.use_graphs = uses_graphs(model, cfg)
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
            self.drafter = MTPDrafter(model, num_slots=cfg.max_slots, max_len=cfg.max_len, window=cfg.window,
                                      head=cfg.draft_head, vocab=cfg.draft_vocab)  # fmt: skip
        self._graphs: dict[tuple, tuple] = {}
        self._graph_pool = torch.cuda.graph_pool_handle() if self.use_graphs else None
        self._weights_at = next(model.parameters()).data_ptr()  # where the steps are captured (engine/weights.py)
        self._in_flight: tuple[torch.Tensor, list[int], int] | None = None  # (slots on the device, on the host, T)
        self._committing: list | None = None  # a commit that began: [counts, saved counters, pool done] (``commit``)
        self.pending: list[PendingStep] = []  # launched engine steps not finished yet, oldest first (at most 2)
        self._live: set[int] = set()  # allocated slots (host mirror of the pool's books)
        self.lost: set[int] = set()  # slots whose state a failed step destroyed (recurrent decode): only free()

    def weights_moved(self) -> None:
        """The model's weights have new memory or values since the steps were captured: capture them again
        (``engine.weights.weights_moved``; a step finds a ``.to()`` round trip itself). Refused while a step is in
        flight."""
        weights.weights_moved(self)

    def check_token_ids(self, ids, name: str = "token ids") -> None:
        """``ids``: an integer tensor, or a sequence of ints, all in [0, vocab)."""
        check_token_ids(ids, self.model.config.vocab_size, name)

    @torch.no_grad()
    def prefill(self, slot: int | list[int], ids: list[int] | list[list[int]]) -> torch.Tensor:
        """Run whole prompts into fresh slots: one slot and its prompt, or lists of them (prompts of one length
        run as one batch). Returns the logits of each prompt's last token, [vocab] or [n, vocab] (fp32).
        Everything is checked first; if the model fails half-way, the slots' states are unspecified (free them)."""
        if is_int(slot):
            return self.prefill([int(slot)], [ids])[0]
        check_prompts(ids, self.model.config.vocab_size, self.cfg.window, self.cfg.max_len)
        slot = check_slots(slot, len(ids), self._live)
        self._check_idle(slot)
        self._check_not_lost(slot)
        held = [s for s in slot if self._lens[s]]
        if held:  # a prefill starts a request: on a slot that holds tokens it would not continue them exactly
            raise ValueError(f"slots {held} already hold tokens; prefill takes fresh slots (alloc(), or free() and "
                             "alloc() again)")  # fmt: skip
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

    def _check_step(self, slots, tokens, chained: bool = False, device_drafts=False) -> tuple[list[int], int, int]:
        """Host checks of a step, before anything is reserved or launched: tokens [B, T] ids in the vocabulary,
        1 <= T <= window (T = 1 with ``device_drafts``: the drafter fills the window), ``slots`` B distinct allocated
        slots, none lost, no step in flight (but the one a chained ``launch`` follows)."""
        if self._in_flight is not None:
            raise RuntimeError("the previous step is not committed yet; commit() or abort() it first")
        if len(self.pending) > chained:
            raise RuntimeError("a launched step is not finished yet; finish() it first")
        B, T = check_tokens(tokens, 1 if device_drafts else self.cfg.window, device_drafts is True)
        slots = check_slots(slots, B, self._live)
        self._check_not_lost(slots)
        self.check_token_ids(tokens)
        weights.check_weights(self)
        return slots, B, T

    def _begin(self, slots: list[int], T: int, ahead: int = 0) -> StepKind:
        """Reserve the step's KV pages (raises before anything changes when they do not fit); ``ahead``: tokens
        the step in flight may still add to every row (its window)."""
        self.kv.reserve(slots, [self._lens[s] + ahead + T for s in slots])
        return StepKind.DECODE if T == 1 else StepKind.VERIFY

    @torch.no_grad()
    def step(self, slots: list[int], tokens: torch.Tensor) -> torch.Tensor:
        """One step for the rows ``slots``: tokens [B, T] long, T = 1 a plain decode, T > 1 a verify of the
        window. Returns logits [B, T, vocab] fp32. Nothing is advanced until ``commit``; if the step fails it
        is aborted (``abort``) before the exception propagates."""
        slots, _, _ = self._check_step(slots, tokens)
        return self._run(slots, tokens, draft=False)[0]

    @torch.no_grad()
    def draft_and_verify(self, slots: list[int], last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One verify step whose T-1 drafts the device drafter writes inside the step. last: [B] long, each
        row's last emitted token. Returns logits [B, T, vocab] fp32 and the verified window [B, T] long."""
        if self.drafter is None:
            raise ValueError("draft_and_verify needs a device drafter: RunnerConfig(device_drafter='mtp')")
        if not isinstance(last, torch.Tensor) or last.dim() != 1:
            raise ValueError(f"last must be a [B] tensor of token ids, got {last!r:.80}")
        slots, _, _ = self._check_step(slots, last.reshape(-1, 1))
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
            self._committing = None
            self._in_flight = (s, slots, T)
            try:
                step = Step.build(kind, s, T, self.kv, contiguous=slots == list(range(B)))
                logits, window = self._forward(step, tokens.to(self.device), draft)
            except BaseException:
                self.abort()
                raise
            return logits.float(), window
        key = ("logits", kind, padded(B), T, draft)
        if key not in self._graphs:
            self._graphs[key] = self._capture_logits(kind, padded(B), T, draft)
        graph, ids_buf, slots_buf, (logits, window) = self._graphs[key]
        ids_buf.zero_()
        ids_buf[:B, : tokens.shape[1]].copy_(tokens)
        slots_buf.fill_(-1)
        slots_buf[:B].copy_(torch.tensor(slots, dtype=torch.int32))
        graph.replay()
        self._committing = None
        self._in_flight = (slots_buf[:B], slots, T)
        return logits[:B].float(), window[:B]

    def abort(self) -> None:
        """Drop the step in flight of ``step``/``draft_and_verify``, if any: the GDN state and the KV cache keep
        their committed contents, but for the slots it adds to ``lost`` (``GDNStatePool.abort``). The window's KV
        entries past the committed length are overwritten by the next step; its reserved pages stay with the
        slot until ``free``. A device drafter's observed window is not rolled back: later drafts may differ from
        an unaborted run, outputs do not. After a ``commit`` that failed part-way: ``engine/step_end.py``."""
        step_end.abort(self)

    def _capture_logits(self, kind: StepKind, B: int, T: int, draft: bool):
        ids_buf = torch.zeros(B, T, dtype=torch.long, device=self.device)
        slots_buf = torch.full((B,), -1, dtype=torch.int32, device=self.device)

        def run():
            return self._forward(Step.build(kind, slots_buf, T, self.kv), ids_buf, draft)

        g, out = capture(run, self._graph_pool)  # warm-up on padding rows only: no state is touched
        return g, ids_buf, slots_buf, out

    def commit(self, num_accepted: list[int]) -> None:
        """End the step in flight: keep ``num_accepted[i]`` tokens (bonus included; 1 after a decode) of row
        i's window in the GDN state and the KV cache of every layer. With a validating pool (``validate``, the
        default without CUDA graphs), a commit that raised part-way (a failed launch, an interrupt) is finished by
        calling it again with the same counts, which gives what one call would have, or rolled back by ``abort``
        until the GDN state has taken it (``engine/step_end.py``); without, nothing on the host tells how far it
        got."""
        step_end.commit(self, num_accepted)

    @torch.no_grad()
    def step_and_commit(self, slots: list[int], tokens: torch.Tensor, num_drafts: list[int] | None,
                        rule: Rule = GREEDY, *, prescribed: list[int] | None = None,
                        uniforms: torch.Tensor | None = None, temperature: float = 1.0,
                        device_drafts: bool = False) -> tuple[list[int], list[list[int]]]:  # fmt: skip
        """The engine's step: forward, acceptance on the device by ``rule`` and commit, in one CUDA graph.

        tokens [B, T] long (CPU): each row's window, last emitted token first; num_drafts[i]: how many of row
        i's T-1 drafts are real (the rest is padding, never accepted). With ``device_drafts`` the runner's device
        drafter writes the window - 1 (T - 1) drafts inside the step (same graph): tokens is [B, 1], the last emitted
        tokens, and num_drafts is None. ``Sampling`` reads ``uniforms`` [B, 2T] (fp32, from the caller's seeded
        generator) and ``temperature``; ``Prescribed`` reads ``prescribed``. Returns (num_accepted, tokens
        produced) per row; nothing else comes back from the device. ``launch`` + ``finish`` are the same step in
        two halves."""
        return self.finish(self.launch(slots, tokens, num_drafts, rule, prescribed=prescribed, uniforms=uniforms,
                                       temperature=temperature, device_drafts=device_drafts))  # fmt: skip

    @torch.no_grad()
    def launch(self, slots: list[int], tokens: torch.Tensor | None, num_drafts: list[int] | None,
               rule: Rule = GREEDY, *, prescribed: list[int] | None = None, uniforms: torch.Tensor | None = None,
               temperature: float = 1.0, device_drafts: bool = False) -> PendingStep:  # fmt: skip
        """Enqueue ``step_and_commit``'s step without waiting for it; ``finish`` returns its results. Everything is
        checked, and the KV pages reserved, before anything is enqueued.

        ``tokens`` None chains the step to the one in flight (``pending``): the same rows in the same order, the
        same window and rule, launched before that step's results are read. Every token of each row's window is
        then that row's last emitted token of the step in flight, taken on the device (a plain decode, a device
        drafted window, or drafts that are the last token repeated), so the host never waits between the two."""
        after = self._chain_check(slots, device_drafts) if tokens is None else None
        if after is not None:  # a placeholder window of the right shape; the device fills it
            tokens = torch.zeros(len(slots), 1 if device_drafts else after.T, dtype=torch.long)
        slots, B, T = self._check_step(slots, tokens, after is not None, device_drafts)
        drafter_window = self.cfg.window if self.drafter is not None else None
        nd, rest = check_acceptance(B, T, num_drafts, rule, prescribed, uniforms, temperature, device_drafts,
                                    drafter_window)  # fmt: skip
        if device_drafts:
            T = self.cfg.window
            tokens = torch.cat([tokens, tokens.new_zeros(B, T - 1)], 1)
        if after is not None and (type(rule) is not after.rule or T != after.T):
            raise ValueError(f"a chained step keeps the rule and window of the step in flight ({after.rule.__name__}, "
                             f"T={after.T}), got {type(rule).__name__}, T={T}")  # fmt: skip
        kind = self._begin(slots, T, ahead=after.T if after is not None else 0)
        Bg = padded(B) if self.use_graphs else B
        key = ("step", kind, Bg, T, type(rule), device_drafts)
        saved = None if self.use_graphs else [c.clone() for c in step_end.counters(self)]  # (eager: it may fail)
        ds = None
        try:
            if key not in self._graphs:
                self._graphs[key] = DeviceStep(self, kind, Bg, T, rule, device_drafts)
            ds = self._graphs[key]
            launched = ds.launch(slots, None if after else tokens, nd, *rest, after=after.launched if after else None)
            step = PendingStep(slots, T, type(rule), launched)
        except BaseException:  # nothing of the step is committed; ``lost`` lists slots it destroyed anyway
            step_end.undo_launch(self, slots, saved, ds)
            raise
        self.pending.append(step)
        return step

    def _chain_check(self, slots, device_drafts: bool) -> PendingStep:
        if not isinstance(slots, (list, tuple)):
            raise ValueError(f"slots must list the rows of the step in flight, got {slots!r:.80}")
        if len(self.pending) != 1:
            raise RuntimeError(f"tokens=None chains to the one step in flight; {len(self.pending)} are in flight")
        after = self.pending[0]
        if list(slots) != after.slots:
            raise ValueError(f"a chained step has the rows of the step in flight ({after.slots}), got {list(slots)!r}")
        if not isinstance(device_drafts, bool):
            raise TypeError(f"device_drafts must be a bool, got {device_drafts!r}")
        return after

    def finish(self, step: PendingStep) -> tuple[list[int], list[list[int]]]:
        """Wait for the oldest step in flight (``step``) and return its (num_accepted, tokens produced) per row."""
        if not self.pending or self.pending[0] is not step:
            raise ValueError("finish() takes the oldest step in flight (runner.pending[0])")
        res = step.launched.result()
        self.pending.pop(0)
        n = res[:, 0].tolist()
        for s, k in zip(step.slots, n):
            self._lens[s] += k
        return n, [row[1 : 1 + k] for row, k in zip(res.tolist(), n)]
