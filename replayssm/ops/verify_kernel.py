"""The ReplaySSM verify kernel (launched by ``verify.gdn_replay_verify``).

Bytes model, per (request, value head): the checkpoint tile ``[V, K]`` fp32 is read once (64 KiB
at K = V = 128); everything else -- the window's q/k/v/a/b, the history's keys, gates and update
vectors, the window's new records -- is a few KiB. A flushing row also writes the tile once. So a
step costs about ``B * HV * V * K * 4 * (1 + fold rate)`` bytes, and the kernel is built to stream
the checkpoint at full bandwidth:

- few warps per program (``launch_config``'s, one at K = 128): the reductions, the ``(I + A)^-1``
  substitution included, stay inside a warp, and many small programs keep loads in flight;
- the checkpoint is streamed in ``BK``-wide chunks (a loop, not unrolled, so that one chunk at a
  time is live in registers), each multiplied at once by the window's raw
  keys and queries, interleaved as the rows of one ``[2*BT, BK]`` operand of ``tl.dot``; the history
  keys meet the same operand. Row norms are accumulated in the same pass and applied after the
  products (a row scale commutes with the dot), so nothing is read twice;
- rows whose ring says flush have already been folded (``fold.gdn_exact_fold`` launched on the flushing
  rows just before, by ``gdn_replay_verify``): the very kernel whose committed state is bitwise the
  baseline's at every shape. Fusing the fold into this kernel saves one read of a flushing tile, but
  here the compiler is free to lay the tile out differently (this kernel also feeds ``tl.dot``),
  and at small head dims it did: the fused fold drifted by an ulp from the baseline (H200, K=V=16,
  fp16). The separate launch keeps the contract by construction; this kernel then treats a
  flushing row as having an empty history.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._common import _gating


@triton.jit
def _row(x, i, BT: tl.constexpr):
    """Row i of a [BT, BT] matrix as a vector."""
    idx = tl.arange(0, BT)
    return tl.sum(tl.where(idx[:, None] == i, x, 0.0), axis=0)


@triton.jit
def _col(x, i, BT: tl.constexpr):
    """Column i of a [R, BT] matrix as a vector."""
    idx = tl.arange(0, BT)
    return tl.sum(tl.where(idx[None, :] == i, x, 0.0), axis=1)


@triton.jit
def _gdn_replay_verify_kernel(
    q, k, v, a, b, A_log, dt_bias, checkpoint, slots, cu_seqlens, o,
    ring_k, ring_v, ring_g, ring_beta, ring_u, write_pos, base, flush, pending, scale,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr,
    L: tl.constexpr, BT: tl.constexpr, BL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    i_v, i_hv, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_h = i_hv // (HV // H)
    slot = tl.load(slots + i_b)
    bos = tl.load(cu_seqlens + i_b)
    T = tl.load(cu_seqlens + i_b + 1) - bos
    offs_t = tl.arange(0, BT)
    mask_t = offs_t < T
    tok = bos.to(tl.int64) + tl.where(mask_t, offs_t, 0)  # padding lanes re-read token 0, then get zeroed
    offs_v = i_v * BV + tl.arange(0, BV)
    p_o = o + (tok[None, :] * HV + i_hv) * V + offs_v[:, None]  # [BV, BT] (transposed view)
    if slot < 0:
        tl.store(p_o, tl.zeros([BV, BT], dtype=tl.float32).to(o.dtype.element_ty), mask=mask_t[None, :])
    else:
        s64 = slot.to(tl.int64)
        wp = tl.load(write_pos + slot)
        bs = tl.load(base + slot)
        ckpt_head = checkpoint + (s64 * HV + i_hv) * V * K
        rk = ring_k + (s64 * H + i_h) * L * K
        rv = ring_v + (s64 * HV + i_hv) * L * V
        ru = ring_u + (s64 * HV + i_hv) * L * V
        rg = ring_g + (s64 * HV + i_hv) * L
        rb = ring_beta + (s64 * HV + i_hv) * L
        # A flushing row's history was folded into its checkpoint by the fold launch just before.
        n_hist = tl.where(tl.load(flush + slot) != 0, 0, wp)

        # Window gates.
        a_w = tl.load(a + tok * HV + i_hv).to(tl.float32)
        b_w = tl.load(b + tok * HV + i_hv).to(tl.float32)
        g_w, beta_w = _gating(a_w, b_w, tl.load(A_log + i_hv).to(tl.float32), tl.load(dt_bias + i_hv).to(tl.float32))
        g_w = tl.where(mask_t, g_w, 0.0)
        beta_w = tl.where(mask_t, beta_w, 0.0)
        G_w = tl.cumsum(g_w, axis=0)
        eG_w = tl.exp(G_w)

        # History gates: weight of record j in S_prev is exp(G_hist - P_j).
        offs_l = tl.arange(0, BL)
        mask_l = offs_l < n_hist
        pos_l = (bs + offs_l) & (L - 1)
        g_h = tl.where(mask_l, tl.load(rg + pos_l), 0.0)
        G_hist = tl.sum(g_h, axis=0)
        w_h = tl.where(mask_l, tl.exp(G_hist - tl.cumsum(g_h, axis=0)), 0.0)

        # One streaming pass over K: raw products with the interleaved [k_0, q_0, k_1, q_1, ...] operand.
        pos_w = (bs + wp + offs_t) & (L - 1)
        write_k = (i_v == 0) & (i_hv % (HV // H) == 0)
        hx = tl.zeros([BV, 2 * BT], dtype=tl.float32)
        sx = tl.zeros([BL, 2 * BT], dtype=tl.float32)
        kk = tl.zeros([BT, BT], dtype=tl.float32)
        qk = tl.zeros([BT, BT], dtype=tl.float32)
        nk = tl.zeros([BT], dtype=tl.float32)
        nq = tl.zeros([BT], dtype=tl.float32)
        nh = tl.zeros([BL], dtype=tl.float32)
        for c in range(K // BK):
            offs_k = c * BK + tl.arange(0, BK)
            p_qk = (tok[:, None] * H + i_h) * K + offs_k[None, :]
            k_raw = tl.load(k + p_qk)
            if write_k:
                tl.store(rk + pos_w[:, None] * K + offs_k[None, :], k_raw, mask=mask_t[:, None])
            k_c = tl.where(mask_t[:, None], k_raw.to(tl.float32), 0.0)  # [BT, BK]
            q_c = tl.where(mask_t[:, None], tl.load(q + p_qk).to(tl.float32), 0.0)
            x_c = tl.reshape(tl.permute(tl.join(k_c, q_c), (0, 2, 1)), (2 * BT, BK))
            h_c = tl.load(ckpt_head + offs_v[:, None] * K + offs_k[None, :])  # [BV, BK]
            hx += tl.dot(h_c, tl.trans(x_c), input_precision=DOT_PRECISION)
            kh_c = tl.load(rk + pos_l[:, None] * K + offs_k[None, :]).to(tl.float32)
            kh_c = tl.where(mask_l[:, None], kh_c, 0.0)  # [BL, BK]; unwritten records may hold NaN
            sx += tl.dot(kh_c, tl.trans(x_c), input_precision=DOT_PRECISION)
            kk += tl.sum(k_c[:, None, :] * k_c[None, :, :], axis=2)
            qk += tl.sum(q_c[:, None, :] * k_c[None, :, :], axis=2)
            nk += tl.sum(k_c * k_c, axis=1)
            nq += tl.sum(q_c * q_c, axis=1)
            nh += tl.sum(kh_c * kh_c, axis=1)
        rk_n = tl.where(mask_t, 1.0 / tl.sqrt(nk + 1e-6), 0.0)
        rq_n = tl.where(mask_t, scale / tl.sqrt(nq + 1e-6), 0.0)
        rh_n = tl.where(mask_l, w_h / tl.sqrt(nh + 1e-6), 0.0)
        hk, hq = tl.split(tl.reshape(hx, (BV, BT, 2)))  # checkpoint applied to raw k_s, q_s: [BV, BT]
        sk, sq = tl.split(tl.reshape(sx, (BL, BT, 2)))  # raw history-key dots: [BL, BT]
        sk = sk * rh_n[:, None] * rk_n[None, :]
        sq = sq * rh_n[:, None] * rq_n[None, :]

        # S_prev k^_s, S_prev q^_s = exp(G_hist) S0 x + sum_j w_j (k^_j . x) u_j   -> [BV, BT]
        u_h = tl.load(ru + pos_l[None, :] * V + offs_v[:, None]).to(tl.float32)  # [BV, BL]
        u_h = tl.where(mask_l[None, :], u_h, 0.0)
        e_hist = tl.exp(G_hist)
        s_k = e_hist * hk * rk_n[None, :] + tl.dot(u_h, sk, input_precision=DOT_PRECISION)
        s_q = e_hist * hq * rq_n[None, :] + tl.dot(u_h, sq, input_precision=DOT_PRECISION)

        # R^T = beta (v - exp(G) S_prev k^), then U^T = R^T (I + A)^-T by forward substitution over tokens.
        v_raw = tl.load(v + (tok[None, :] * HV + i_hv) * V + offs_v[:, None])  # [BV, BT]
        R = beta_w[None, :] * (tl.where(mask_t[None, :], v_raw.to(tl.float32), 0.0) - eG_w[None, :] * s_k)
        causal = offs_t[:, None] >= offs_t[None, :]
        decay = tl.exp(tl.where(causal, G_w[:, None] - G_w[None, :], 0.0))
        A = tl.where(offs_t[:, None] > offs_t[None, :], beta_w[:, None] * decay * kk, 0.0)
        A = A * rk_n[:, None] * rk_n[None, :]
        U = R
        for s in tl.static_range(1, BT):
            a_s = _row(A, s, BT)  # A[s, r], r < s
            corr = tl.sum(U * a_s[None, :], axis=1)  # sum_r A[s, r] u_r   (u_r final for r < s)
            U = tl.where(offs_t[None, :] == s, U - corr[:, None], U)

        # o_s = exp(G_s) S_prev q^_s + sum_{r<=s} exp(G_s - G_r) (k^_r . q^_s) u_r
        P = tl.where(causal, decay * qk, 0.0) * rq_n[:, None] * rk_n[None, :]  # [s, r]
        out = eG_w[None, :] * s_q
        for r in tl.static_range(BT):
            out += _col(U, r, BT)[:, None] * _col(P, r, BT)[None, :]
        tl.store(p_o, out.to(o.dtype.element_ty), mask=mask_t[None, :])

        # Append the window's records; ring_commit decides how many of them count.
        p_rec = pos_w[None, :] * V + offs_v[:, None]
        tl.store(ru + p_rec, U.to(ring_u.dtype.element_ty), mask=mask_t[None, :])
        tl.store(rv + p_rec, v_raw, mask=mask_t[None, :])
        if i_v == 0:
            tl.store(rg + pos_w, g_w, mask=mask_t)
            tl.store(rb + pos_w, beta_w, mask=mask_t)
            if i_hv == 0:
                tl.store(pending + slot, T)
