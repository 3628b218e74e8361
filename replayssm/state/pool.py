"""GDN state pool: per-request slots across all GDN layers and their speculative lifecycle.

``GDNStatePool`` implements ``GDNStateBackend`` (``state/backend.py`` shows one step).
``backend="recurrent"`` is today's engine: per-token snapshots into a preallocated scratch,
then a copy of the accepted one. ``backend="replay"`` keeps a checkpoint and a ring per slot
and commits by moving cursors; its committed state is bitwise the recurrent one's.

Protocol errors (``SlotError``) and pool exhaustion (``PoolExhaustedError``) are raised before
anything is written, when ``PoolConfig.validate`` is on (the default).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..ops import (
    Ring,
    RingLayers,
    fold_ahead_pays,
    gdn_exact_fold,
    gdn_recurrent,
    gdn_replay_verify,
    ring_mark_folded,
    ring_reset,
)
from ..ops._ints import is_int
from ..ops._validate import check_tensor
from ..ops.conv import causal_conv1d_update
from . import commit as step_end
from . import transfer
from .config import PoolConfig
from .lifecycle import SlotTracker
from .memory import pool_memory_report
from .transfer import ParkedSlots


class GDNStatePool:
    """Every GDN layer's state for ``cfg.num_slots`` slots (the module docstring; README, "State"). Device tensors:
    ``checkpoint`` [layers, S, HV, V, K] fp32, ``conv_state`` [layers, S, W-1, C] and ``conv_scratch``, the replay
    backend's ``ring_layers`` / ``rings`` and ``cursors``, the recurrent backend's ``snapshots``; ``cfg`` is the
    ``PoolConfig`` it was built from."""

    def __init__(self, cfg: PoolConfig):
        self.cfg = cfg
        dev = torch.empty(0, device=cfg.device).device  # normalised: "cuda" -> "cuda:0"
        self.device = dev
        NL, S, B, T = cfg.num_layers, cfg.num_slots, cfg.batch_rows, cfg.window
        # replay: the state at the last fold; recurrent: the committed state. All layers in one tensor.
        self.checkpoint = torch.zeros(NL, S, cfg.HV, cfg.V, cfg.K, dtype=torch.float32, device=dev)
        self.conv_state = torch.zeros(NL, S, cfg.conv_kernel - 1, cfg.channels, dtype=cfg.dtype, device=dev)
        self.conv_scratch = torch.zeros(NL, B, cfg.conv_kernel - 1 + T, cfg.channels, dtype=cfg.dtype, device=dev)
        self.snapshots = None
        self.ring_layers: RingLayers | None = None  # replay: every layer's ring, one allocation per record kind
        self.rings: tuple[Ring, ...] = ()  # ... and each layer's view of it
        if cfg.backend == "recurrent":
            if T > 1:  # window 1 only decodes, in place: no snapshots to keep (and never a ring)
                self.snapshots = torch.empty(NL, B, T, cfg.HV, cfg.V, cfg.K, dtype=torch.float32, device=dev)
        else:
            self.ring_layers = RingLayers.allocate(NL, S, cfg.H, cfg.HV, cfg.K, cfg.V, L=cfg.ring_len, window=T,
                                                   dtype=cfg.dtype, u_dtype=cfg.u_dtype, device=dev)  # fmt: skip
            self.cursors, self.rings = self.ring_layers.cursors, self.ring_layers.layers
        self.tracker = SlotTracker(cfg)
        self._kind: str | None = None  # what the layers of the latest step ran (used with validation off)

    def alloc(self, n: int) -> torch.Tensor:
        """n fresh slots (zero state, zero conv state, empty ring) as an int32 tensor on the pool's device."""
        self.tracker.check_alloc(n)
        ids = self.tracker.peek(n)
        slots = torch.tensor(ids, dtype=torch.int32, device=self.device)
        idx = slots.long()
        self.checkpoint[:, idx] = 0
        self.conv_state[:, idx] = 0
        if self.cfg.backend == "replay":
            ring_reset(self.cursors, slots, validate=False, impl=self.cfg.impl)
        self.tracker.alloc(n)
        return slots

    def free(self, slots: torch.Tensor) -> None:
        """Return ``slots`` to the pool (they must be idle: no step in flight)."""
        self._ids(slots, "slots", padding=False)
        self.tracker.free(self.tracker.check_ids(slots, "slots", padding=False))  # host bookkeeping, always on

    @property
    def num_free(self) -> int:
        """Slots ``alloc`` can still hand out."""
        return self.tracker.num_free

    @property
    def verifies(self) -> bool:
        """Whether this pool takes ``verify`` (every pool but a recurrent one of window 1, which only decodes)."""
        return self.cfg.backend == "replay" or self.snapshots is not None

    def _ids(self, slots, name="slots", padding=True, batch=None) -> list[int]:
        """Check ``slots`` (ids with ``padding`` -1 rows when allowed); ``batch`` (default: ``padding``, a step's
        rows) caps them at ``max_batch``, the rows of the step's scratch."""
        if not isinstance(slots, torch.Tensor) or slots.dtype != torch.int32 or slots.dim() != 1:
            raise TypeError(f"{name} must be a 1-D int32 tensor, got {slots!r:.80}")
        if slots.device != self.device:
            raise ValueError(f"{name} must be on {self.device}, got {slots.device}")
        if not slots.is_contiguous():  # (the kernels need it; checked here, before any call notes a step or commit)
            raise ValueError(f"{name} must be contiguous (shape {tuple(slots.shape)}, stride {slots.stride()})")
        if (padding if batch is None else batch) and slots.shape[0] > self.cfg.batch_rows:
            raise ValueError(f"{name} has {slots.shape[0]} rows, more than PoolConfig.max_batch={self.cfg.batch_rows}")
        return self.tracker.check_ids(slots, name, padding) if self.cfg.validate else []

    def _cu(self, cu_seqlens, rows: int) -> None:
        check_tensor("cu_seqlens", cu_seqlens, shape=(rows + 1,), dtypes=(torch.int32,), device=self.device)

    def _layer(self, layer: int) -> int:
        if not is_int(layer) or not 0 <= layer < self.cfg.num_layers:
            raise ValueError(f"layer must be an int in [0, {self.cfg.num_layers}), got {layer!r}")
        return int(layer)

    def write_prefill(self, layer: int, slots: torch.Tensor, state: torch.Tensor, conv_state: torch.Tensor) -> None:
        """Set the committed state of ``slots`` after prefill: state [n, HV, V, K] fp32, conv_state
        [n, W-1, C] (on any device that holds data: both are copied to the pool's device before either is
        written). The slots' rings must be empty (fresh, or ``flush``ed)."""
        self.check_write_prefill(layer, slots, state, conv_state)
        self._write_prefill(layer, slots, state, conv_state)

    def _write_prefill(self, layer: int, slots: torch.Tensor, state: torch.Tensor, conv_state: torch.Tensor) -> None:
        """``write_prefill`` once its checks passed (``LockstepPool`` runs every pool's checks first, then this)."""
        state, conv_state = (
            transfer.copy_in(t, self.device, self.checkpoint, self.conv_state) for t in (state, conv_state)
        )
        idx = slots.long()
        with torch.no_grad():  # the pool keeps values, never a caller's autograd graph
            self.checkpoint[layer, idx] = state
            self.conv_state[layer, idx] = conv_state

    def check_write_prefill(self, layer: int, slots: torch.Tensor, state: torch.Tensor, conv_state: torch.Tensor):
        """Raise what ``write_prefill`` would raise before changing anything; return quietly otherwise."""
        layer = self._layer(layer)
        ids = self._ids(slots, padding=False)
        n = slots.shape[0]
        cfg = self.cfg
        expected = (
            ("state", state, (n, cfg.HV, cfg.V, cfg.K), torch.float32),
            ("conv_state", conv_state, (n, cfg.conv_kernel - 1, cfg.channels), cfg.dtype),
        )
        for name, t, shape, dt in expected:  # (a wrong type or dtype is a TypeError, a wrong shape a ValueError)
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape or t.dtype != dt:
                got = (tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else type(t).__name__
                error = ValueError if isinstance(t, torch.Tensor) and t.dtype == dt else TypeError
                raise error(f"{name} must be a {dt} tensor of shape {shape}, got {got}")
            if t.is_meta:
                raise ValueError(f"{name} is on the meta device: it holds no values to write")
        if cfg.validate:
            self.tracker.check_idle(ids, "write_prefill")
            if cfg.backend == "replay":
                pending = [s for s in ids if int(self.cursors.write_pos[s])]
                if pending:
                    raise ValueError(f"slots {pending} hold unfolded ring history; flush() them before write_prefill")

    @torch.no_grad()  # the pool keeps values, never a caller's autograd graph (nor do its outputs carry one)
    def conv_update(self, layer: int, x: Tensor, *, weight: Tensor, bias: Tensor | None, slots: Tensor,
                    cu_seqlens: Tensor, split: tuple[int, int, int] | None = None):  # fmt: skip
        """Causal conv1d + SiLU over the step's tokens x [N, C] -> [N, C], or three contiguous [N, width] parts
        with ``split``; the conv state moves only at commit.

        The first call of a step (this or ``verify``/``decode``) fixes its rows; see ``commit``."""
        layer = self._layer(layer)
        ids = self._ids(slots)
        self._cu(cu_seqlens, slots.shape[0])
        if self.cfg.validate:
            self.tracker.check_call("conv", layer, ids, cu_seqlens, None)
        scratch = self.conv_scratch[layer]
        y = causal_conv1d_update(x, self.conv_state[layer], weight, bias, slots, cu_seqlens, scratch, split=split,
                                 validate=self.cfg.validate, impl=self.cfg.impl)  # fmt: skip
        if self.cfg.validate:
            self.tracker.record("conv", layer, ids, cu_seqlens, None)
        return y

    def verify(self, layer: int, q: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, *, A_log: Tensor,
               dt_bias: Tensor, slots: Tensor, cu_seqlens: Tensor, scale: float | None = None) -> Tensor:  # fmt: skip
        """Speculative verify of one layer over windows of 1..window tokens; returns o [N, HV, V] in v's dtype.

        q, k: [N, H, K] raw (L2-normalised per head inside, fla's ``use_qk_l2norm_in_kernel=True``); v: [N, HV,
        V]; a, b: [N, HV] raw gate and beta inputs (the op applies ``A_log``, ``dt_bias``, softplus and sigmoid);
        all in ``PoolConfig.dtype`` on the pool's device. A_log, dt_bias: [HV]. slots: [B] int32 (-1 padding),
        cu_seqlens: [B+1] int32 window offsets. scale: None for K**-0.5. The ops' docstrings
        (``ops.gdn_replay_verify``, ``ops.gdn_recurrent``) say the rest."""
        return self._window(layer, "verify", q, k, v, a, b, A_log, dt_bias, slots, cu_seqlens, scale)

    def decode(self, layer: int, q: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, *, A_log: Tensor,
               dt_bias: Tensor, slots: Tensor, cu_seqlens: Tensor | None = None,
               scale: float | None = None) -> Tensor:  # fmt: skip
        """One plain (non-speculative) token per slot; ``commit`` it with ``num_accepted`` all 1."""
        self._ids(slots)
        if not isinstance(q, torch.Tensor):
            raise TypeError(f"q must be a torch.Tensor, got {type(q).__name__}")
        if cu_seqlens is None:
            cu_seqlens = torch.arange(slots.shape[0] + 1, dtype=torch.int32, device=self.device)
        if q.dim() < 1 or q.shape[0] != slots.shape[0]:
            raise ValueError(f"decode takes one token per slot: q {tuple(q.shape)} for {slots.shape[0]} slots")
        return self._window(layer, "decode", q, k, v, a, b, A_log, dt_bias, slots, cu_seqlens, scale)

    @torch.no_grad()
    def _window(self, layer, kind, q, k, v, a, b, A_log, dt_bias, slots, cu_seqlens, scale):
        layer = self._layer(layer)
        ids = self._ids(slots)
        self._cu(cu_seqlens, slots.shape[0])
        cfg = self.cfg
        if kind == "verify" and not self.verifies:
            raise ValueError("this recurrent pool has window=1 and keeps no snapshots: it can only decode()")
        for name, t in (("q", q), ("k", k), ("v", v), ("a", a), ("b", b)):  # both backends refuse alike
            if isinstance(t, Tensor) and t.dtype != cfg.dtype:
                raise TypeError(f"{name} is {t.dtype}; this pool's activations are {cfg.dtype} (PoolConfig.dtype)")
        if cfg.validate:
            self.tracker.check_call("ssm", layer, ids, cu_seqlens, kind)
        kw = dict(A_log=A_log, dt_bias=dt_bias, slots=slots, cu_seqlens=cu_seqlens, scale=scale, impl=cfg.impl)
        try:
            if cfg.backend == "replay":
                o = gdn_replay_verify(q, k, v, a, b, checkpoint=self.checkpoint[layer], ring=self.rings[layer],
                                      validate=cfg.validate, **kw)  # fmt: skip
            elif kind == "decode":
                o = gdn_recurrent(q, k, v, a, b, state=self.checkpoint[layer], validate=cfg.validate, **kw)
            else:
                snaps = self.snapshots[layer, : slots.shape[0]]
                o = gdn_recurrent(q, k, v, a, b, state=self.checkpoint[layer], snapshots=snaps, update_state=False,
                                  validate=cfg.validate, **kw)  # fmt: skip
        except (ValueError, TypeError):
            raise  # the ops check every argument before writing: nothing happened
        except BaseException:
            # Failed while writing. A replay verify may have folded some blocks (their markers make a retry
            # skip them); an in-place decode may have advanced some of the state, which nothing can undo.
            self._kind = kind
            if cfg.validate:
                self.tracker.record_failure(ids, cu_seqlens, kind, torn=cfg.backend == "recurrent" and kind == "decode")
            raise
        self._kind = kind
        if cfg.validate:
            self.tracker.record("ssm", layer, ids, cu_seqlens, kind)
        return o

    def commit(self, slots: torch.Tensor, num_accepted: torch.Tensor) -> None:
        """End the step in flight (verify, or decode: then ``num_accepted`` is all 1): keep ``num_accepted`` [B]
        int32 tokens (bonus included) of every row's window, in the SSM and conv state of every layer.

        The conv scratch and the recurrent backend's snapshots are indexed by batch row, so a commit must
        match the step exactly: ``slots`` must be the very rows the step's calls named (same ids, same order,
        padding included), after every layer ran ``conv_update`` and ``verify``/``decode``. Any other commit
        (another order, a subset, after a second batch started) is refused with ``SlotError`` before anything
        is written, as is a second batch while a step is in flight. With ``PoolConfig.validate`` off (CUDA
        graphs) nothing is checked: the caller guarantees it. A replay pool may fold ahead where it pays (a small
        batch of 2-4-token windows on a GPU, ``ops.fold_ahead_pays``): the rows the commit flags fold now, in every
        layer (checkpoints, fold markers and their cursors move; the committed state does not).

        A commit that raises after it began writing (a failed launch, an interrupt) leaves the step in flight:
        ``commit`` again with the same ``num_accepted`` finishes it exactly as one call would have, ``abort`` rolls
        it back (a recurrent row whose state it may have overwritten is lost); ``state/commit.py`` says how. With
        validation off nothing on the host tells how far it got, as above."""
        ids = self._ids(slots)
        check_tensor("num_accepted", num_accepted, shape=(slots.shape[0],), dtypes=(torch.int32,), device=self.device)
        with torch.no_grad():
            step_end.commit(self, slots, num_accepted, ids)

    def step_in_flight(self) -> bool | None:
        """Whether a step is in flight (its first call ran, its commit has not ended it); None with validation off,
        where the host does not know. A caller that saw ``commit`` raise reads here whether the pool took the step
        (False: only its fold ahead failed, ``state/commit.py``)."""
        return self.tracker.step is not None if self.cfg.validate else None

    def _folds_ahead(self, slots: torch.Tensor, kind: str | None) -> bool:
        """Whether a commit folds the rows it flags right away (``ops.gdn_fold_ahead``), every layer at once: a replay
        pool's verify step where ``ops.fold_ahead_pays`` (a small batch of 2-4-token windows on a GPU); a plain
        decode step does not (its rows fold together, in the verify). The committed state is the same either way."""
        cfg = self.cfg
        return (cfg.backend == "replay" and kind == "verify"
                and fold_ahead_pays(slots.shape[0], cfg.HV, cfg.window, cfg.ring_len, self.device))  # fmt: skip

    def abort(self, slots: torch.Tensor) -> list[int]:
        """Drop the step in flight over ``slots`` (the rows its calls named): nothing of it is committed, the
        slots are idle again with their committed state. No-op when no step is in flight.

        Replay: a verify folds only rows whose ring flags a fold (``flush``), and it may have done so in some
        layers already; those rows' history is therefore folded in every layer now (folded blocks are skipped)
        and marked folded, so no slot is left half-folded. Every other row is left exactly as it was (its
        history unfolded), so a retry of the step gives its first attempt's outputs bit for bit. With validation on,
        a step in which no verify ran or failed while writing (only ``conv_update`` ran, or a verify was refused on
        its arguments) has folded nothing, and its abort folds nothing either.

        Recurrent: a verify wrote only snapshots; a *decode* updated the state in place, so rows of an aborted
        decode step that ran any layer lose their state (they can only be freed), as do the rows of a verify step
        whose commit failed after it may have copied snapshots into the state. Returns those slots: exactly
        with validation on; with it off (CUDA graphs) every row's slot when the latest verify/decode call this
        pool ran (or captured) was a decode, since nothing on the host tells how far the failed step got."""
        ids = self._ids(slots)
        with torch.no_grad():
            return step_end.abort(self, slots, ids)

    def committed_state(self, layer: int, slots: torch.Tensor) -> torch.Tensor:
        """fp32 [n, HV, V, K] committed state of ``slots`` in ``layer``, materialised without mutating anything."""
        layer = self._layer(layer)
        ids = self._ids(slots, padding=False)
        if self.cfg.validate:
            self.tracker.check_idle(ids, "committed_state")
        if self.cfg.backend == "recurrent":
            return self.checkpoint[layer, slots.long()].clone()
        out = torch.empty(slots.shape[0], self.cfg.HV, self.cfg.V, self.cfg.K, device=self.device)
        ring = self.rings[layer]
        return gdn_exact_fold(self.checkpoint[layer], ring, slots, out=out, validate=False, impl=self.cfg.impl)

    def committed_conv_state(self, layer: int, slots: torch.Tensor) -> torch.Tensor:
        """[n, W-1, C] copy of the committed conv state of ``slots`` (no padding) in ``layer``."""
        layer = self._layer(layer)
        ids = self._ids(slots, padding=False)
        if self.cfg.validate:
            self.tracker.check_not_torn(ids, "committed_conv_state")
        return self.conv_state[layer, slots.long()].clone()

    def flush(self, slots: torch.Tensor) -> None:
        """Fold the pending history of ``slots`` into their checkpoints, in every layer (replay; no-op
        for recurrent). Needed before the committed state is handed elsewhere by reference."""
        ids = self._ids(slots, batch=False)
        if self.cfg.validate:
            self.tracker.check_idle(ids, "flush")
        if self.cfg.backend == "replay":
            self.tracker.ahead_owed = None
            self._fold_history(slots)

    def _fold_history(self, slots: torch.Tensor) -> None:
        """Fold the committed history of ``slots`` in every layer, then empty it (blocks a verify of the step in
        flight already folded are skipped by the fold markers)."""
        for layer in range(self.cfg.num_layers):
            gdn_exact_fold(self.checkpoint[layer], self.rings[layer], slots, empty_history=False, validate=False,
                           impl=self.cfg.impl)  # fmt: skip
        ring_mark_folded(self.cursors, slots, validate=False, impl=self.cfg.impl)

    def offload(self, slots: torch.Tensor) -> ParkedSlots:
        """CPU copy of ``slots`` (checkpoints, rings, cursors, conv state); the slots stay allocated."""
        return transfer.offload(self, slots)

    def restore(self, parked: ParkedSlots) -> torch.Tensor:
        """Allocate new slots holding ``parked`` (from ``offload``); they continue bit for bit where it stopped."""
        return transfer.restore(self, parked)

    def check_restore(self, parked: ParkedSlots, room: bool = True) -> None:
        """Raise what ``restore(parked)`` would raise before changing anything (without ``room``: but for want of a
        free slot); return quietly otherwise."""
        transfer.check_restore(self, parked, room)

    def fork(self, slots: torch.Tensor) -> torch.Tensor:
        """New slots with identical committed state and history (parallel sampling, shared prefixes)."""
        return transfer.fork(self, slots)

    def memory_report(self) -> dict[str, int]:
        """Bytes held, by category: ``checkpoints``, ``rings`` (records, fold markers and cursors; replay),
        ``snapshots`` (the recurrent backend's per-token state snapshots), ``conv`` (state and scratch), ``total``."""
        return pool_memory_report(self)
