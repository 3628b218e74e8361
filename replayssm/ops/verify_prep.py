"""First launch of ``gdn_replay_verify``: everything of a window that does not need the checkpoint.

One program per (request, key head), one warp. What it stages lets the main kernel (``verify_kernel``)
start streaming its checkpoint after a single round trip to memory, with no dependent loads after it:

- ``META [B, 8]`` int32 (key head 0): slot, bos, T, write_pos, base, flush, epoch of the row;
- ``X [B, H, 2BT, K]``: the window's keys and queries normalised with the pinned ``_l2norm`` (bitwise the
  keys the baseline normalises; the keys are also appended to the ring), ``k^_0..k^_{BT-1}`` then
  ``q^_s * scale``; rows past the window are zero;
- per value head of the key head's group, ``GA [B, HV, 2, BT, BT]``: ``A[s, r] = beta_s e^(G_s - G_r)
  k^_s.k^_r`` (s > r) and ``P^T[r, s] = e^(G_s - G_r) q^_s.k^_r`` (r <= s); ``GB [B, HV, 4, BT]``:
  ``e^G_s``, ``beta_s``, ``e^Gt`` (the history's total decay, repeated), unused; the window's ``g`` and
  ``beta`` appended to the ring;
- ``CW [B, HV, L, 2BT]`` for a row that does not fold this step: the history dots weighted by the decay
  since each record, ``e^(Gt - P_j) k^_j.x`` for every committed record j and window vector x;
- ``pending[slot] = T``.
"""

from __future__ import annotations

import triton.language as tl  # noqa: F401  (the interpreter looks for it in a kernel's globals)

from ._gluon import gl, jit
from ._pinned import _gating, _l2norm

META_FIELDS = 8  # slot, bos, T, write_pos, base, flush, epoch, (unused)
META_ROW = tl.constexpr(META_FIELDS)  # the same, readable inside kernels


@jit
def _window_gates(a, b, tok, live, i_hv, HV: tl.constexpr, A, dtb):
    """(g, beta) of the window tokens ``tok`` (fp32, 0 where not ``live``)."""
    a_w = gl.load(a + tok * HV + i_hv).to(gl.float32)
    b_w = gl.load(b + tok * HV + i_hv).to(gl.float32)
    g, beta = _gating(a_w, b_w, A, dtb)
    return gl.where(live, g, 0.0), gl.where(live, beta, 0.0)


@jit
def _meta_row(mi, slot, bos, T, wp, bs, fl, ep):
    """The ``META`` row (``mi`` = arange(META_FIELDS)): slot, bos, T, write_pos, base, flush, epoch, 0."""
    row = gl.where(mi == 0, slot, gl.where(mi == 1, bos, gl.where(mi == 2, T, 0)))
    return gl.where(mi == 3, wp, gl.where(mi == 4, bs, gl.where(mi == 5, fl, gl.where(mi == 6, ep, row))))


