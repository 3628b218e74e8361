"""Fold first: the staged verify's flushing rows folded in a launch of their own, which hands the main kernel the
window's ``S0 x`` dots of the folded state, so that the main kernel never reads a folded row's checkpoint.

Between the staging kernel (``verify_prep``) and the main kernel (``verify_kernel``), one program per (value head,
request) of ``META``'s order; a program whose row does not flush exits after its ``META`` row. A flushing program
folds its head block by block with the same ``_fold_staged`` (bitwise the baseline) and writes each block back with
its fold marker, as the main kernel's own fold does (``verify_fold._fold_head``). Then, with the folded block still
in its registers, it takes the block's dots with the step's ``2BT`` window vectors (``X``: the normalised keys, then
the scaled queries) and stores them in ``DOTS`` ``[B, HV, V, 2BT]`` fp32 (``_dot_rows``: one FMA chain per thread,
then the butterfly). A retry of the step finds the marks, folds nothing, and takes the same dots of the same bits,
so it gives the first attempt's outputs.

Why (bench/NOTES.md, twenty-fourth session): in a kernel of its own, a program that loads, folds and stores hides
the fold's FP32 work under its own traffic (12 records onto every state at B=256 cost 578 us against a 532 us read +
write, 2026-12-03e-h200, run 5), while a folding program of the main kernel then also streams its folded tile back
and does the window's work behind it (a pure-flush step 804-822 us against a 313 us non-flush one: 41-42 us per
record). Here the main kernel's folded rows read only their dots.
"""

from __future__ import annotations

import triton.language as tl  # noqa: F401  (the interpreter looks for it in a kernel's globals)

from ._gluon import async_copy, gl, jit
from ._pinned import MARK, _dot_rows
from .verify_fold import _fold_staged
from .verify_prep import META_ROW


