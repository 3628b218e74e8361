"""Step 1 of ``gdn_replay_verify``'s main kernel (``verify_kernel``): a flushing row folds its history first.

A folding program replays its head's ``n`` ring records onto its rows of the checkpoint, ``BV``-row block by block
on the pinned ``tile_layout`` with ``_update`` (bitwise the recurrent baseline), writes each block back and marks it
with the slot's epoch (a retry of the step finds the marks and does not fold again). ``gdn_fold_ahead`` runs
``_fold_staged`` on the same records. ``_packed_views`` lends the folding row's key buffer to the stream that
follows its fold (staged, where ``verify_launch.pack_in_keys`` says the stream's buffers fit).
"""

from __future__ import annotations

import triton.language as tl  # noqa: F401  (the interpreter looks for it in a kernel's globals)

from ._gluon import async_copy, gl, jit
from ._pinned import MARK, _update
from .verify_dots import _fold_dots


@jit
def _fold_head(ckpt, rk, rv, rg, rb, marks, ep, n, start, r0, ks, vs, gs, bs_, chunks, xs, p_x, BVP: tl.constexpr,
               BV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, TILE: tl.constexpr,
               CP2: tl.constexpr, CPV: tl.constexpr, CPG: tl.constexpr, ROWS1: tl.constexpr, PRE: tl.constexpr,
               SMEM_PRE: tl.constexpr, DIF: tl.constexpr, X2: tl.constexpr, NX: tl.constexpr, MMA: tl.constexpr,
               SMEM: tl.constexpr, G_IN_KEYS: tl.constexpr):  # fmt: skip
    """Fold the ``n`` history records into rows ``r0 .. r0 + BVP`` of one head's checkpoint (``BV``-row blocks
    of the pinned tile), unless they are already marked with this epoch; returns whether it folded.

    With ``DIF`` (two blocks, ``PRE``) it also takes the folded state's window products (``verify_dots._fold_dots``:
    the window vectors from ``p_x`` into ``xs``, after the fold or, ``DIF`` >= 2, with the history; the products left
    in the chunk buffer): the chunk buffer takes the first block back from L2 while the second folds.

    Everything the fold reads arrives in one round trip, issued before the marker is known (reads only: a head
    folded already just discards them): the records' keys, this program's values and every record's gate and
    beta (``ks``, ``vs``, ``gs``, in logical order, shared memory), and the first state block. With ``G_IN_KEYS``
    (``PACK``: the gates and betas sit in the keys' last row, ``_packed_views``) the gates and betas are loaded
    into registers and stored once the keys' copy has landed: that copy zero-fills the rows past ``n`` (a masked
    ``cp.async`` writes zeros), the last one included, and two copies into the same bytes from different threads
    complete in no defined order (a review of the twenty-fifth session; never seen to go wrong on an H200, where
    the zero-fill, which reads nothing, lands first). A launch folds
    every row it owns, so one marker tells for all of them. Every thread reads it before any thread writes one
    (the barrier): otherwise a fast warp could mark a block while a slow warp had yet to read that block's
    marker, and the slow warp would skip its rows. With ``PRE`` the next block's state is copied into the
    (idle) chunk buffer while the current block folds."""
    jk = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CP2)), 1)
    kc = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, CP2)), 0)
    async_copy.async_copy_global_to_shared(ks, rk + ((start + jk) & (L - 1)) * K + kc, mask=(jk < n) & (kc < K))
    jv = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CPV)), 1)
    rc = gl.expand_dims(gl.arange(0, BVP, layout=gl.SliceLayout(0, CPV)), 0)
    async_copy.async_copy_global_to_shared(vs, rv + ((start + jv) & (L - 1)) * V + r0 + rc, mask=(jv < n) & (rc < BVP))
    jg = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CPG)), 1)  # [L, 1]
    pg = (start + jg) & (L - 1)
    if G_IN_KEYS:  # the keys' copy zero-fills their last row (masked): the gates wait in registers until it landed
        g_r = gl.load(rg + pg, mask=jg < n, other=0.0)
        b_r = gl.load(rb + pg, mask=jg < n, other=0.0)
    else:
        async_copy.async_copy_global_to_shared(gs, rg + pg, mask=jg < n)
        async_copy.async_copy_global_to_shared(bs_, rb + pg, mask=jg < n)
    if DIF >= 2:  # the window vectors too, into a buffer of their own
        async_copy.async_copy_global_to_shared(xs.slice(0, X2, dim=0), p_x)
    async_copy.commit_group()
    rows0 = r0 + gl.arange(0, BV, layout=gl.SliceLayout(1, TILE))
    cols = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, TILE)), 0)
    h0 = gl.load(ckpt + gl.expand_dims(rows0, 1) * K + cols)  # in flight with the copies
    todo = gl.load(marks + r0 // MARK) != ep
    gl.thread_barrier()
    if todo:
        m = gl.arange(0, BV // MARK, layout=gl.SliceLayout(1, TILE))
        if PRE:
            pre = chunks._reinterpret(gl.float32, [BV, K], SMEM_PRE)
            br = gl.expand_dims(gl.arange(0, BV, layout=gl.SliceLayout(1, CP2)), 1)
            p_pre = ckpt + (r0 + br) * K + kc
            async_copy.async_copy_global_to_shared(pre, p_pre + BV * K)  # block 1
            async_copy.commit_group()
        async_copy.wait_group(1 if PRE else 0)
        gl.thread_barrier()
        if G_IN_KEYS:  # every thread's copies landed (the barrier): the gates over the zero-filled row
            gs.store(g_r)
            bs_.store(b_r)
            gl.thread_barrier()
        ks_rows = ks._reinterpret(gl.float32, [L, K], ROWS1)
        vs_rows = vs._reinterpret(rv.dtype.element_ty, [L, BVP], ROWS1)
        gs_rows = gs._reinterpret(gl.float32, [L, 1], ROWS1)
        bs_rows = bs_._reinterpret(gl.float32, [L, 1], ROWS1)
        for blk in gl.static_range(BVP // BV):
            p = ckpt + gl.expand_dims(rows0 + blk * BV, 1) * K + cols
            if blk == 0:
                h = h0
            elif PRE:
                async_copy.wait_group(0)
                gl.thread_barrier()
                h = pre.load(TILE)
                gl.thread_barrier()  # every warp holds its rows: the buffer takes the next block
                if blk + 1 < BVP // BV:
                    async_copy.async_copy_global_to_shared(pre, p_pre + (blk + 1) * BV * K)
                    async_copy.commit_group()
                elif DIF:  # the block before, written by every thread before the barrier above, back from L2
                    async_copy.async_copy_global_to_shared(pre, p_pre + (blk - 1) * BV * K)
                    async_copy.commit_group()
            else:
                h = gl.load(p)
            h = _fold_staged(h, ks_rows, vs_rows, gs_rows, bs_rows, n, blk * BV, BV, TILE)
            gl.store(p, h)
            mark = marks + (r0 + blk * BV) // MARK
            gl.store(mark + m, gl.full([BV // MARK], 0, gl.int32, layout=gl.SliceLayout(1, TILE)) + ep)
        if DIF:
            gl.static_assert(PRE and BVP == 2 * BV, "DIF: two blocks a program, the second prefetched")
            _fold_dots(h, pre, xs, p_x, chunks, BV, BVP, K, X2, NX, MMA, SMEM, DIF == 1)
    return todo


@jit
def _fold_staged(h, ks, vs, gs, bs, n, row0: tl.constexpr, BV: tl.constexpr, TILE: tl.constexpr):
    """``_fold_records`` with the keys, values, gates and betas read from shared memory (records in logical
    order); the same pinned ``_update`` on the same data, so bitwise the same states. A record's decay ``exp(g)``
    and beta are read one record ahead, so that no update waits for its gate's load (ncu: the most-sampled
    instruction of the loop was ``g * log2(e)`` waiting for it; bench/NOTES.md, fourteenth session)."""
    ONE: tl.constexpr = gl.SliceLayout(1, TILE)
    e_n = gl.exp(gl.sum(gs.index(0).load(ONE), axis=0))  # (read even when n == 0: shared memory, never used)
    b_n = gl.sum(bs.index(0).load(ONE), axis=0)
    for j in range(0, n):
        e, beta = e_n, b_n
        jn = gl.minimum(j + 1, n - 1)  # the next record (the last one again at the end)
        e_n = gl.exp(gl.sum(gs.index(jn).load(ONE), axis=0))
        b_n = gl.sum(bs.index(jn).load(ONE), axis=0)
        khat = gl.expand_dims(ks.index(j).load(gl.SliceLayout(0, TILE)), 0)
        v = vs.index(j).slice(row0, BV).load(gl.SliceLayout(1, TILE)).to(gl.float32)
        h = _update(h, khat, v, e, beta)
    return h


@jit
def _packed_views(keys, v_ty: tl.constexpr, K: tl.constexpr, L: tl.constexpr, BT: tl.constexpr, BVP: tl.constexpr,
                  NX: tl.constexpr, SMEM: tl.constexpr, SMEM_X: tl.constexpr):  # fmt: skip
    """(xs, cs, vw, a_s, pt_s, gb_s, fold_g, fold_b): the staged main kernel's stream buffers as views of the rows of
    a folding row's [L, K] fp32 history keys (``PACK``, ``verify_launch.pack_in_keys`` decides where they fit), and
    the fold's gates and betas in the keys' last row. The keys are dead once the fold is over, before the stream
    fills its buffers; a fold replays at most L - T records (``ring_commit`` flushes before a window could overrun
    the ring), so it never fills the last row. Each buffer starts at a multiple of its own rows (a power of two): a
    Gluon subslice may not straddle a tile of its size."""
    CR: tl.constexpr = (L * 2 * BT + K - 1) // K  # rows of K fp32: the [L, 2BT] weighted dots
    VR: tl.constexpr = (BT * BVP * v_ty.primitive_bitwidth // 8 + 4 * K - 1) // (4 * K)  # the [BT, BVP] values
    AR: tl.constexpr = (BT * BT + K - 1) // K  # each [BT, BT] matrix
    GR: tl.constexpr = (4 * BT + K - 1) // K  # the [4, BT] decays
    OC: tl.constexpr = (NX + CR - 1) // CR * CR
    OV: tl.constexpr = (OC + CR + VR - 1) // VR * VR
    OA: tl.constexpr = (OV + VR + AR - 1) // AR * AR
    OG: tl.constexpr = (OA + 2 * AR + GR - 1) // GR * GR
    gl.static_assert(OG + GR <= L, "PACK: the stream's buffers must fit in the keys' rows")
    gl.static_assert(2 * L <= K, "PACK: the fold's gates and betas must fit in one row of keys")
    tail = keys.slice(L - 1, 1, dim=0)
    return (
        keys.slice(0, NX, dim=0)._reinterpret(gl.float32, [NX, K], SMEM_X),
        keys.slice(OC, CR, dim=0)._reinterpret(gl.float32, [L, 2 * BT], SMEM),
        keys.slice(OV, VR, dim=0)._reinterpret(v_ty, [BT, BVP], SMEM),
        keys.slice(OA, AR, dim=0)._reinterpret(gl.float32, [BT, BT], SMEM),
        keys.slice(OA + AR, AR, dim=0)._reinterpret(gl.float32, [BT, BT], SMEM),
        keys.slice(OG, GR, dim=0)._reinterpret(gl.float32, [4, BT], SMEM),
        tail.slice(0, L, dim=1)._reinterpret(gl.float32, [L, 1], SMEM),
        tail.slice(L, L, dim=1)._reinterpret(gl.float32, [L, 1], SMEM),
    )
