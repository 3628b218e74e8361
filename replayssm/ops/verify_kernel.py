"""The ReplaySSM verify kernel (launched by ``verify.gdn_replay_verify``): fold, verify, append in one pass.

One program owns ``BVP`` rows of one value head of one request. Bytes: the checkpoint rows are read
once (64 KiB per head at K = V = 128); a flushing row also writes them once; everything else (the
window's q/k/v/a/b, the history's keys, gates and update vectors, the new records) is a few KiB.

1. Prologue, once per program: the window's keys and queries are normalised with the pinned
   ``_l2norm`` and staged in shared memory (the key-head's first program also appends the keys
   ``k^`` to the ring); the window's gates, the small ``[T, T]`` matrices ``A`` (strictly lower,
   ``beta_s e^(G_s - G_r) k^_s.k^_r``) and ``P`` (``e^(G_s - G_r) k^_r.q^_s``, r <= s), and for a
   non-flushing row the history dots ``C[j, x] = e^(Gt - P_j) k^_j.x`` of every window vector x.
2. Main loop over the program's rows, one ``tile_layout`` tile at a time, the next tile's load in
   flight: a flushing row's tile is first folded record by record with the pinned ``_update``
   (bitwise the baseline), written back and marked; then every tile gives ``S0 x`` for the 2T window
   vectors (fp32 FMA, the K reduction in-thread).
3. Epilogue over all the program's rows, each thread holding whole windows of its rows:
   ``S_prev x = e^Gt S0 x + sum_j u_j C[j, x]``; ``R = beta (v - e^G S_prev k^)``;
   ``U = (I + A)^-1 R`` by forward substitution; ``o = e^G S_prev q^ + P U``; the window's ``u`` and
   raw ``v`` appended to the ring. No tensor-core product is used: every product is fp32 FMA.
"""

from __future__ import annotations

import triton.language as tl  # noqa: F401  (the interpreter looks for it in a kernel's globals)

from ._gluon import gl, jit
from ._pinned import MARK, _fold_records, _gating, _l2norm


@jit
def _window_gates(a, b, tok, live, i_hv, HV: tl.constexpr, A, dtb):
    """(g, beta) of the window tokens ``tok`` (fp32, 0 where not ``live``)."""
    a_w = gl.load(a + tok * HV + i_hv).to(gl.float32)
    b_w = gl.load(b + tok * HV + i_hv).to(gl.float32)
    g, beta = _gating(a_w, b_w, A, dtb)
    return gl.where(live, g, 0.0), gl.where(live, beta, 0.0)