@jit
def _window_prep_kernel(
    q, k, a, b, A_log, dt_bias, slots, cu_seqlens, ring_k, ring_g, ring_beta, write_pos, base, flush, epoch,
    pending, scale, X, META, GA, GB, CW,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, L: tl.constexpr, BT: tl.constexpr, GP: tl.constexpr,
    ROW: tl.constexpr, XL: tl.constexpr, L3: tl.constexpr, G2: tl.constexpr, PL: tl.constexpr, LC: tl.constexpr,
    LP: tl.constexpr, ML: tl.constexpr, SMEM: tl.constexpr,
):  # fmt: skip
    i_h = gl.program_id(0)
    i_b = gl.program_id(1)
    GROUP: tl.constexpr = HV // H
    slot = gl.load(slots + i_b)
    bos = gl.load(cu_seqlens + i_b)
    T = gl.load(cu_seqlens + i_b + 1) - bos
    xs = gl.allocate_shared_memory(gl.float32, [2 * BT, K], SMEM)
    mi = gl.arange(0, META_ROW, layout=ML)
    if slot < 0:
        if i_h == 0:
            gl.store(META + i_b * META_ROW + mi, _meta_row(mi, slot, bos, T, 0, 0, 0, 0))
    else:
        wp = gl.load(write_pos + slot)
        bs = gl.load(base + slot)
        fl = gl.load(flush + slot)
        n_hist = gl.where(fl != 0, 0, wp)  # a folding row has no history left
        s64 = slot.to(gl.int64)
        b64 = i_b.to(gl.int64)
        if i_h == 0:
            ep = gl.load(epoch + slot)
            gl.store(META + i_b * META_ROW + mi, _meta_row(mi, slot, bos, T, wp, bs, fl, ep))
            gl.store(pending + slot, T)
        rk = ring_k + (s64 * H + i_h) * L * K
        head = b64 * H + i_h
        xb = X + head * (2 * BT * K)
        cols = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, ROW)), 0)  # [1, K]
        for s in gl.static_range(BT):
            live = s < T
            t64 = bos.to(gl.int64) + gl.minimum(s, T - 1)
            khat = _l2norm(gl.where(live, gl.load(k + (t64 * H + i_h) * K + cols).to(gl.float32), 0.0))
            qhat = _l2norm(gl.where(live, gl.load(q + (t64 * H + i_h) * K + cols).to(gl.float32), 0.0)) * scale
            xs.slice(s, 1, dim=0).store(khat)
            xs.slice(BT + s, 1, dim=0).store(qhat)
            gl.store(xb + s * K + cols, khat)
            gl.store(xb + (BT + s) * K + cols, qhat)
            if live:
                gl.store(rk + ((bs + wp + s) & (L - 1)) * K + cols, khat)
        gl.thread_barrier()

        # Gram matrices of the window (dim 0 = s, dim 1 = r), then each value head's gates and matrices.
        M2: gl.constexpr = gl.SliceLayout(2, L3)
        i0 = gl.arange(0, BT, layout=gl.SliceLayout(1, M2))
        i1 = gl.arange(0, BT, layout=gl.SliceLayout(0, M2))
        xk0 = xs.slice(0, BT, dim=0).load(gl.SliceLayout(1, L3))
        xk1 = xs.slice(0, BT, dim=0).load(gl.SliceLayout(0, L3))
        xq0 = xs.slice(BT, BT, dim=0).load(gl.SliceLayout(1, L3))
        kk = gl.sum(gl.expand_dims(xk0, 1) * gl.expand_dims(xk1, 0), axis=2)
        qk = gl.sum(gl.expand_dims(xq0, 1) * gl.expand_dims(xk1, 0), axis=2)
        low = gl.expand_dims(i1, 0) <= gl.expand_dims(i0, 1)  # r <= s
        up = gl.expand_dims(i0, 1) <= gl.expand_dims(i1, 0)
        strict = gl.expand_dims(i1, 0) < gl.expand_dims(i0, 1)
        tok0 = bos.to(gl.int64) + gl.minimum(i0, T - 1)
        tok1 = bos.to(gl.int64) + gl.minimum(i1, T - 1)
        for gv in gl.static_range(GROUP):
            i_hv = i_h * GROUP + gv
            A = gl.load(A_log + i_hv).to(gl.float32)
            dtb = gl.load(dt_bias + i_hv).to(gl.float32)
            g0, be0 = _window_gates(a, b, tok0, i0 < T, i_hv, HV, A, dtb)
            g1, be1 = _window_gates(a, b, tok1, i1 < T, i_hv, HV, A, dtb)
            G0 = gl.sum(gl.where(low, gl.expand_dims(g1, 0), 0.0), axis=1)  # cumulative gate at s (dim 0)
            G1 = gl.sum(gl.where(up, gl.expand_dims(g0, 1), 0.0), axis=0)  # cumulative gate at r (dim 1)
            decay = gl.exp(gl.where(low, gl.expand_dims(G0, 1) - gl.expand_dims(G1, 0), 0.0))
            ga = GA + (b64 * HV + i_hv) * (2 * BT * BT)
            A_sr = gl.where(strict, gl.expand_dims(be0, 1) * decay * kk, 0.0)
            gl.store(ga + gl.expand_dims(i0, 1) * BT + gl.expand_dims(i1, 0), A_sr)
            gl.store(ga + BT * BT + gl.expand_dims(i1, 0) * BT + gl.expand_dims(i0, 1), gl.where(low, decay * qk, 0.0))
            gb = GB + (b64 * HV + i_hv) * (4 * BT)
            gl.store(gb + i1, gl.exp(G1))
            gl.store(gb + BT + i1, be1)
            p_w = (bs + wp + i1) & (L - 1)
            gl.store(ring_g + (s64 * HV + i_hv) * L + p_w, g1, mask=i1 < T)
            gl.store(ring_beta + (s64 * HV + i_hv) * L + p_w, be1, mask=i1 < T)

        # The history (a row that does not fold): e^Gt per value head, and the weighted dots of every record.
        if L <= 32:
            _history_all(xs, rk, ring_g, CW, GB, s64, b64, i_h, bs, n_hist, HV, GROUP, K, L, BT, LC, LP)
        else:
            _history_loop(xs, rk, ring_g, CW, GB, s64, b64, i_h, bs, n_hist, HV, GROUP, GP, K, L, BT, XL, G2, PL)


