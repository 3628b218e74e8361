"""The recurrent baseline: token-by-token GDN update, optionally snapshotting after every token.

This is what today's engines run for speculative verify (window + a full ``[V, K]`` snapshot per
token, then a copy of the accepted snapshot) and for plain decode (one token, state in place).
One program owns a ``[BV, K]`` tile of one value head of one request and walks its tokens.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import (
    _gating,
    _l2norm,
    _recurrent_update,
    gating_reference,
    l2norm_reference,
    launch_config,
    recurrent_update_reference,
    use_triton,
)
from ._validate import (
    check_cu_seqlens,
    check_gdn_inputs,
    check_out,
    check_slots,
    check_state,
    check_tensor,
    values_checkable,
)


@triton.jit
def _gdn_recurrent_kernel(
    q, k, v, a, b, A_log, dt_bias, state, slots, cu_seqlens, o, snapshots, scale, T_SNAP,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
    WRITE_SNAPSHOTS: tl.constexpr, UPDATE_STATE: tl.constexpr,
):  # fmt: skip
    i_v, i_hv, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_h = i_hv // (HV // H)
    slot = tl.load(slots + i_b)
    bos = tl.load(cu_seqlens + i_b)
    eos = tl.load(cu_seqlens + i_b + 1)
    offs_v = i_v * BV + tl.arange(0, BV)
    offs_k = tl.arange(0, K)
    if slot < 0:
        for t in range(bos, eos):
            t64 = bos.to(tl.int64) + (t - bos)
            tl.store(o + (t64 * HV + i_hv) * V + offs_v, tl.zeros([BV], dtype=tl.float32).to(o.dtype.element_ty))
    else:
        p_h = state + ((slot.to(tl.int64) * HV + i_hv) * V + offs_v[:, None]) * K + offs_k[None, :]
        h = tl.load(p_h)
        A = tl.load(A_log + i_hv).to(tl.float32)
        dtb = tl.load(dt_bias + i_hv).to(tl.float32)
        p_snap = snapshots + ((i_b.to(tl.int64) * T_SNAP * HV + i_hv) * V + offs_v[:, None]) * K + offs_k[None, :]
        t0 = bos.to(tl.int64)
        k_row = k + i_h * K + offs_k
        v_row = v + i_hv * V + offs_v
        k_n = tl.load(k_row + t0 * (H * K))  # the next token is fetched while the current one is applied
        v_n = tl.load(v_row + t0 * (HV * V))
        for t in range(bos, eos):
            t64 = t0 + (t - bos)
            k_t = k_n.to(tl.float32)
            v_t = v_n.to(tl.float32)
            q_t = tl.load(q + (t64 * H + i_h) * K + offs_k).to(tl.float32)
            a_t = tl.load(a + t64 * HV + i_hv).to(tl.float32)
            b_t = tl.load(b + t64 * HV + i_hv).to(tl.float32)
            t_next = tl.minimum(t64 + 1, eos - 1)
            k_n = tl.load(k_row + t_next * (H * K))
            v_n = tl.load(v_row + t_next * (HV * V))
            g_t, beta_t = _gating(a_t, b_t, A, dtb)
            h = _recurrent_update(h, k_t, v_t, g_t, beta_t)
            q_t = _l2norm(q_t) * scale
            o_t = tl.sum(h * q_t[None, :], axis=1)
            tl.store(o + (t64 * HV + i_hv) * V + offs_v, o_t.to(o.dtype.element_ty))
            if WRITE_SNAPSHOTS:
                tl.store(p_snap + (t64 - t0) * (HV * V * K), h)
        if UPDATE_STATE:
            tl.store(p_h, h)


def _check(q, k, v, a, b, A_log, dt_bias, state, slots, cu_seqlens, snapshots, out, validate):
    N, B, H, HV, K, V = check_gdn_inputs(q, k, v, a, b, A_log, dt_bias, slots, cu_seqlens)
    check_out(out, v)
    S = check_state("state", state, HV, V, K, q.device)
    T_snap = None
    if snapshots is not None:
        check_tensor("snapshots", snapshots, ndim=5, dtypes=(torch.float32,), device=q.device)
        if snapshots.shape[0] != B or tuple(snapshots.shape[2:]) != (HV, V, K):
            raise ValueError(f"snapshots must have shape ({B}, T_max, {HV}, {V}, {K}), got {tuple(snapshots.shape)}")
        T_snap = snapshots.shape[1]
    if validate and values_checkable(slots, cu_seqlens):
        check_cu_seqlens(cu_seqlens, N, B, T_snap)
        check_slots("slots", slots, S)
    return N, B, H, HV, K, V


def gdn_recurrent_reference(
    q, k, v, a, b, *, A_log, dt_bias, state, slots, cu_seqlens, scale=None, snapshots=None, update_state=True, out=None
):
    """PyTorch reference of ``gdn_recurrent`` (same signature and effects)."""
    N, H, K = q.shape
    HV, V = v.shape[1:]
    scale = K**-0.5 if scale is None else scale
    g, beta = gating_reference(a, b, A_log, dt_bias)
    o = torch.zeros_like(v) if out is None else out.zero_()
    cu = cu_seqlens.tolist()
    for i, slot in enumerate(slots.tolist()):
        if slot < 0:
            continue
        h = state[slot]
        for j, t in enumerate(range(cu[i], cu[i + 1])):
            k_t = k[t].float().repeat_interleave(HV // H, dim=0)
            h = recurrent_update_reference(h, k_t, v[t].float(), g[t], beta[t])
            q_t = l2norm_reference(q[t].float().repeat_interleave(HV // H, dim=0)) * scale
            o[t] = (h * q_t[:, None, :]).sum(-1).to(o.dtype)
            if snapshots is not None:
                snapshots[i, j] = h
        if update_state:
            state[slot] = h
    return o


def gdn_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    state: torch.Tensor,
    slots: torch.Tensor,
    cu_seqlens: torch.Tensor,
    scale: float | None = None,
    snapshots: torch.Tensor | None = None,
    update_state: bool = True,
    out: torch.Tensor | None = None,
    validate: bool = True,
    impl: str = "auto",
) -> torch.Tensor:
    """Recurrent GDN baseline over a batch of windows (plain decode is a window of one token).

    q, k: [N, H, K]; v: [N, HV, V]; a, b: [N, HV]; all one activation dtype. A_log, dt_bias: [HV].
    state: [S, HV, V, K] fp32, K contiguous. slots: [B] int32 (-1 = padding row, skipped, outputs
    zero). cu_seqlens: [B+1] int32 token offsets of each request's window. scale defaults to K**-0.5.

    Mutates ``state[slots]`` (unless ``update_state=False``) and, when given, ``snapshots``
    [B, T_max, HV, V, K] fp32 (state after each token of row i's window, indexed by row, not slot).
    Returns o: [N, HV, V] in v's dtype (written into ``out`` when given). ``validate`` enables the
    host-side value checks of ``cu_seqlens`` and ``slots`` (skipped during CUDA-graph capture).
    """
    N, B, H, HV, K, V = _check(q, k, v, a, b, A_log, dt_bias, state, slots, cu_seqlens, snapshots, out, validate)
    if not use_triton(impl, q):
        return gdn_recurrent_reference(
            q, k, v, a, b, A_log=A_log, dt_bias=dt_bias, state=state, slots=slots, cu_seqlens=cu_seqlens,
            scale=scale, snapshots=snapshots, update_state=update_state, out=out,
        )  # fmt: skip
    scale = K**-0.5 if scale is None else scale
    o = torch.empty_like(v) if out is None else out
    if B == 0:
        return o
    BV, num_warps = launch_config(K, V)
    snap = snapshots if snapshots is not None else state
    _gdn_recurrent_kernel[(V // BV, HV, B)](
        q, k, v, a, b, A_log, dt_bias, state, slots, cu_seqlens, o, snap, scale,
        snapshots.shape[1] if snapshots is not None else 0,
        H=H, HV=HV, K=K, V=V, BV=BV, WRITE_SNAPSHOTS=snapshots is not None, UPDATE_STATE=update_state,
        num_warps=num_warps,
    )  # fmt: skip
    return o
