"""ReplaySSM verify: window outputs from checkpoint + ring history, without materialising any state.

Per (request, value head, V-block) program, with checkpoint tile ``S0`` [BV, K], ``c`` history
records (k^_j, g_j, u_j) and the window (q^_s, k^_s, v_s, g_s, beta_s), DESIGN §2:

    S_prev x = exp(Gt) S0 x + sum_j exp(Gt - P_j) (k^_j . x) u_j              x in {q^_s, k^_s}
    A[s, r]  = beta_s exp(G_s - G_r) (k^_s . k^_r)   (s > r);  R_s = beta_s (v_s - exp(G_s) S_prev k^_s)
    U        = (I + A)^-1 R;   o_s = exp(G_s) S_prev q^_s + sum_{r<=s} exp(G_s - G_r) (k^_r . q^_s) u_r

Rows whose ring says ``flush`` first fold their history into the checkpoint with the baseline's
own ``_recurrent_update`` (fused: one read, one write of the tile) and then run with an empty
history. Every row appends its window's records (raw k, v; g, beta; u) at logical positions
``write_pos .. write_pos + T - 1``; ``ring_commit`` later decides how many of them count.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import _gating, _recurrent_update, gating_reference, l2norm_reference, launch_config, use_triton
from ._validate import check_cu_seqlens, check_gdn_inputs, check_out, check_slots, check_state, values_checkable
from .fold import fold_slot_reference, history_positions
from .ring import Ring

DOT_PRECISIONS = ("tf32", "tf32x3", "ieee")


@triton.jit
def _rows_l2norm(x):
    # x: [R, K] fp32, each row scaled to unit norm (the same formula as _l2norm)
    return x / tl.sqrt(tl.sum(x * x, axis=1) + 1e-6)[:, None]


@triton.jit
def _unit_lower_inverse(A, BT: tl.constexpr):
    """(I + A)^-1 for strictly lower-triangular A [BT, BT], by forward substitution over rows."""
    rows = tl.arange(0, BT)
    eye = (rows[:, None] == rows[None, :]).to(tl.float32)
    M = eye
    for i in tl.static_range(1, BT):
        a_i = tl.sum(tl.where(rows[:, None] == i, A, 0.0), axis=0)  # row i of A, indexed by column r
        row = tl.sum(a_i[:, None] * M, axis=0)  # sum_r A[i, r] M[r, :]
        M = tl.where(rows[:, None] == i, eye - row[None, :], M)
    return M


@triton.jit
def _gdn_replay_verify_kernel(
    q, k, v, a, b, A_log, dt_bias, checkpoint, slots, cu_seqlens, o,
    ring_k, ring_v, ring_g, ring_beta, ring_u, write_pos, base, flush, window, scale,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
    L: tl.constexpr, BT: tl.constexpr, BL: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    i_v, i_hv, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_h = i_hv // (HV // H)
    slot = tl.load(slots + i_b)
    bos = tl.load(cu_seqlens + i_b)
    T = tl.load(cu_seqlens + i_b + 1) - bos
    offs_t = tl.arange(0, BT)
    mask_t = offs_t < T
    offs_v = i_v * BV + tl.arange(0, BV)
    offs_k = tl.arange(0, K)
    tok = bos.to(tl.int64) + offs_t
    p_o = o + (tok[:, None] * HV + i_hv) * V + offs_v[None, :]
    if slot < 0:
        tl.store(p_o, tl.zeros([BT, BV], dtype=tl.float32).to(o.dtype.element_ty), mask=mask_t[:, None])
    else:
        s64 = slot.to(tl.int64)
        wp = tl.load(write_pos + slot)
        bs = tl.load(base + slot)
        fl = tl.load(flush + slot)
        p_h = checkpoint + s64 * HV * V * K + (i_hv * V + offs_v[:, None]) * K + offs_k[None, :]
        # The window.
        p_qk = (tok[:, None] * H + i_h) * K + offs_k[None, :]
        k_raw = tl.load(k + p_qk, mask=mask_t[:, None], other=0.0)
        k_w = _rows_l2norm(k_raw.to(tl.float32))  # [BT, K]
        q_w = _rows_l2norm(tl.load(q + p_qk, mask=mask_t[:, None], other=0.0).to(tl.float32)) * scale
        p_v = (tok[:, None] * HV + i_hv) * V + offs_v[None, :]
        v_raw = tl.load(v + p_v, mask=mask_t[:, None], other=0.0)
        a_w = tl.load(a + tok * HV + i_hv, mask=mask_t, other=0.0).to(tl.float32)
        b_w = tl.load(b + tok * HV + i_hv, mask=mask_t, other=0.0).to(tl.float32)
        g_w, beta_w = _gating(a_w, b_w, tl.load(A_log + i_hv).to(tl.float32), tl.load(dt_bias + i_hv).to(tl.float32))
        g_w = tl.where(mask_t, g_w, 0.0)
        beta_w = tl.where(mask_t, beta_w, 0.0)
        G_w = tl.cumsum(g_w, axis=0)
        eG_w = tl.exp(G_w)

        h = tl.load(p_h)  # [BV, K]
        rk = ring_k + (s64 * H + i_h) * L * K
        rv = ring_v + (s64 * HV + i_hv) * L * V
        ru = ring_u + (s64 * HV + i_hv) * L * V
        rg = ring_g + (s64 * HV + i_hv) * L
        rb = ring_beta + (s64 * HV + i_hv) * L
        if fl != 0:
            for j in range(0, wp):
                p = (bs + j) & (L - 1)
                k_j = tl.load(rk + p * K + offs_k).to(tl.float32)
                v_j = tl.load(rv + p * V + offs_v).to(tl.float32)
                h = _recurrent_update(h, k_j, v_j, tl.load(rg + p), tl.load(rb + p))
            tl.store(p_h, h)
        n_hist = tl.where(fl != 0, 0, wp)
        # S_prev k^_s and S_prev q^_s, [BV, BT] each: checkpoint part first, so the tile dies early.
        hk = tl.dot(h, tl.trans(k_w), input_precision=DOT_PRECISION)
        hq = tl.dot(h, tl.trans(q_w), input_precision=DOT_PRECISION)

        # History since the last fold: keys, gates and update vectors.
        offs_l = tl.arange(0, BL)
        mask_l = offs_l < n_hist
        pos_l = (bs + offs_l) & (L - 1)
        k_h = _rows_l2norm(
            tl.load(rk + pos_l[:, None] * K + offs_k[None, :], mask=mask_l[:, None], other=0.0).to(tl.float32)
        )
        g_h = tl.load(rg + pos_l, mask=mask_l, other=0.0)
        u_h = tl.load(ru + pos_l[:, None] * V + offs_v[None, :], mask=mask_l[:, None], other=0.0).to(tl.float32)
        G_hist = tl.sum(g_h, axis=0)
        w_h = tl.where(mask_l, tl.exp(G_hist - tl.cumsum(g_h, axis=0)), 0.0)  # [BL]

        e_hist = tl.exp(G_hist)
        d_k = tl.dot(k_h, tl.trans(k_w), input_precision=DOT_PRECISION) * w_h[:, None]  # [BL, BT]
        d_q = tl.dot(k_h, tl.trans(q_w), input_precision=DOT_PRECISION) * w_h[:, None]
        s_k = e_hist * hk + tl.dot(tl.trans(u_h), d_k, input_precision=DOT_PRECISION)
        s_q = e_hist * hq + tl.dot(tl.trans(u_h), d_q, input_precision=DOT_PRECISION)

        # U = (I + A)^-1 R.
        R = beta_w[:, None] * (v_raw.to(tl.float32) - eG_w[:, None] * tl.trans(s_k))  # [BT, BV]
        causal = offs_t[:, None] >= offs_t[None, :]
        decay = tl.exp(tl.where(causal, G_w[:, None] - G_w[None, :], 0.0))
        kk = tl.dot(k_w, tl.trans(k_w), input_precision=DOT_PRECISION)
        A_w = tl.where(offs_t[:, None] > offs_t[None, :], beta_w[:, None] * decay * kk, 0.0)
        U = tl.dot(_unit_lower_inverse(A_w, BT), R, input_precision=DOT_PRECISION)  # [BT, BV]

        qk = tl.where(causal, decay * tl.dot(q_w, tl.trans(k_w), input_precision=DOT_PRECISION), 0.0)
        out = eG_w[:, None] * tl.trans(s_q) + tl.dot(qk, U, input_precision=DOT_PRECISION)
        tl.store(p_o, out.to(o.dtype.element_ty), mask=mask_t[:, None])

        # Append the window's records; only the committed prefix will count.
        pos_w = (bs + wp + offs_t) & (L - 1)
        p_rec = pos_w[:, None] * V + offs_v[None, :]
        tl.store(ru + p_rec, U.to(ring_u.dtype.element_ty), mask=mask_t[:, None])
        tl.store(rv + p_rec, v_raw, mask=mask_t[:, None])
        if i_v == 0:
            tl.store(rg + pos_w, g_w, mask=mask_t)
            tl.store(rb + pos_w, beta_w, mask=mask_t)
            if i_hv % (HV // H) == 0:
                tl.store(rk + pos_w[:, None] * K + offs_k[None, :], k_raw, mask=mask_t[:, None])
            if i_hv == 0:
                tl.store(window + slot, T)


def _check(q, k, v, a, b, A_log, dt_bias, checkpoint, ring, slots, cu_seqlens, dot_precision, out, validate):
    N, B, H, HV, K, V = check_gdn_inputs(q, k, v, a, b, A_log, dt_bias, slots, cu_seqlens)
    check_out(out, v)
    S = check_state("checkpoint", checkpoint, HV, V, K, q.device)
    if not isinstance(ring, Ring):
        raise TypeError(f"ring must be a Ring, got {type(ring).__name__}")
    want = (S, H, ring.L, K)
    if tuple(ring.k.shape) != want or tuple(ring.v.shape) != (S, HV, ring.L, V):
        raise ValueError(
            f"ring was allocated for (S, H, L, K)={tuple(ring.k.shape)}, HV={ring.v.shape[1]}, V={ring.v.shape[3]}; "
            f"the call needs {want}, HV={HV}, V={V}"
        )
    if ring.k.device != q.device:
        raise ValueError(f"ring must be on {q.device}, got {ring.k.device}")
    if ring.k.dtype != k.dtype:
        raise TypeError(f"ring records are {ring.k.dtype} but the activations are {k.dtype}")
    if dot_precision not in DOT_PRECISIONS:
        raise ValueError(f"dot_precision must be one of {DOT_PRECISIONS}, got {dot_precision!r}")
    if validate and values_checkable(slots, cu_seqlens):
        check_cu_seqlens(cu_seqlens, N, B, ring.max_window)
        check_slots("slots", slots, S)
    return N, B, H, HV, K, V


def gdn_replay_verify_reference(
    q, k, v, a, b, *, A_log, dt_bias, checkpoint, ring, slots, cu_seqlens, scale=None, dot_precision="tf32", out=None
):
    """PyTorch reference of ``gdn_replay_verify`` (same signature and effects; fp32 throughout,
    ``dot_precision`` has no effect on CPU). Materialises S_prev, which the kernel never does."""
    N, H, K = q.shape
    HV, V = v.shape[1:]
    G = HV // H
    scale = K**-0.5 if scale is None else scale
    g, beta = gating_reference(a, b, A_log, dt_bias)
    o = torch.zeros_like(v) if out is None else out.zero_()
    c, L = ring.cursors, ring.L
    cu = cu_seqlens.tolist()
    for i, slot in enumerate(slots.tolist()):
        if slot < 0:
            continue
        toks = slice(cu[i], cu[i + 1])
        T = cu[i + 1] - cu[i]
        wp, bs = int(c.write_pos[slot]), int(c.base[slot])
        hist = history_positions(ring, slot)
        S_prev = checkpoint[slot]
        if int(c.flush[slot]):
            S_prev = fold_slot_reference(S_prev, ring, slot, hist)
            checkpoint[slot] = S_prev
            hist = []
        if hist:
            k_h = l2norm_reference(ring.k[slot][:, hist].float()).repeat_interleave(G, dim=0)  # [HV, c, K]
            P = torch.cumsum(ring.g[slot][:, hist], -1)  # [HV, c]
            w = torch.exp(P[:, -1:] - P)
            S_prev = torch.exp(P[:, -1])[:, None, None] * S_prev + torch.einsum(
                "hc,hcv,hck->hvk", w, ring.u[slot][:, hist].float(), k_h
            )
        q_w = l2norm_reference(q[toks].float()).transpose(0, 1).repeat_interleave(G, dim=0) * scale  # [HV, T, K]
        k_w = l2norm_reference(k[toks].float()).transpose(0, 1).repeat_interleave(G, dim=0)
        v_w = v[toks].float().transpose(0, 1)  # [HV, T, V]
        g_w, b_w = g[toks].t(), beta[toks].t()  # [HV, T]
        G_w = torch.cumsum(g_w, -1)
        R = b_w[..., None] * (v_w - torch.exp(G_w)[..., None] * torch.einsum("hvk,htk->htv", S_prev, k_w))
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        decay = torch.exp(torch.where(causal, G_w[:, :, None] - G_w[:, None, :], 0.0))
        A = torch.where(causal.tril(-1), b_w[:, :, None] * decay * (k_w @ k_w.transpose(1, 2)), 0.0)
        eye = torch.eye(T, dtype=torch.float32, device=q.device)
        U = torch.linalg.solve_triangular(eye + A, R, upper=False, unitriangular=True)  # [HV, T, V]
        qk = torch.where(causal, decay * (q_w @ k_w.transpose(1, 2)), 0.0)
        out = torch.exp(G_w)[..., None] * torch.einsum("hvk,htk->htv", S_prev, q_w) + qk @ U
        o[toks] = out.transpose(0, 1).to(o.dtype)
        pos = [(bs + wp + s) & (L - 1) for s in range(T)]
        ring.k[slot][:, pos] = k[toks].transpose(0, 1)
        ring.v[slot][:, pos] = v[toks].transpose(0, 1)
        ring.g[slot][:, pos] = g_w
        ring.beta[slot][:, pos] = b_w
        ring.u[slot][:, pos] = U.to(ring.u.dtype)
        c.window[slot] = T
    return o


def gdn_replay_verify(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    checkpoint: torch.Tensor,
    ring: Ring,
    slots: torch.Tensor,
    cu_seqlens: torch.Tensor,
    scale: float | None = None,
    dot_precision: str = "tf32",
    out: torch.Tensor | None = None,
    validate: bool = True,
    impl: str = "auto",
) -> torch.Tensor:
    """ReplaySSM speculative verify of one GDN layer over a batch of windows.

    q, k: [N, H, K]; v: [N, HV, V]; a, b: [N, HV] (one activation dtype, the ring's); A_log, dt_bias:
    [HV]. checkpoint: [S, HV, V, K] fp32. ring: this layer's ``Ring`` (its cursors are read, not
    moved). slots: [B] int32, -1 = padding (skipped, outputs zero). cu_seqlens: [B+1] int32, every
    window 1..ring.max_window tokens. ``dot_precision``: "tf32" (default), "tf32x3" or "ieee" for
    the tensor-core products (the folded state never goes through them).

    Mutates: ``checkpoint[slot]`` of rows whose ring says flush (exact fold of their history);
    the ring records at the window's positions; ``ring.cursors.window`` (pending window length).
    Call ``ring_commit`` once all layers have verified. Returns o: [N, HV, V] in v's dtype (written
    into ``out`` when given).
    """
    N, B, H, HV, K, V = _check(
        q, k, v, a, b, A_log, dt_bias, checkpoint, ring, slots, cu_seqlens, dot_precision, out, validate
    )
    if not use_triton(impl, q):
        return gdn_replay_verify_reference(
            q, k, v, a, b, A_log=A_log, dt_bias=dt_bias, checkpoint=checkpoint, ring=ring, slots=slots,
            cu_seqlens=cu_seqlens, scale=scale, dot_precision=dot_precision, out=out,
        )  # fmt: skip
    scale = K**-0.5 if scale is None else scale
    o = torch.empty_like(v) if out is None else out
    if B == 0:
        return o
    BV, num_warps = launch_config(K, V)
    c = ring.cursors
    # tl.dot needs every dim >= 16 on the GPU; the CPU interpreter takes the true (cheaper) sizes.
    min_dim = 16 if q.is_cuda else 1
    _gdn_replay_verify_kernel[(V // BV, HV, B)](
        q, k, v, a, b, A_log, dt_bias, checkpoint, slots, cu_seqlens, o,
        ring.k, ring.v, ring.g, ring.beta, ring.u, c.write_pos, c.base, c.flush, c.window, scale,
        H=H, HV=HV, K=K, V=V, BV=BV, L=ring.L, BT=max(min_dim, triton.next_power_of_2(ring.max_window)),
        BL=max(min_dim, ring.L), DOT_PRECISION=dot_precision, num_warps=num_warps,
    )  # fmt: skip
    return o