@jit
def _history_all(xs, rk, ring_g, CW, GB, s64, b64, i_h, bs, n_hist, HV: tl.constexpr, GROUP: tl.constexpr,
                 K: tl.constexpr, L: tl.constexpr, BT: tl.constexpr, LC: tl.constexpr, LP: tl.constexpr):  # fmt: skip
    """All records at once (L <= 32): ``C[j, x] = k^_j . x`` with a record per lane and the window vectors and a
    K-chunk in-thread (no cross-lane reduction), then per value head ``P_j`` as a masked in-thread sum."""
    KCH: tl.constexpr = LC.size_per_thread[2]
    SL: tl.constexpr = gl.SliceLayout(1, LC)  # [L, KCH] keys
    OL: tl.constexpr = gl.SliceLayout(2, LC)  # [L, 2BT] dots
    j_c = gl.arange(0, L, layout=gl.SliceLayout(1, SL))
    k_c = gl.arange(0, KCH, layout=gl.SliceLayout(0, SL))
    rows = gl.expand_dims(rk + ((bs + j_c) & (L - 1)) * K, 1) + gl.expand_dims(k_c, 0)
    live = gl.expand_dims(j_c < n_hist, 1) & gl.expand_dims(k_c < KCH, 0)
    acc = gl.zeros([L, 2 * BT], gl.float32, layout=OL)
    for kc in gl.static_range(0, K, KCH):
        keys = gl.load(rows + kc, mask=live, other=0.0)
        xc = xs.slice(kc, KCH, dim=1).load(gl.SliceLayout(0, LC))  # [2BT, KCH]
        acc += gl.sum(gl.expand_dims(keys, 1) * gl.expand_dims(xc, 0), axis=2)
    j_o = gl.arange(0, L, layout=gl.SliceLayout(1, OL))
    x_o = gl.arange(0, 2 * BT, layout=gl.SliceLayout(0, OL))
    t_o = gl.arange(0, BT, layout=gl.SliceLayout(0, OL))
    live_o = gl.expand_dims(j_o < n_hist, 1) & gl.expand_dims(x_o < 2 * BT, 0)
    jp = gl.arange(0, L, layout=gl.SliceLayout(1, LP))
    ip = gl.arange(0, L, layout=gl.SliceLayout(0, LP))
    for gv in gl.static_range(GROUP):
        hv = i_h * GROUP + gv
        g_i = gl.load(ring_g + (s64 * HV + hv) * L + ((bs + ip) & (L - 1)), mask=ip < n_hist, other=0.0)
        P = gl.sum(gl.where(gl.expand_dims(ip, 0) <= gl.expand_dims(jp, 1), gl.expand_dims(g_i, 0), 0.0), axis=1)
        Gt = gl.sum(g_i, axis=0)
        w = gl.convert_layout(gl.exp(Gt - P), gl.SliceLayout(1, OL))
        vh = b64 * HV + hv
        p_cw = CW + vh * (L * 2 * BT) + gl.expand_dims(j_o, 1) * (2 * BT) + gl.expand_dims(x_o, 0)
        gl.store(p_cw, gl.expand_dims(w, 1) * acc, mask=live_o)
        gl.store(
            GB + vh * (4 * BT) + 2 * BT + t_o, gl.zeros([BT], gl.float32, layout=gl.SliceLayout(0, OL)) + gl.exp(Gt)
        )


