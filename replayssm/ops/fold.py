"""Closed-loop exact fold: replay a slot's committed ring records into its checkpoint.

Every record is fed through the pinned ``_update`` -- the very code the baseline runs -- from the
normalised key ``k^`` the verify stored (bitwise the baseline's), the raw ``v`` and the stored
``g, beta``. The folded checkpoint is therefore bitwise the state the recurrent baseline holds after
the same accepted tokens. Blocks whose fold marker equals the slot's ``epoch`` were already folded
by a verify of the step in flight: they are not folded again (``ring.py``).
"""

from __future__ import annotations

import torch
import triton.language as tl  # noqa: F401  (the interpreter looks for it in a kernel's globals)

from . import launch
from ._common import use_triton
from ._gluon import gl, jit
from ._pinned import MARK, _fold_records, update_reference
from ._validate import check_flags, check_no_overlap, check_slots, check_state, check_tensor, named, values_checkable
from .cursors import check_none_pending, cursors_of, ring_mark_folded
from .ring import Ring


@jit
def _gdn_exact_fold_kernel(
    checkpoint, out, slots, ring_k, ring_v, ring_g, ring_beta, ring_folded, write_pos, base, epoch,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, BV: tl.constexpr,
    BVP: tl.constexpr, TO_OUT: tl.constexpr, TILE: tl.constexpr,
):  # fmt: skip
    i_v = gl.program_id(0)
    i_hv = gl.program_id(1)
    i_b = gl.program_id(2)
    slot = gl.load(slots + i_b)
    if slot >= 0:
        i_h = i_hv // (HV // H)
        s64 = slot.to(gl.int64)
        wp = gl.load(write_pos + slot)
        bs = gl.load(base + slot)
        ep = gl.load(epoch + slot)
        rows0 = i_v * BVP + gl.arange(0, BV, layout=gl.SliceLayout(1, TILE))
        cols = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, TILE)), 0)
        head = checkpoint + (s64 * HV + i_hv) * V * K
        dst = out + (i_b.to(gl.int64) * HV + i_hv) * V * K
        rk = ring_k + (s64 * H + i_h) * L * K
        rv = ring_v + (s64 * HV + i_hv) * L * V
        rg = ring_g + (s64 * HV + i_hv) * L
        rb = ring_beta + (s64 * HV + i_hv) * L
        marks = ring_folded + (s64 * HV + i_hv) * (V // MARK)
        # A launch folds every row it owns, so one marker tells for all of this program's rows; every thread
        # reads it before any thread writes one (a fast warp must not mark rows a slow warp has yet to check).
        todo = gl.load(marks + (i_v * BVP) // MARK) != ep
        gl.thread_barrier()
        h_next = gl.load(head + gl.expand_dims(rows0, 1) * K + cols)
        for sb in gl.static_range(BVP // BV):
            rows = rows0 + sb * BV
            tile = gl.expand_dims(rows, 1) * K + cols
            h = h_next
            if sb + 1 < BVP // BV:
                h_next = gl.load(head + tile + BV * K)
            mark = marks + (i_v * BVP + sb * BV) // MARK
            if todo:  # not folded yet in this epoch
                h = _fold_records(h, rk, rv, rg, rb, wp, bs, rows, cols, K, V, L)
                if not TO_OUT:
                    gl.store(head + tile, h)
                    m = gl.arange(0, BV // MARK, layout=gl.SliceLayout(1, TILE))
                    gl.store(mark + m, gl.full([BV // MARK], 0, gl.int32, layout=gl.SliceLayout(1, TILE)) + ep)
            if TO_OUT:
                gl.store(dst + tile, h)


def fold_slot_reference(h: torch.Tensor, ring: Ring, slot: int, positions) -> torch.Tensor:
    """Replay the ring records at physical ``positions`` of ``slot`` onto h [HV, V, K]; returns the result.

    Shared by the fold reference and the flush path of the verify reference."""
    H, HV = ring.k.shape[1], ring.v.shape[1]
    for p in positions:
        khat = ring.k[slot, :, p].repeat_interleave(HV // H, dim=0).contiguous()
        v_j = ring.v[slot, :, p].float().contiguous()
        h = update_reference(h, khat, v_j, ring.g[slot, :, p].contiguous(), ring.beta[slot, :, p].contiguous())
    return h


def history_positions(ring: Ring, slot: int) -> list[int]:
    """Physical ring indices of the committed, unfolded records of ``slot``, oldest first."""
    wp, bs = int(ring.cursors.write_pos[slot]), int(ring.cursors.base[slot])
    return [(bs + j) & (ring.L - 1) for j in range(wp)]


def folded_this_epoch(ring: Ring, slot: int) -> bool:
    """True when a verify of the step in flight already folded ``slot``'s history (its markers say so)."""
    return bool((ring.folded[slot] == ring.cursors.epoch[slot]).all())


def gdn_exact_fold_reference(checkpoint, ring, slots, *, out=None, empty_history=True, validate=True):
    """``gdn_exact_fold`` with ``impl="reference"``: the PyTorch twin of its kernel, behind the same checks."""
    return gdn_exact_fold(checkpoint, ring, slots, out=out, empty_history=empty_history, validate=validate,
                          impl="reference")  # fmt: skip


def _exact_fold_reference(checkpoint, ring, slots, out, empty_history):
    """The PyTorch twin of ``gdn_exact_fold``'s kernel (arguments already checked)."""
    for i, slot in enumerate(slots.tolist()):
        if slot < 0:
            continue
        done = folded_this_epoch(ring, slot)
        h = (
            checkpoint[slot]
            if done
            else fold_slot_reference(checkpoint[slot], ring, slot, history_positions(ring, slot))
        )
        if out is not None:
            out[i] = h
        else:
            checkpoint[slot] = h
            ring.folded[slot] = ring.cursors.epoch[slot]
    if out is None and empty_history:
        ring_mark_folded(ring, slots, validate=False, impl="reference")
    return out if out is not None else checkpoint


def _check(checkpoint, ring, slots, out, empty_history, validate):
    if not isinstance(ring, Ring):
        raise TypeError(f"ring must be a Ring, got {type(ring).__name__}")
    H, L, K = ring.k.shape[1:]
    HV, V = ring.v.shape[1], ring.v.shape[3]
    S = check_state("checkpoint", checkpoint, HV, V, K, ring.k.device)
    if S != ring.num_slots:
        raise ValueError(f"checkpoint has {S} slots, ring has {ring.num_slots}")
    check_tensor("slots", slots, ndim=1, dtypes=(torch.int32,), device=checkpoint.device)
    if out is not None:
        check_tensor("out", out, shape=(slots.shape[0], HV, V, K), dtypes=(torch.float32,), device=checkpoint.device)
    check_no_overlap(named(out=out, checkpoint=checkpoint), named(slots=slots), spans=ring.written_spans)
    if validate and values_checkable(slots):
        ids = check_slots("slots", slots, S)
        ring.cursors.check_values()
        if out is None and empty_history:
            check_none_pending(cursors_of(ring), ids, "fold and empty their history")
    return H, HV, K, V


def gdn_exact_fold(
    checkpoint: torch.Tensor,
    ring: Ring,
    slots: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
    empty_history: bool = True,
    validate: bool = True,
    impl: str = "auto",
) -> torch.Tensor:
    """Fold every committed record of ``slots`` into their checkpoints, bitwise like the baseline.

    checkpoint: [S, HV, V, K] fp32; ring: this layer's ``Ring``; slots: [B] int32 (-1 skipped).
    Default: mutates ``checkpoint[slots]``, marks the blocks folded, and with ``empty_history=True``
    empties the history in the shared cursors (``ring_mark_folded``). Several layers sharing one set
    of cursors: pass ``empty_history=False`` for each and call ``ring_mark_folded`` once after the
    last layer. With ``out`` ([B, HV, V, K] fp32) the folded states go to ``out[i]`` and nothing else
    is touched: the committed state, materialised without mutation. A slot whose history a verify of
    the step in flight already folded is not folded twice. Returns ``out`` or ``checkpoint``. With ``validate``
    (skipped under graph capture) checks slot ids, the cursors' ranges and, when the history is to be emptied,
    that no row has a verified window pending (``ring_commit`` first); nothing is written when a check fails.
    """
    check_flags(empty_history=empty_history, validate=validate)
    H, HV, K, V = _check(checkpoint, ring, slots, out, empty_history, validate)
    use = use_triton(impl, checkpoint)
    if not use:
        return _exact_fold_reference(checkpoint, ring, slots, out, empty_history)
    B = slots.shape[0]
    if B:
        ln = launch.resolve("fold", V, B * HV, checkpoint.device)
        c = ring.cursors
        _gdn_exact_fold_kernel[(ln.programs_per_head, HV, B)](
            checkpoint, out if out is not None else checkpoint, slots, ring.k, ring.v, ring.g, ring.beta, ring.folded,
            c.write_pos, c.base, c.epoch, H, HV, K, V, ring.L, ln.rows, ln.rows_per_program, out is not None,
            ln.layout, num_warps=ln.num_warps,
        )  # fmt: skip
    if out is None and empty_history:
        ring_mark_folded(ring, slots, validate=False, impl="triton")
    return out if out is not None else checkpoint
