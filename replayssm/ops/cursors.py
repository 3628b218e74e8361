"""Device-side cursor updates of the ring protocol: commit, reset, mark-folded.

Each is one tiny kernel with one program per batch row; no value is read back to the host (unless
``validate=True`` asks for the value checks), so a whole speculative step can be captured in a
CUDA graph. They take either a ``Ring`` or its shared ``RingCursors``. Every one of them advances
the slot's ``epoch``, which retires the fold markers of the step that just ended (``ring.py``).

**The fold phase** (rings of window 1, plain decode, over batches of many waves). The commit sets ``flush`` when the
next window might not fit (``write_pos + 2 * window > L``). Rows of window 1 that start together (a batch admitted
at once, the kernel bench's plain-decode point) would then all fold in the same step, one step in ``L - 1``, and a
step where every row folds cannot hide the folds' arithmetic under other rows' streams. With ``fold_phase`` a
window-1 row also folds early, once its history is non-empty, at the commit whose new ``epoch`` satisfies
``(epoch + slot) % (L - 1) == 0``: its *fold phase*. At window 1 the epoch advances once per step (and at a reset or
an emptied history, which only shifts the phase), so from its first fold on a row folds every ``L - 1`` steps, as
before, but rows of different slots fold in different steps.
``fold_phase_pays`` says when to ask for it: a batch of many waves of verify programs gains (H200, B=256, L=16,
Qwen3.5-122B geometry, bench/NOTES.md, seventeenth session: 316-318 us per layer-step with every row folding in the
same step, 304.5 with the phases spread, 294 with the verify then staged so that its order keeps the folding
requests out of the last waves), a batch of one wave would lose (its step waits for its slowest program, so it
should fold all its rows in one step, not a few in every step: B=8 13.2 -> 18.3 us). Windows of 2 or more keep
the capacity rule alone: their acceptance spreads their folds already, and an early fold there costs an extra
checkpoint write. Where a fold happens never changes the committed state (the fold replays the same records
through the same update, in order).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._env import switch
from ._common import use_triton
from ._validate import check_flags, check_no_overlap, check_slots, check_tensor, named, values_checkable
from .ring import Ring, RingCursors


@triton.jit
def _ring_commit_kernel(slots, num_accepted, write_pos, base, flush, pending, epoch, L: tl.constexpr,
                        T: tl.constexpr, PHASE: tl.constexpr):  # fmt: skip
    i = tl.program_id(0)
    slot = tl.load(slots + i)
    if slot >= 0:
        n = tl.load(num_accepted + i)
        wp = tl.load(write_pos + slot)
        bs = tl.load(base + slot)
        fl = tl.load(flush + slot)
        # A verify that folded emptied the history: its window starts the new history.
        new_base = tl.where(fl != 0, (bs + wp) & (L - 1), bs)
        new_wp = tl.where(fl != 0, n, wp + n)
        new_ep = tl.load(epoch + slot) + 1
        fl_next = new_wp + 2 * T > L
        if PHASE:  # the fold phase (module docstring), window 1 only
            # remainders first: epoch + slot may pass the int32 range (the reference takes the same remainders)
            fl_next = fl_next | ((new_wp > 0) & ((new_ep % (L - 1) + slot % (L - 1)) % (L - 1) == 0))
        tl.store(base + slot, new_base)
        tl.store(write_pos + slot, new_wp)
        tl.store(flush + slot, fl_next.to(tl.int32))
        tl.store(pending + slot, 0)
        tl.store(epoch + slot, new_ep)


@triton.jit
def _ring_mark_folded_kernel(slots, write_pos, base, flush, pending, epoch, L: tl.constexpr, RESET: tl.constexpr,
                             FLUSHING: tl.constexpr = False):  # fmt: skip
    """Empty a row's history (``RESET``: the whole ring); with ``FLUSHING`` only rows whose ``flush`` is set."""
    i = tl.program_id(0)
    slot = tl.load(slots + i)
    live = slot >= 0
    if FLUSHING:
        live = live & (tl.load(flush + tl.maximum(slot, 0)) != 0)
    if live:
        if RESET:
            tl.store(base + slot, 0)
        else:
            tl.store(base + slot, (tl.load(base + slot) + tl.load(write_pos + slot)) & (L - 1))
        tl.store(write_pos + slot, 0)
        tl.store(flush + slot, 0)
        tl.store(pending + slot, 0)
        tl.store(epoch + slot, tl.load(epoch + slot) + 1)


