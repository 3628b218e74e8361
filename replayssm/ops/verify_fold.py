"""The first launch of a small batch's verify: the ``META`` rows, and the fold of every flushing row, split finely.

In one launch (``verify_window``) a flushing row folds inside its main-kernel program, which owns a whole head. At a
batch that fits in one wave of main-kernel programs (B=8 at the 122B geometry) the step then lasts as long as its
slowest program, a folding one: four warps fold the head's 128 rows as two 64-row blocks, one after the other, a
chain of ``2 x records`` pinned updates while the GPU around it is idle. Here (``gdn_replay_verify`` with
``fold_first``) the flushing rows fold first, in a launch of their own whose programs own ``rows_per_program`` rows
of a head (32 by default: four programs per head, one tile block each, half the rows per thread), so the chain is a
quarter as long and spread over four times the warps; the main kernel then streams every row, a folded one with an
empty history, without folding (its ``FOLDED``). The fold is ``verify_kernel._fold_head``, the same pinned
``_update`` on the same records, marked with the slot's ``epoch`` as in the main kernel: the checkpoints are
bitwise the same either way, and a retry of the step does not fold twice.

The launch also writes what the one-launch ``_meta_kernel`` writes (``META`` rows and ``pending``), from the first
program of each request, so the verify keeps two launches. Programs of rows that do not fold exit after two loads.
"""

from __future__ import annotations

import functools

import triton.language as tl  # noqa: F401  (the interpreter looks for it in a kernel's globals)

from . import launch
from ._gluon import gl, jit
from ._pinned import MARK
from .verify_kernel import _fold_head
from .verify_prep import META_ROW, _meta_row


@jit
def _verify_fold_kernel(
    slots, cu_seqlens, write_pos, base, flush, epoch, pending, META, checkpoint, ring_k, ring_v, ring_g, ring_beta,
    ring_folded,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, BV: tl.constexpr,
    BVP: tl.constexpr, TILE: tl.constexpr, CP2: tl.constexpr, CPV: tl.constexpr, CPG: tl.constexpr,
    ML: tl.constexpr, SMEM: tl.constexpr, ROWS1: tl.constexpr,
):  # fmt: skip
    i_p = gl.program_id(0)  # which BVP rows of the head
    i_hv = gl.program_id(1)
    i_b = gl.program_id(2)
    slot = gl.load(slots + i_b)
    if (i_p == 0) & (i_hv == 0):  # this request's META row and pending window length
        mi = gl.arange(0, META_ROW, layout=ML)
        bos = gl.load(cu_seqlens + i_b)
        T = gl.load(cu_seqlens + i_b + 1) - bos
        s = gl.maximum(slot, 0)
        live = slot >= 0
        wp = gl.where(live, gl.load(write_pos + s), 0)
        bs = gl.where(live, gl.load(base + s), 0)
        fl = gl.where(live, gl.load(flush + s), 0)
        ep = gl.where(live, gl.load(epoch + s), 0)
        gl.store(META + i_b * META_ROW + mi, _meta_row(mi, slot, bos, T, wp, bs, fl, ep, i_b))
        if live:
            gl.store(pending + s, T)
    ks = gl.allocate_shared_memory(gl.float32, [L, K], SMEM)  # the records' keys, values, gates and betas
    vs = gl.allocate_shared_memory(ring_v.dtype.element_ty, [L, BVP], SMEM)
    gs = gl.allocate_shared_memory(gl.float32, [L, 1], SMEM)
    bs_ = gl.allocate_shared_memory(gl.float32, [L, 1], SMEM)
    if slot >= 0:
        s64 = slot.to(gl.int64)
        if gl.load(flush + slot) != 0:
            wp = gl.load(write_pos + slot)
            start = gl.load(base + slot)
            ep = gl.load(epoch + slot)
            i_h = i_hv // (HV // H)
            ckpt = checkpoint + (s64 * HV + i_hv) * V * K
            rk = ring_k + (s64 * H + i_h) * L * K
            rv = ring_v + (s64 * HV + i_hv) * L * V
            rg = ring_g + (s64 * HV + i_hv) * L
            rb = ring_beta + (s64 * HV + i_hv) * L
            marks = ring_folded + (s64 * HV + i_hv) * (V // MARK)
            _fold_head(ckpt, rk, rv, rg, rb, marks, ep, wp, start, i_p * BVP, ks, vs, gs, bs_, ks, BVP, BV, K, V, L,
                       TILE, CP2, CPV, CPG, ROWS1, False, SMEM)  # fmt: skip


@functools.cache
def _layouts(W: int, BVP: int):
    """The copy layouts of the [L, K] keys, the [L, BVP] 16-bit values and the [L, 1] gates; the META row's."""
    lv = max(1, min(16, BVP // 8))
    return (
        gl.BlockedLayout([1, 4], [1, 32], [W, 1], [1, 0]),
        gl.BlockedLayout([1, 8], [32 // lv, lv], [W, 1], [1, 0]),
        gl.BlockedLayout([1, 1], [32, 1], [W, 1], [1, 0]),
        gl.BlockedLayout([1], [32], [W], [0]),
    )


def launch_verify_fold(slots, cu_seqlens, checkpoint, ring, META, smem, rows1) -> None:
    """The verify's first launch with ``fold_first``: ``META`` rows and ``pending`` for every row, and the fold (with
    its markers) of every flushing row's history, ``launch.resolve("verify_fold", ...)`` rows per program."""
    B = slots.shape[0]
    S, HV, V, K = checkpoint.shape
    H, L = ring.k.shape[1], ring.L
    ln = launch.resolve("verify_fold", V, B * HV, checkpoint.device)
    c = ring.cursors
    cp2, cpv, cpg, ml = _layouts(ln.num_warps, ln.rows_per_program)
    _verify_fold_kernel[(ln.programs_per_head, HV, B)](
        slots, cu_seqlens, c.write_pos, c.base, c.flush, c.epoch, c.pending, META, checkpoint, ring.k, ring.v, ring.g,
        ring.beta, ring.folded, H, HV, K, V, L, ln.rows, ln.rows_per_program, ln.layout, cp2, cpv, cpg, ml, smem, rows1,
        num_warps=ln.num_warps,
    )  # fmt: skip
