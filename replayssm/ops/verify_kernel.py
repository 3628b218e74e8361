"""Second launch of ``gdn_replay_verify``: fold, window outputs and new records, one value head per program.

One program owns one value head of one request. Its ``[V, K]`` checkpoint streams through shared
memory in tiles of ``BV`` rows with ``cp.async``, ``STAGES`` tiles in flight, so the memory pipe stays
busy while a tile is folded and turned into outputs; the window and history vectors (staged by
``verify_prep``), the update vectors, the window's values arrive the same way at the start. Bytes:
the checkpoint is read once (64 KiB per head at K = V = 128); a flushing row writes it once.

Per tile (``tile_layout``: a row's K reduction is in-thread plus a butterfly over 4 lanes):

1. a flushing row's tile is folded record by record with the pinned ``_update`` (bitwise the
   baseline), written back and marked (a retry of the step finds the mark and does not fold again);
2. ``S0 x`` for the 2T window vectors (fp32 FMA), then the history term of a non-flushing row:
   ``S_prev x = e^Gt S0 x + sum_j e^(Gt - P_j) (k^_j . x) u_j``;
3. per row, in-thread over the window: ``R = beta (v - e^G S_prev k^)``, ``U = (I + A)^-1 R`` by forward
   substitution with ``A`` (strictly lower, ``beta_s e^(G_s - G_r) k^_s.k^_r``), ``o = e^G S_prev q^ + P U``
   with ``P`` (``e^(G_s - G_r) q^_s.k^_r``, r <= s); the window's ``u`` and raw ``v`` appended to the ring.
"""

from __future__ import annotations

import triton.language as tl  # noqa: F401  (the interpreter looks for it in a kernel's globals)

from ._gluon import async_copy, gl, jit
from ._pinned import MARK, _fold_records, _gating


@jit
def _window_gates(a, b, tok, live, i_hv, HV: tl.constexpr, A, dtb):
    """(g, beta) of the window tokens ``tok`` (fp32, 0 where not ``live``)."""
    a_w = gl.load(a + tok * HV + i_hv).to(gl.float32)
    b_w = gl.load(b + tok * HV + i_hv).to(gl.float32)
    g, beta = _gating(a_w, b_w, A, dtb)
    return gl.where(live, g, 0.0), gl.where(live, beta, 0.0)