def cursors_of(ring) -> RingCursors:
    """The shared cursors of a ``Ring``, or the ``RingCursors`` themselves."""
    if isinstance(ring, Ring):
        return ring.cursors
    if isinstance(ring, RingCursors):
        return ring
    raise TypeError(f"ring must be a Ring or RingCursors, got {type(ring).__name__}")


def fold_phase_pays(batch: int, HV: int, window: int, device: torch.device) -> bool:
    """Whether a commit of ``batch`` rows should ask for the fold phase (module docstring): window 1 on a GPU, where
    the verify's programs (one per row and value head) fill many waves (``verify_launch.many_waves``: at least eight
    of ``verify_launch.ONE_LAUNCH_PER_SM`` per SM; the verify then runs staged, whose order keeps the folding
    requests out of the last waves). ``REPLAYSSM_FOLD_PHASE=0`` / ``=1`` forces either way (benchmarks, tests); a
    window of 2 or more never uses it."""
    from .verify_launch import many_waves

    env = switch("REPLAYSSM_FOLD_PHASE")
    if window != 1:
        return False
    if env:
        return env == "1"
    return many_waves(batch * HV, device)


def fold_next(write_pos: int, epoch: int, slot: int, L: int, window: int, fold_phase: bool) -> bool:
    """The commit's ``flush`` decision for a row left with ``write_pos`` records and ``epoch`` (both after the
    commit): the capacity rule, and with ``fold_phase`` at window 1 the fold phase (module docstring)."""
    full = write_pos + 2 * window > L
    return full or (fold_phase and window == 1 and write_pos > 0 and (epoch % (L - 1) + slot % (L - 1)) % (L - 1) == 0)


def ring_commit_reference(ring, slots, num_accepted, *, fold_phase: bool = False, validate: bool = True):
    """``ring_commit`` with ``impl="reference"``: the PyTorch twin of its kernel, behind the same checks."""
    return ring_commit(ring, slots, num_accepted, fold_phase=fold_phase, validate=validate, impl="reference")


def _commit_reference(c: RingCursors, slots, num_accepted, fold_phase: bool) -> None:
    """The PyTorch twin of ``_ring_commit_kernel`` (arguments already checked)."""
    for slot, n in zip(slots.tolist(), num_accepted.tolist()):
        if slot < 0:
            continue
        wp, bs, fl = int(c.write_pos[slot]), int(c.base[slot]), int(c.flush[slot])
        if fl:
            bs, wp = (bs + wp) & (c.L - 1), n
        else:
            wp += n
        c.base[slot], c.write_pos[slot] = bs, wp
        c.epoch[slot] += 1
        c.flush[slot] = int(fold_next(wp, int(c.epoch[slot]), slot, c.L, c.window, fold_phase))
        c.pending[slot] = 0


def _check_rows(c: RingCursors, slots, num_accepted=None) -> None:
    dev = c.device
    check_tensor("slots", slots, ndim=1, dtypes=(torch.int32,), device=dev)
    if num_accepted is not None:
        check_tensor("num_accepted", num_accepted, shape=(slots.shape[0],), dtypes=(torch.int32,), device=dev)
    check_no_overlap(
        (), named(slots=slots, num_accepted=num_accepted), spans=c.written_spans
    )  # (the cursors are written)


