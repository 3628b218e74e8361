"""Device-side cursor updates of the ring protocol: commit, reset, mark-folded.

Each is one tiny kernel with one program per batch row; no value is read back to the host (unless
``validate=True`` asks for the value checks), so a whole speculative step can be captured in a
CUDA graph. They take either a ``Ring`` or its shared ``RingCursors``. Every one of them advances
the slot's ``epoch``, which retires the fold markers of the step that just ended (``ring.py``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import use_triton
from ._validate import check_slots, check_tensor, values_checkable
from .ring import Ring, RingCursors


@triton.jit
def _ring_commit_kernel(slots, num_accepted, write_pos, base, flush, pending, epoch, L: tl.constexpr,
                        T: tl.constexpr):  # fmt: skip
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
        tl.store(base + slot, new_base)
        tl.store(write_pos + slot, new_wp)
        tl.store(flush + slot, (new_wp + 2 * T > L).to(tl.int32))
        tl.store(pending + slot, 0)
        tl.store(epoch + slot, tl.load(epoch + slot) + 1)


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


def ring_commit_reference(ring, slots, num_accepted):
    """PyTorch reference of ``ring_commit`` (same effects)."""
    c = cursors_of(ring)
    for slot, n in zip(slots.tolist(), num_accepted.tolist()):
        if slot < 0:
            continue
        wp, bs, fl = int(c.write_pos[slot]), int(c.base[slot]), int(c.flush[slot])
        if fl:
            bs, wp = (bs + wp) & (c.L - 1), n
        else:
            wp += n
        c.base[slot], c.write_pos[slot] = bs, wp
        c.flush[slot] = int(wp + 2 * c.window > c.L)
        c.pending[slot] = 0
        c.epoch[slot] += 1


def _check_rows(c: RingCursors, slots, num_accepted=None) -> None:
    dev = c.device
    check_tensor("slots", slots, ndim=1, dtypes=(torch.int32,), device=dev)
    if num_accepted is not None:
        check_tensor("num_accepted", num_accepted, shape=(slots.shape[0],), dtypes=(torch.int32,), device=dev)


def ring_commit(ring, slots: torch.Tensor, num_accepted: torch.Tensor, *, validate: bool = True, impl: str = "auto"):
    """Commit the last verify step: ``num_accepted[i]`` (bonus token included) records of row i's window.

    ring: ``Ring`` or ``RingCursors`` (cursors are shared by all layers: call once per step, after
    every layer's verify). slots: [B] int32, -1 = padding. num_accepted: [B] int32 in [1, pending].
    If the step folded (``flush`` set), ``base += write_pos; write_pos = n``; else ``write_pos += n``.
    Then ``flush = write_pos + 2 * window > L``, ``pending = 0``, ``epoch += 1``. Mutates the cursors only.
    With ``validate=True`` (skipped under graph capture) checks slot ids and that every row has a
    pending window and ``1 <= num_accepted <= pending``; nothing is written when a check fails.
    """
    c = cursors_of(ring)
    _check_rows(c, slots, num_accepted)
    use = use_triton(impl, slots)
    if validate and values_checkable(slots, num_accepted):
        ids = check_slots("slots", slots, c.num_slots)
        pending = c.pending.cpu().tolist()
        for slot, n in zip(ids, num_accepted.cpu().tolist()):
            if slot < 0:
                continue
            if pending[slot] == 0:
                raise ValueError(f"slots: slot {slot} has no verified window to commit (verify first)")
            if not 1 <= n <= pending[slot]:
                raise ValueError(f"num_accepted={n} for slot {slot} is outside [1, {pending[slot]}] (its window)")
    if not use:
        return ring_commit_reference(c, slots, num_accepted)
    if slots.shape[0]:
        _ring_commit_kernel[(slots.shape[0],)](
            slots, num_accepted, c.write_pos, c.base, c.flush, c.pending, c.epoch, L=c.L, T=c.window, num_warps=1
        )


def ring_mark_folded_reference(ring, slots, *, reset=False):
    """PyTorch reference of ``ring_mark_folded`` / ``ring_reset``."""
    c = cursors_of(ring)
    for slot in slots.tolist():
        if slot < 0:
            continue
        c.base[slot] = 0 if reset else (int(c.base[slot]) + int(c.write_pos[slot])) & (c.L - 1)
        c.write_pos[slot] = c.flush[slot] = c.pending[slot] = 0
        c.epoch[slot] += 1


def _mark(ring, slots, reset, validate, impl):
    c = cursors_of(ring)
    _check_rows(c, slots)
    use = use_triton(impl, slots)
    if validate and values_checkable(slots):
        check_slots("slots", slots, c.num_slots)
    if not use:
        return ring_mark_folded_reference(c, slots, reset=reset)
    if slots.shape[0]:
        _ring_mark_folded_kernel[(slots.shape[0],)](
            slots, c.write_pos, c.base, c.flush, c.pending, c.epoch, L=c.L, RESET=reset, num_warps=1
        )


def ring_reset(ring, slots: torch.Tensor, *, validate: bool = True, impl: str = "auto"):
    """Empty the rings of ``slots`` (fresh or freed slots): cursors to 0, ``epoch`` advanced.
    Records are not cleared (nothing reads a record outside the history)."""
    _mark(ring, slots, True, validate, impl)


def ring_mark_folded(ring, slots: torch.Tensor, *, validate: bool = True, impl: str = "auto"):
    """Declare the history of ``slots`` folded into the checkpoints: ``base += write_pos``, the rest to 0,
    ``epoch`` advanced.

    ``gdn_exact_fold`` calls this itself unless told not to; a pool that folds several layers
    sharing one set of cursors folds each with ``empty_history=False`` and calls this once after.
    """
    _mark(ring, slots, False, validate, impl)