@jit
def _gdn_replay_verify_kernel(
    v, a, b, A_log, dt_bias, checkpoint, slots, cu_seqlens, o,
    ring_k, ring_v, ring_g, ring_beta, ring_u, ring_folded, write_pos, base, flush, pending, epoch, X, GR, C,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, BT: tl.constexpr,
    BV: tl.constexpr, BVP: tl.constexpr, STAGES: tl.constexpr, TILE: tl.constexpr, EPI: tl.constexpr, M2: tl.constexpr,
    HL: tl.constexpr, CP2: tl.constexpr, CP3: tl.constexpr, CPV: tl.constexpr, SMEM: tl.constexpr,
    SMEM_TILE: tl.constexpr, ROWS1: tl.constexpr,
):  # fmt: skip
    i_hv = gl.program_id(0)
    i_b = gl.program_id(1)
    i_v = gl.program_id(2)  # small batches split a head's rows over several programs
    i_h = i_hv // (HV // H)
    NB: tl.constexpr = BVP // BV
    r0 = i_v * BVP
    slot = gl.load(slots + i_b)
    bos = gl.load(cu_seqlens + i_b)
    T = gl.load(cu_seqlens + i_b + 1) - bos
    tok = gl.arange(0, BT, layout=gl.SliceLayout(0, EPI))
    tok64 = bos.to(gl.int64) + gl.where(tok < T, tok, 0)  # padding lanes re-read token 0, then get masked
    rows_e0 = r0 + gl.arange(0, BV, layout=gl.SliceLayout(1, EPI))

    tiles = gl.allocate_shared_memory(gl.float32, [STAGES, BV, K], SMEM_TILE)
    xs = gl.allocate_shared_memory(gl.float32, [2 * BT, K], SMEM)  # window vectors
    us = gl.allocate_shared_memory(ring_u.dtype.element_ty, [L, BVP], SMEM)  # history update vectors
    cs = gl.allocate_shared_memory(gl.float32, [L, 2 * BT], SMEM)  # history dots C[j, x]
    vw = gl.allocate_shared_memory(v.dtype.element_ty, [BT, BVP], SMEM)  # the window's values
    a_s = gl.allocate_shared_memory(gl.float32, [BT, BT], SMEM)  # A[s, r]
    pt_s = gl.allocate_shared_memory(gl.float32, [BT, BT], SMEM)  # P[s, r] stored as [r, s]
    gb_s = gl.allocate_shared_memory(gl.float32, [2, BT], SMEM)  # exp(G_s), beta_s

    if slot < 0:
        for blk in gl.static_range(NB):
            rows_e = blk * BV + rows_e0
            live_e = gl.expand_dims(rows_e < V, 1) & gl.expand_dims(tok < T, 0)
            p_o = o + (gl.expand_dims(tok64, 0) * HV + i_hv) * V + gl.expand_dims(rows_e, 1)
            gl.store(p_o, gl.zeros([BV, BT], gl.float32, layout=EPI).to(o.dtype.element_ty), mask=live_e)
    else:
        s64 = slot.to(gl.int64)
        ckpt = checkpoint + (s64 * HV + i_hv) * V * K
        # Tiles first: their addresses need only the slot.
        t_rows = gl.arange(0, BV, layout=gl.SliceLayout(1, CP2))
        t_cols = gl.arange(0, K, layout=gl.SliceLayout(0, CP2))
        t_ptr = ckpt + gl.expand_dims(r0 + t_rows, 1) * K + gl.expand_dims(t_cols, 0)
        async_copy.async_copy_global_to_shared(tiles.index(0), t_ptr)
        wp = gl.load(write_pos + slot)
        bs = gl.load(base + slot)
        fl = gl.load(flush + slot)
        ep = gl.load(epoch + slot)
        n_hist = gl.where(fl != 0, 0, wp)
        head = i_b.to(gl.int64) * H + i_h
        rv = ring_v + (s64 * HV + i_hv) * L * V
        ru = ring_u + (s64 * HV + i_hv) * L * V
        rg = ring_g + (s64 * HV + i_hv) * L
        rb = ring_beta + (s64 * HV + i_hv) * L
        # Everything else of the step, into shared memory (it lands before the first tile).
        x_r = gl.arange(0, 2 * BT, layout=gl.SliceLayout(1, CP2))
        async_copy.async_copy_global_to_shared(
            xs, X + head * (2 * BT * K) + gl.expand_dims(x_r, 1) * K + gl.expand_dims(t_cols, 0)
        )
        j2 = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CPV)), 1)  # [L, 1]
        r2 = gl.expand_dims(gl.arange(0, BVP, layout=gl.SliceLayout(0, CPV)), 0) + r0  # [1, BVP]
        async_copy.async_copy_global_to_shared(us, ru + ((bs + j2) & (L - 1)) * V + r2, mask=j2 < n_hist)
        jc = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CP3)), 1)
        c2 = gl.expand_dims(gl.arange(0, 2 * BT, layout=gl.SliceLayout(0, CP3)), 0)
        async_copy.async_copy_global_to_shared(cs, C + head * (L * 2 * BT) + jc * (2 * BT) + c2, mask=jc < n_hist)
        v_t = gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(1, CPV)), 1)  # [BT, 1]
        v_tok = bos.to(gl.int64) + gl.where(v_t < T, v_t, 0)
        async_copy.async_copy_global_to_shared(vw, v + (v_tok * HV + i_hv) * V + r2, mask=v_t < T)
        async_copy.commit_group()  # group 0: the first tile and the step's vectors
        for st in gl.static_range(1, STAGES):
            async_copy.async_copy_global_to_shared(tiles.index(st), t_ptr + st * BV * K)
            async_copy.commit_group()

        # Gates and the [T, T] matrices (dim 0 = s, dim 1 = r) while the copies are in flight.
        i0 = gl.arange(0, BT, layout=gl.SliceLayout(1, M2))
        i1 = gl.arange(0, BT, layout=gl.SliceLayout(0, M2))
        A = gl.load(A_log + i_hv).to(gl.float32)
        dtb = gl.load(dt_bias + i_hv).to(gl.float32)
        g0, be0 = _window_gates(a, b, bos.to(gl.int64) + gl.minimum(i0, T - 1), i0 < T, i_hv, HV, A, dtb)
        g1, be1 = _window_gates(a, b, bos.to(gl.int64) + gl.minimum(i1, T - 1), i1 < T, i_hv, HV, A, dtb)
        low = gl.expand_dims(i1, 0) <= gl.expand_dims(i0, 1)  # r <= s
        up = gl.expand_dims(i0, 1) <= gl.expand_dims(i1, 0)
        G0 = gl.sum(gl.where(low, gl.expand_dims(g1, 0), 0.0), axis=1)  # cumulative gate at s (dim 0)
        G1 = gl.sum(gl.where(up, gl.expand_dims(g0, 1), 0.0), axis=0)  # cumulative gate at r (dim 1)
        decay = gl.exp(gl.where(low, gl.expand_dims(G0, 1) - gl.expand_dims(G1, 0), 0.0))
        p_gr = GR + head * (2 * BT * BT) + gl.expand_dims(i0, 1) * BT + gl.expand_dims(i1, 0)
        strict = gl.expand_dims(i1, 0) < gl.expand_dims(i0, 1)
        a_s.store(gl.where(strict, gl.expand_dims(be0, 1) * decay * gl.load(p_gr), 0.0))
        pt_s.permute((1, 0)).store(gl.where(low, decay * gl.load(p_gr + BT * BT), 0.0))
        gb_s.slice(0, 1, dim=0).store(gl.expand_dims(gl.exp(G1), 0))
        gb_s.slice(1, 1, dim=0).store(gl.expand_dims(be1, 0))
        if i_v == 0:
            p_w = (bs + wp + i1) & (L - 1)
            gl.store(rg + p_w, g1, mask=i1 < T)
            gl.store(rb + p_w, be1, mask=i1 < T)
        offs_l = gl.arange(0, L, layout=HL)
        g_hist = gl.load(rg + ((bs + offs_l) & (L - 1)), mask=offs_l < n_hist, other=0.0)
        Gt = gl.sum(g_hist, axis=0)
        e_hist = gl.exp(Gt)
        async_copy.wait_group(STAGES - 1)  # the step's vectors and the first tile
        gl.thread_barrier()
        eg = gb_s.slice(0, 1, dim=0).load(EPI)  # [1, BT]
        beta = gb_s.slice(1, 1, dim=0).load(EPI)
        us_rows = us._reinterpret(ring_u.dtype.element_ty, [L, BVP], ROWS1)  # indexable by record
        cs_rows = cs._reinterpret(gl.float32, [L, 2 * BT], ROWS1)
        vw_t = vw.permute((1, 0))  # [V, BT]

        rows_t0 = r0 + gl.arange(0, BV, layout=gl.SliceLayout(1, TILE))
        cols = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, TILE)), 0)  # [1, K]
        for blk in gl.static_range(NB):
            h = tiles.index(blk % STAGES).load(TILE)
            rows = blk * BV + rows_t0
            if fl != 0:  # 1. fold (once per epoch)
                mark = ring_folded + (s64 * HV + i_hv) * (V // MARK) + (r0 + blk * BV) // MARK
                if gl.load(mark) != ep:
                    rk = ring_k + (s64 * H + i_h) * L * K
                    h = _fold_records(h, rk, rv, rg, rb, wp, bs, rows, cols, K, V, L)
                    gl.store(ckpt + gl.expand_dims(rows, 1) * K + cols, h)
                    m = gl.arange(0, BV // MARK, layout=gl.SliceLayout(1, TILE))
                    gl.store(mark + m, gl.full([BV // MARK], 0, gl.int32, layout=gl.SliceLayout(1, TILE)) + ep)
            gl.thread_barrier()  # every warp is done with this stage: refill it
            if blk + STAGES < NB:
                async_copy.async_copy_global_to_shared(tiles.index(blk % STAGES), t_ptr + (blk + STAGES) * BV * K)
            async_copy.commit_group()

            # 2. S0 x for every window vector, then the history term.
            dk = gl.zeros([BV, BT], gl.float32, layout=EPI)
            dq = gl.zeros([BV, BT], gl.float32, layout=EPI)
            for s in gl.static_range(BT):
                d_k = gl.sum(h * xs.slice(s, 1, dim=0).load(TILE), axis=1)
                d_q = gl.sum(h * xs.slice(BT + s, 1, dim=0).load(TILE), axis=1)
                dk = gl.where(
                    gl.expand_dims(tok, 0) == s, gl.expand_dims(gl.convert_layout(d_k, gl.SliceLayout(1, EPI)), 1), dk
                )
                dq = gl.where(
                    gl.expand_dims(tok, 0) == s, gl.expand_dims(gl.convert_layout(d_q, gl.SliceLayout(1, EPI)), 1), dq
                )
            dk = dk * e_hist
            dq = dq * e_hist
            P_j = Gt * 0.0
            for j in range(0, n_hist):
                P_j = P_j + gl.load(rg + ((bs + j) & (L - 1)))
                u_j = us_rows.index(j).slice(blk * BV, BV).load(gl.SliceLayout(1, EPI)).to(gl.float32)  # rows r0 + ...
                u = gl.expand_dims(u_j * gl.exp(Gt - P_j), 1)  # [BV, 1]
                c = cs_rows.index(j)
                dk = dk + u * gl.expand_dims(c.slice(0, BT).load(gl.SliceLayout(0, EPI)), 0)
                dq = dq + u * gl.expand_dims(c.slice(BT, BT).load(gl.SliceLayout(0, EPI)), 0)

            # 3. Residuals, (I + A)^-1, outputs; the window's records.
            rows_e = blk * BV + rows_e0
            live_e = gl.expand_dims(rows_e < V, 1) & gl.expand_dims(tok < T, 0)
            v_raw = vw_t.slice(blk * BV, BV, dim=0).load(EPI)  # rows r0 + blk * BV + ...
            U = beta * (gl.where(live_e, v_raw.to(gl.float32), 0.0) - eg * dk)
            for s in gl.static_range(1, BT):
                corr = gl.sum(U * a_s.slice(s, 1, dim=0).load(EPI), axis=1)  # sum_r A[s, r] u_r
                U = gl.where(gl.expand_dims(tok, 0) == s, U - gl.expand_dims(corr, 1), U)
            out = eg * dq
            for r in gl.static_range(BT):
                u_r = gl.sum(gl.where(gl.expand_dims(tok, 0) == r, U, 0.0), axis=1)
                out = out + gl.expand_dims(u_r, 1) * pt_s.slice(r, 1, dim=0).load(EPI)
            p_o = o + (gl.expand_dims(tok64, 0) * HV + i_hv) * V + gl.expand_dims(rows_e, 1)
            gl.store(p_o, out.to(o.dtype.element_ty), mask=live_e)
            p_rec = gl.expand_dims((bs + wp + tok) & (L - 1), 0) * V + gl.expand_dims(rows_e, 1)
            gl.store(ru + p_rec, U.to(ring_u.dtype.element_ty), mask=live_e)
            gl.store(rv + p_rec, v_raw, mask=live_e)
            if blk + 1 < NB:
                async_copy.wait_group(STAGES - 1)  # the next tile has landed
                gl.thread_barrier()
        if (i_hv == 0) & (i_v == 0):
            gl.store(pending + slot, T)