def ring_commit(ring, slots: torch.Tensor, num_accepted: torch.Tensor, *, fold_phase: bool = False,
                validate: bool = True, impl: str = "auto"):  # fmt: skip
    """Commit the last verify step: ``num_accepted[i]`` (bonus token included) records of row i's window.

    ring: ``Ring`` or ``RingCursors`` (cursors are shared by all layers: call once per step, after
    every layer's verify). slots: [B] int32, -1 = padding. num_accepted: [B] int32 in [1, pending].
    If the step folded (``flush`` set), ``base += write_pos; write_pos = n``; else ``write_pos += n``.
    Then ``epoch += 1``, ``pending = 0`` and ``flush = write_pos + 2 * window > L``; with ``fold_phase`` (use
    ``fold_phase_pays``) a ring of window 1 also flushes when the row's history is non-empty and
    ``(epoch + slot) % (L - 1) == 0`` (its fold phase: module docstring). Mutates the cursors only.
    With ``validate=True`` (skipped under graph capture) checks slot ids, the cursors' ranges
    (``RingCursors.check_values``) and that every row has a pending window and ``1 <= num_accepted <= pending``;
    nothing is written when a check fails.
    """
    check_flags(fold_phase=fold_phase, validate=validate)
    c = cursors_of(ring)
    _check_rows(c, slots, num_accepted)
    use = use_triton(impl, slots)
    if validate and values_checkable(slots, num_accepted):
        ids = check_slots("slots", slots, c.num_slots)
        c.check_values()
        pending = c.pending.cpu().tolist()
        for slot, n in zip(ids, num_accepted.cpu().tolist()):
            if slot < 0:
                continue
            if pending[slot] == 0:
                raise ValueError(f"slots: slot {slot} has no verified window to commit (verify first)")
            if not 1 <= n <= pending[slot]:
                raise ValueError(f"num_accepted={n} for slot {slot} is outside [1, {pending[slot]}] (its window)")
    phase = fold_phase and c.window == 1
    if not use:
        return _commit_reference(c, slots, num_accepted, phase)
    if slots.shape[0]:
        _ring_commit_kernel[(slots.shape[0],)](slots, num_accepted, c.write_pos, c.base, c.flush, c.pending, c.epoch,
                                               L=c.L, T=c.window, PHASE=phase, num_warps=1)  # fmt: skip


def ring_mark_folded_reference(ring, slots, *, reset: bool = False, validate: bool = True):
    """``ring_mark_folded`` (``ring_reset`` with ``reset=True``) with ``impl="reference"``: the PyTorch twin of their
    kernel, behind the same checks."""
    check_flags(reset=reset, validate=validate)
    _mark(ring, slots, reset, validate, "reference")


def mark_reference(c: RingCursors, slots, reset: bool) -> None:
    """The PyTorch twin of ``_ring_mark_folded_kernel`` (arguments already checked)."""
    for slot in slots.tolist():
        if slot < 0:
            continue
        c.base[slot] = 0 if reset else (int(c.base[slot]) + int(c.write_pos[slot])) & (c.L - 1)
        c.write_pos[slot] = c.flush[slot] = c.pending[slot] = 0
        c.epoch[slot] += 1


def check_none_pending(c, ids: list[int], what: str) -> None:
    """Refuse rows with a verified window not committed yet: emptying their history would drop it (``pending``)."""
    pending = c.pending.cpu().tolist()
    busy = [s for s in ids if s >= 0 and pending[s]]
    if busy:
        raise ValueError(f"slots {busy} have a verified window not committed yet: {what} after ring_commit")


def _mark(ring, slots, reset, validate, impl):
    c = cursors_of(ring)
    _check_rows(c, slots)
    use = use_triton(impl, slots)
    if validate and values_checkable(slots):
        ids = check_slots("slots", slots, c.num_slots)
        if not reset:  # (a reset may start a slot over from any cursors)
            c.check_values()
            check_none_pending(c, ids, "mark them folded")
    if not use:
        return mark_reference(c, slots, reset)
    if slots.shape[0]:
        _ring_mark_folded_kernel[(slots.shape[0],)](
            slots, c.write_pos, c.base, c.flush, c.pending, c.epoch, L=c.L, RESET=reset, num_warps=1
        )


def ring_reset(ring, slots: torch.Tensor, *, validate: bool = True, impl: str = "auto"):
    """Empty the rings of ``slots`` (fresh or freed slots): cursors to 0, ``epoch`` advanced.
    Records are not cleared (nothing reads a record outside the history)."""
    check_flags(validate=validate)
    _mark(ring, slots, True, validate, impl)


def ring_mark_folded(ring, slots: torch.Tensor, *, validate: bool = True, impl: str = "auto"):
    """Declare the history of ``slots`` folded into the checkpoints: ``base += write_pos``, the rest to 0,
    ``epoch`` advanced.

    ``gdn_exact_fold`` calls this itself unless told not to; a pool that folds several layers
    sharing one set of cursors folds each with ``empty_history=False`` and calls this once after.
    With ``validate=True`` (skipped under graph capture) checks slot ids, the cursors' ranges and that no row has a
    verified window pending (``ring_commit`` first: emptying the history would drop it); nothing is written when a
    check fails.
    """
    check_flags(validate=validate)
    _mark(ring, slots, False, validate, impl)