@jit
def _fold_first_kernel(
    checkpoint, ring_k, ring_v, ring_g, ring_beta, ring_folded, META, X, DOTS,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, BT: tl.constexpr,
    BV: tl.constexpr, BVP: tl.constexpr, TILE: tl.constexpr, CP2: tl.constexpr, CPV: tl.constexpr,
    CPG: tl.constexpr, SMEM: tl.constexpr, ROWS1: tl.constexpr,
):  # fmt: skip
    i_hv = gl.program_id(0)
    i_b = gl.program_id(1)
    i_v = gl.program_id(2)
    mb = META + i_b * META_ROW
    ks = gl.allocate_shared_memory(gl.float32, [L, K], SMEM)
    vs = gl.allocate_shared_memory(ring_v.dtype.element_ty, [L, BVP], SMEM)
    gs = gl.allocate_shared_memory(gl.float32, [L, 1], SMEM)
    bs = gl.allocate_shared_memory(gl.float32, [L, 1], SMEM)
    xs = gl.allocate_shared_memory(gl.float32, [2 * BT, K], SMEM)
    slot = gl.load(mb)
    fl = gl.load(mb + 5)
    if (slot >= 0) & (fl != 0):
        wp = gl.load(mb + 3)
        start = gl.load(mb + 4)
        ep = gl.load(mb + 6)
        req = gl.load(mb + 7).to(gl.int64)
        i_h = i_hv // (HV // H)
        r0 = i_v * BVP
        s64 = slot.to(gl.int64)
        ckpt = checkpoint + (s64 * HV + i_hv) * V * K
        rk = ring_k + (s64 * H + i_h) * L * K
        rv = ring_v + (s64 * HV + i_hv) * L * V
        rg = ring_g + (s64 * HV + i_hv) * L
        rb = ring_beta + (s64 * HV + i_hv) * L
        marks = ring_folded + (s64 * HV + i_hv) * (V // MARK)
        # one round trip: the records, the window vectors and the first block
        jk = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CP2)), 1)
        kc = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, CP2)), 0)
        async_copy.async_copy_global_to_shared(ks, rk + ((start + jk) & (L - 1)) * K + kc, mask=(jk < wp) & (kc < K))
        xr = gl.expand_dims(gl.arange(0, 2 * BT, layout=gl.SliceLayout(1, CP2)), 1)
        async_copy.async_copy_global_to_shared(xs, X + (req * H + i_h) * (2 * BT * K) + xr * K + kc)
        jv = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CPV)), 1)
        rc = gl.expand_dims(gl.arange(0, BVP, layout=gl.SliceLayout(0, CPV)), 0)
        p_v = rv + ((start + jv) & (L - 1)) * V + r0 + rc
        async_copy.async_copy_global_to_shared(vs, p_v, mask=(jv < wp) & (rc < BVP))
        jg = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CPG)), 1)
        pg = (start + jg) & (L - 1)
        async_copy.async_copy_global_to_shared(gs, rg + pg, mask=jg < wp)
        async_copy.async_copy_global_to_shared(bs, rb + pg, mask=jg < wp)
        async_copy.commit_group()
        rows = gl.arange(0, BV, layout=gl.SliceLayout(1, TILE))
        cols = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, TILE)), 0)
        h = gl.load(ckpt + gl.expand_dims(r0 + rows, 1) * K + cols)
        todo = gl.load(marks + r0 // MARK) != ep
        async_copy.wait_group(0)
        gl.thread_barrier()  # every thread has read the marker (and the copies landed) before any writes one
        ks_rows = ks._reinterpret(gl.float32, [L, K], ROWS1)
        vs_rows = vs._reinterpret(ring_v.dtype.element_ty, [L, BVP], ROWS1)
        gs_rows = gs._reinterpret(gl.float32, [L, 1], ROWS1)
        bs_rows = bs._reinterpret(gl.float32, [L, 1], ROWS1)
        xs_rows = xs._reinterpret(gl.float32, [2 * BT, K], ROWS1)
        m = gl.arange(0, BV // MARK, layout=gl.SliceLayout(1, TILE))
        for blk in gl.static_range(BVP // BV):
            rows_b = r0 + blk * BV + rows
            p = ckpt + gl.expand_dims(rows_b, 1) * K + cols
            if blk > 0:
                h = gl.load(p)
            if todo:
                h = _fold_staged(h, ks_rows, vs_rows, gs_rows, bs_rows, wp, blk * BV, BV, TILE)
                gl.store(p, h)
                gl.store(marks + (r0 + blk * BV) // MARK + m,
                         gl.full([BV // MARK], 0, gl.int32, layout=gl.SliceLayout(1, TILE)) + ep)  # fmt: skip
            p_d = DOTS + ((req * HV + i_hv) * V + rows_b) * (2 * BT)
            for j in gl.static_range(2 * BT):
                x = gl.expand_dims(xs_rows.index(j).load(gl.SliceLayout(0, TILE)), 0)
                hb, xb = gl.broadcast(h, x)
                gl.store(p_d + j, _dot_rows(hb, xb))


@jit
def _given_dots(DOTS, v, GA, GB, vw, a_s, pt_s, gb_s, vh, bos, T, r0, i_hv, HV: tl.constexpr, V: tl.constexpr,
                BT: tl.constexpr, BVP: tl.constexpr, CPV: tl.constexpr, M2: tl.constexpr,
                EPI: tl.constexpr):  # fmt: skip
    """The main kernel's step 2 for a row folded by ``_fold_first_kernel``: no checkpoint streams; the window's
    values and staged matrices arrive as for a streaming row, and ``(S0 k^, S0 q^)`` ([BVP, BT] each, in ``EPI``)
    come from ``DOTS``."""
    r2 = gl.expand_dims(gl.arange(0, BVP, layout=gl.SliceLayout(0, CPV)), 0) + r0
    v_t = gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(1, CPV)), 1)
    v_tok = bos.to(gl.int64) + gl.where(v_t < T, v_t, 0)
    async_copy.async_copy_global_to_shared(vw, v + (v_tok * HV + i_hv) * V + r2, mask=v_t < T)
    async_copy.commit_group()
    rows = r0 + gl.arange(0, BVP, layout=gl.SliceLayout(1, EPI))
    cols = gl.arange(0, BT, layout=gl.SliceLayout(0, EPI))
    p_d = DOTS + (vh * V + gl.expand_dims(rows, 1)) * (2 * BT) + gl.expand_dims(cols, 0)
    acc_k = gl.load(p_d)
    acc_q = gl.load(p_d + BT)
    i0 = gl.arange(0, BT, layout=gl.SliceLayout(1, M2))
    i1 = gl.arange(0, BT, layout=gl.SliceLayout(0, M2))
    p_ga = GA + vh * (2 * BT * BT) + gl.expand_dims(i0, 1) * BT + gl.expand_dims(i1, 0)
    a_s.store(gl.load(p_ga))
    pt_s.store(gl.load(p_ga + BT * BT))
    i4 = gl.arange(0, 4, layout=gl.SliceLayout(1, M2))
    gb_s.store(gl.load(GB + vh * (4 * BT) + gl.expand_dims(i4, 1) * BT + gl.expand_dims(i1, 0)))
    async_copy.wait_group(0)
    gl.thread_barrier()
    return acc_k, acc_q