@jit
def _history_loop(xs, rk, ring_g, CW, GB, s64, b64, i_h, bs, n_hist, HV: tl.constexpr, GROUP: tl.constexpr,
                  GP: tl.constexpr, K: tl.constexpr, L: tl.constexpr, BT: tl.constexpr, XL: tl.constexpr,
                  G2: tl.constexpr, PL: tl.constexpr):  # fmt: skip
    """Record by record (long rings): the dots reduced across lanes, decays in-thread over the value heads."""
    gv_i = gl.arange(0, GP, layout=gl.SliceLayout(1, G2))
    hv_i = i_h * GROUP + gv_i
    live_h = gv_i < GROUP
    jl = gl.arange(0, L, layout=gl.SliceLayout(0, G2))
    g_hist = gl.load(
        gl.expand_dims(ring_g + (s64 * HV + hv_i) * L, 1) + gl.expand_dims((bs + jl) & (L - 1), 0),
        mask=gl.expand_dims(live_h, 1) & gl.expand_dims(jl < n_hist, 0),
        other=0.0,
    )
    Gt = gl.sum(g_hist, axis=1)  # [GP]
    t2 = gl.arange(0, BT, layout=gl.SliceLayout(0, G2))
    gb_rows = GB + (b64 * HV + hv_i) * (4 * BT) + 2 * BT
    eh = gl.expand_dims(gl.exp(Gt), 1) + gl.zeros([GP, BT], gl.float32, layout=G2)
    gl.store(gl.expand_dims(gb_rows, 1) + gl.expand_dims(t2, 0), eh, mask=gl.expand_dims(live_h, 1))
    xw = xs.load(XL)  # [2BT, K]
    xcols = gl.arange(0, K, layout=gl.SliceLayout(0, XL))
    xi = gl.arange(0, 2 * BT, layout=gl.SliceLayout(1, XL))
    gp = gl.arange(0, GP, layout=PL)
    rg_p = ring_g + (s64 * HV + i_h * GROUP + gp) * L
    Gt_p = gl.convert_layout(Gt, PL)
    cw0 = CW + (b64 * HV + i_h * GROUP) * (L * 2 * BT) + xi  # value head 0 of the group, record 0
    P = gl.zeros([GP], gl.float32, layout=PL)
    for j in range(0, n_hist):
        P = _history_record(j, n_hist, P, Gt_p, rk, rg_p, bs, cw0, xw, xcols, xi, gp, GROUP, K, L, BT)


@jit
def _history_record(j, n_hist, P, Gt, rk, rg, bs, cw0, xw, xcols, xi, gp, GROUP: tl.constexpr, K: tl.constexpr,
                    L: tl.constexpr, BT: tl.constexpr):  # fmt: skip
    """Record j of the history (nothing when ``j >= n_hist``): its weighted dots ``e^(Gt - P_j) k^_j.x`` into
    CW for each value head of the group; returns P_j, the cumulative log-decays through record j."""
    live = j < n_hist
    pj = (bs + j) & (L - 1)
    kj = gl.load(rk + pj * K + xcols, mask=(xcols < K) & live, other=0.0)
    c = gl.sum(xw * gl.expand_dims(kj, 0), axis=1)  # [2BT]
    P = P + gl.load(rg + pj, mask=(gp < GROUP) & live, other=0.0)
    w = gl.exp(Gt - P)
    for gv in gl.static_range(GROUP):
        w_gv = gl.sum(gl.where(gp == gv, w, 0.0), axis=0)
        gl.store(cw0 + gv * (L * 2 * BT) + j * (2 * BT), w_gv * c, mask=(xi < 2 * BT) & live)
    return P