@jit
def _gdn_replay_verify_kernel(
    q, k, v, a, b, A_log, dt_bias, checkpoint, slots, cu_seqlens, o,
    ring_k, ring_v, ring_g, ring_beta, ring_u, ring_folded, write_pos, base, flush, pending, epoch, scale,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, BT: tl.constexpr,
    BV: tl.constexpr, BVP: tl.constexpr, TILE: tl.constexpr, XL: tl.constexpr, L3: tl.constexpr,
    EPI: tl.constexpr, SMEM: tl.constexpr,
):  # fmt: skip
    i_v = gl.program_id(0)
    i_hv = gl.program_id(1)
    i_b = gl.program_id(2)
    group = HV // H
    i_h = i_hv // group
    slot = gl.load(slots + i_b)
    bos = gl.load(cu_seqlens + i_b)
    T = gl.load(cu_seqlens + i_b + 1) - bos
    r0 = i_v * BVP

    # Epilogue coordinates: [BT, BVP], every thread holds the whole window of its rows.
    tok_e = gl.arange(0, BT, layout=gl.SliceLayout(1, EPI))
    rows_e = r0 + gl.arange(0, BVP, layout=gl.SliceLayout(0, EPI))
    live_e = gl.expand_dims(tok_e < T, 1) & gl.expand_dims(rows_e < V, 0)
    tok64_e = bos.to(gl.int64) + gl.where(tok_e < T, tok_e, 0)  # padding lanes re-read token 0, then get masked
    p_o = o + (gl.expand_dims(tok64_e, 1) * HV + i_hv) * V + gl.expand_dims(rows_e, 0)

    xs = gl.allocate_shared_memory(gl.float32, [2 * BT, K], SMEM)  # k^_0..k^_{BT-1}, q^_0 scale, ...
    ds = gl.allocate_shared_memory(gl.float32, [BVP, 2 * BT], SMEM)  # S0 x for every row and window vector
    cs = gl.allocate_shared_memory(gl.float32, [L, 2 * BT, 1], SMEM)  # history dots C[j, x]
    p_s = gl.allocate_shared_memory(gl.float32, [BT, BT], SMEM)  # P[s, r]
    at_s = gl.allocate_shared_memory(gl.float32, [BT, BT], SMEM)  # A[s, r] stored as [r, s]
    eg_s = gl.allocate_shared_memory(gl.float32, [BT, 1], SMEM)  # exp(G_s)
    be_s = gl.allocate_shared_memory(gl.float32, [BT, 1], SMEM)  # beta_s

    if slot < 0:
        gl.store(p_o, gl.zeros([BT, BVP], gl.float32, layout=EPI).to(o.dtype.element_ty), mask=live_e)
    else:
        s64 = slot.to(gl.int64)
        wp = gl.load(write_pos + slot)
        bs = gl.load(base + slot)
        fl = gl.load(flush + slot)
        ep = gl.load(epoch + slot)
        n_hist = gl.where(fl != 0, 0, wp)  # a flushing row's history is folded in the main loop
        ckpt = checkpoint + (s64 * HV + i_hv) * V * K
        rk = ring_k + (s64 * H + i_h) * L * K
        rv = ring_v + (s64 * HV + i_hv) * L * V
        ru = ring_u + (s64 * HV + i_hv) * L * V
        rg = ring_g + (s64 * HV + i_hv) * L
        rb = ring_beta + (s64 * HV + i_hv) * L
        marks = ring_folded + (s64 * HV + i_hv) * (V // MARK)
        rows_t = r0 + gl.arange(0, BV, layout=gl.SliceLayout(1, TILE))
        cols = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, TILE)), 0)  # [1, K]
        h_next = gl.load(ckpt + gl.expand_dims(rows_t, 1) * K + cols)  # the first tile is in flight from here on

        # 1a. Window keys and queries, normalised, into shared memory; keys appended to the ring.
        write_k = (i_v == 0) & (i_hv % group == 0)
        for s in gl.static_range(BT):
            live = s < T
            t64 = bos.to(gl.int64) + gl.minimum(s, T - 1)
            k_s = gl.where(live, gl.load(k + (t64 * H + i_h) * K + cols).to(gl.float32), 0.0)
            khat = _l2norm(k_s)
            xs.slice(s, 1, dim=0).store(khat)
            q_s = gl.where(live, gl.load(q + (t64 * H + i_h) * K + cols).to(gl.float32), 0.0)
            xs.slice(BT + s, 1, dim=0).store(_l2norm(q_s) * scale)
            if write_k & live:
                gl.store(rk + ((bs + wp + s) & (L - 1)) * K + cols, khat)
        gl.thread_barrier()

        # 1b. Window gates and the [T, T] matrices (dim 0 = s, dim 1 = r in M2).
        M2: gl.constexpr = gl.SliceLayout(2, L3)
        i0 = gl.arange(0, BT, layout=gl.SliceLayout(1, M2))
        i1 = gl.arange(0, BT, layout=gl.SliceLayout(0, M2))
        A = gl.load(A_log + i_hv).to(gl.float32)
        dtb = gl.load(dt_bias + i_hv).to(gl.float32)
        g0, be0 = _window_gates(a, b, bos.to(gl.int64) + gl.minimum(i0, T - 1), i0 < T, i_hv, HV, A, dtb)
        g1, be1 = _window_gates(a, b, bos.to(gl.int64) + gl.minimum(i1, T - 1), i1 < T, i_hv, HV, A, dtb)
        lower = gl.expand_dims(i1, 0) <= gl.expand_dims(i0, 1)  # r <= s
        G0 = gl.sum(gl.where(lower, gl.expand_dims(g1, 0), 0.0), axis=1)  # cumulative gate at s
        upper = gl.expand_dims(i0, 1) <= gl.expand_dims(i1, 0)
        G1 = gl.sum(gl.where(upper, gl.expand_dims(g0, 1), 0.0), axis=0)  # cumulative gate at r
        xk0 = xs.slice(0, BT, dim=0).load(gl.SliceLayout(1, L3))
        xk1 = xs.slice(0, BT, dim=0).load(gl.SliceLayout(0, L3))
        xq0 = xs.slice(BT, BT, dim=0).load(gl.SliceLayout(1, L3))
        kk = gl.sum(gl.expand_dims(xk0, 1) * gl.expand_dims(xk1, 0), axis=2)  # k^_s . k^_r
        qk = gl.sum(gl.expand_dims(xq0, 1) * gl.expand_dims(xk1, 0), axis=2)  # q^_s . k^_r
        decay = gl.exp(gl.where(lower, gl.expand_dims(G0, 1) - gl.expand_dims(G1, 0), 0.0))
        p_s.store(gl.where(lower, decay * qk, 0.0))
        strict = gl.expand_dims(i0, 1) < gl.expand_dims(i1, 0)  # as [r, s]: s > r
        decay_t = gl.exp(gl.where(strict, gl.expand_dims(G1, 0) - gl.expand_dims(G0, 1), 0.0))
        at_s.store(gl.where(strict, gl.expand_dims(be1, 0) * decay_t * kk, 0.0))
        eg_s.store(gl.expand_dims(gl.exp(G0), 1))
        be_s.store(gl.expand_dims(be0, 1))
        if i_v == 0:
            p_w = (bs + wp + i0) & (L - 1)
            gl.store(rg + p_w, g0, mask=i0 < T)
            gl.store(rb + p_w, be0, mask=i0 < T)

        # 1c. History dots of a non-flushing row: C[j, x] = exp(Gt - P_j) (k^_j . x).
        offs_l = gl.arange(0, L, layout=gl.SliceLayout(1, XL))
        Gt = gl.sum(gl.load(rg + ((bs + offs_l) & (L - 1)), mask=offs_l < n_hist, other=0.0), axis=0)
        X = xs.load(XL)  # [2BT, K]
        xcols = gl.arange(0, K, layout=gl.SliceLayout(0, XL))
        Pj = Gt * 0.0
        for j in range(0, n_hist):
            p = (bs + j) & (L - 1)
            Pj = Pj + gl.load(rg + p)
            c = gl.sum(X * gl.expand_dims(gl.load(rk + p * K + xcols), 0), axis=1) * gl.exp(Gt - Pj)
            cs.index(j).store(gl.expand_dims(c, 1))

        # 2. Main loop: fold flushing tiles, then S0 x for every window vector.
        for sb in gl.static_range(BVP // BV):
            rows = rows_t + sb * BV
            tile = gl.expand_dims(rows, 1) * K + cols
            h = h_next
            if sb + 1 < BVP // BV:
                h_next = gl.load(ckpt + tile + BV * K)
            if fl != 0:
                mark = marks + (r0 + sb * BV) // MARK
                if gl.load(mark) != ep:  # a retry of this step finds it folded already
                    h = _fold_records(h, rk, rv, rg, rb, wp, bs, rows, cols, K, V, L)
                    gl.store(ckpt + tile, h)
                    m = gl.arange(0, BV // MARK, layout=gl.SliceLayout(1, TILE))
                    gl.store(mark + m, gl.full([BV // MARK], 0, gl.int32, layout=gl.SliceLayout(1, TILE)) + ep)
            for s in gl.static_range(2 * BT):
                d = gl.sum(h * xs.slice(s, 1, dim=0).load(TILE), axis=1)
                ds.slice(sb * BV, BV, dim=0).slice(s, 1, dim=1).store(gl.expand_dims(d, 1))
        gl.thread_barrier()

        # 3. Epilogue: history, (I + A)^-1, outputs, new records.
        e_hist = gl.exp(Gt)
        dk = ds.permute((1, 0)).slice(0, BT, dim=0).load(EPI) * e_hist
        dq = ds.permute((1, 0)).slice(BT, BT, dim=0).load(EPI) * e_hist
        for j in range(0, n_hist):
            u_j = gl.expand_dims(gl.load(ru + ((bs + j) & (L - 1)) * V + rows_e).to(gl.float32), 0)
            c = cs.index(j)
            dk = dk + c.slice(0, BT, dim=0).load(EPI) * u_j
            dq = dq + c.slice(BT, BT, dim=0).load(EPI) * u_j
        v_raw = gl.load(v + (gl.expand_dims(tok64_e, 1) * HV + i_hv) * V + gl.expand_dims(rows_e, 0))
        eg = eg_s.load(EPI)  # [BT, 1]
        U = be_s.load(EPI) * (gl.where(live_e, v_raw.to(gl.float32), 0.0) - eg * dk)
        tok2 = gl.expand_dims(tok_e, 1)
        for s in gl.static_range(1, BT):
            corr = gl.sum(at_s.slice(s, 1, dim=1).load(EPI) * U, axis=0)  # sum_r A[s, r] u_r
            U = gl.where(tok2 == s, U - gl.expand_dims(corr, 0), U)
        out = eg * dq
        for r in gl.static_range(BT):
            u_r = gl.sum(gl.where(tok2 == r, U, 0.0), axis=0)
            out = out + p_s.slice(r, 1, dim=1).load(EPI) * gl.expand_dims(u_r, 0)
        gl.store(p_o, out.to(o.dtype.element_ty), mask=live_e)
        p_rec = gl.expand_dims((bs + wp + tok_e) & (L - 1), 1) * V + gl.expand_dims(rows_e, 0)
        gl.store(ru + p_rec, U.to(ring_u.dtype.element_ty), mask=live_e)
        gl.store(rv + p_rec, v_raw, mask=live_e)
        if (i_v == 0) & (i_hv == 0):
            gl.store(pending + slot, T)
