"""The recurrent baseline: token-by-token GDN update, optionally snapshotting after every token.

This is what today's engines run for speculative verify (window + a full ``[V, K]`` snapshot per
token, then a copy of the accepted one) and for plain decode (one token, state in place). One
program owns ``rows_per_program`` rows of one value head of one request; it walks them in tiles of
``tile_layout`` (the next tile's load is issued before the current one is updated) and, for each
tile, walks the request's tokens through the pinned ``_update``.
"""

from __future__ import annotations

import torch
import triton.language as tl  # noqa: F401  (the interpreter looks for it in a kernel's globals)

from . import launch
from ._common import use_triton
from ._gluon import gl, jit
from ._pinned import _gating, _l2norm, _update, gating_reference, l2norm_reference, update_reference
from ._validate import (
    check_cu_seqlens,
    check_flags,
    check_gdn_inputs,
    check_no_overlap,
    check_out,
    check_scale,
    check_slots,
    check_state,
    check_tensor,
    named,
    values_checkable,
)


@jit
def _gdn_recurrent_kernel(
    q, k, v, a, b, A_log, dt_bias, state, slots, cu_seqlens, o, snapshots, scale, T_SNAP,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr, BVP: tl.constexpr,
    WRITE_SNAPSHOTS: tl.constexpr, UPDATE_STATE: tl.constexpr, TILE: tl.constexpr,
):  # fmt: skip
    i_v = gl.program_id(0)
    i_hv = gl.program_id(1)
    i_b = gl.program_id(2)
    i_h = i_hv // (HV // H)
    slot = gl.load(slots + i_b)
    bos = gl.load(cu_seqlens + i_b)
    eos = gl.load(cu_seqlens + i_b + 1)
    rows0 = i_v * BVP + gl.arange(0, BV, layout=gl.SliceLayout(1, TILE))
    cols = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, TILE)), 0)  # [1, K]
    if slot < 0:
        for t in range(bos, eos):
            t64 = bos.to(gl.int64) + (t - bos)
            for sb in gl.static_range(BVP // BV):
                zero = gl.zeros([BV], gl.float32, layout=gl.SliceLayout(1, TILE))
                gl.store(o + (t64 * HV + i_hv) * V + rows0 + sb * BV, zero.to(o.dtype.element_ty))
    else:
        A = gl.load(A_log + i_hv).to(gl.float32)
        dtb = gl.load(dt_bias + i_hv).to(gl.float32)
        head = state + (slot.to(gl.int64) * HV + i_hv) * V * K
        snap = snapshots + (i_b.to(gl.int64) * T_SNAP * HV + i_hv) * V * K
        h_next = gl.load(head + gl.expand_dims(rows0, 1) * K + cols)
        for sb in gl.static_range(BVP // BV):
            rows = rows0 + sb * BV
            tile = gl.expand_dims(rows, 1) * K + cols
            h = h_next
            if sb + 1 < BVP // BV:  # issue the next tile's load before this tile's updates
                h_next = gl.load(head + tile + BV * K)
            for t in range(bos, eos):
                t64 = bos.to(gl.int64) + (t - bos)
                khat = _l2norm(gl.load(k + (t64 * H + i_h) * K + cols).to(gl.float32))
                q_t = gl.load(q + (t64 * H + i_h) * K + cols).to(gl.float32)
                v_t = gl.load(v + (t64 * HV + i_hv) * V + rows).to(gl.float32)
                a_t = gl.load(a + t64 * HV + i_hv).to(gl.float32)
                b_t = gl.load(b + t64 * HV + i_hv).to(gl.float32)
                g_t, beta_t = _gating(a_t, b_t, A, dtb)
                h = _update(h, khat, v_t, gl.exp(g_t), beta_t)
                q_scale = scale / gl.sqrt(gl.sum(q_t * q_t, axis=1) + 1e-6)  # [1]: o = h q^ = (h q) |q|^-1 scale
                o_t = gl.sum(h * q_t, axis=1) * q_scale
                gl.store(o + (t64 * HV + i_hv) * V + rows, o_t.to(o.dtype.element_ty))
                if WRITE_SNAPSHOTS:
                    gl.store(snap + (t64 - bos) * (HV * V * K) + tile, h)
            if UPDATE_STATE:
                gl.store(head + tile, h)


def _check(q, k, v, a, b, A_log, dt_bias, state, slots, cu_seqlens, snapshots, out, scale, validate):
    N, B, H, HV, K, V = check_gdn_inputs(q, k, v, a, b, A_log, dt_bias, slots, cu_seqlens)
    check_out(out, v)
    S = check_state("state", state, HV, V, K, q.device)
    scale = check_scale(scale, K)
    T_snap = None
    if snapshots is not None:
        check_tensor("snapshots", snapshots, ndim=5, dtypes=(torch.float32,), device=q.device)
        if snapshots.shape[0] != B or tuple(snapshots.shape[2:]) != (HV, V, K):
            raise ValueError(f"snapshots must have shape ({B}, T_max, {HV}, {V}, {K}), got {tuple(snapshots.shape)}")
        T_snap = snapshots.shape[1]
    check_no_overlap(
        named(out=out, state=state, snapshots=snapshots),
        named(q=q, k=k, v=v, a=a, b=b, A_log=A_log, dt_bias=dt_bias, slots=slots, cu_seqlens=cu_seqlens),
    )
    if validate and values_checkable(slots, cu_seqlens):
        check_cu_seqlens(cu_seqlens, N, B, T_snap)
        check_slots("slots", slots, S)
    return N, B, H, HV, K, V, scale


def gdn_recurrent_reference(
    q, k, v, a, b, *, A_log, dt_bias, state, slots, cu_seqlens, scale=None, snapshots=None, update_state=True, out=None,
    validate=True,
):  # fmt: skip
    """``gdn_recurrent`` with ``impl="reference"``: the PyTorch twin of its kernel, behind the same checks."""
    return gdn_recurrent(
        q, k, v, a, b, A_log=A_log, dt_bias=dt_bias, state=state, slots=slots, cu_seqlens=cu_seqlens, scale=scale,
        snapshots=snapshots, update_state=update_state, out=out, validate=validate, impl="reference",
    )  # fmt: skip


def _recurrent_reference(q, k, v, a, b, A_log, dt_bias, state, slots, cu_seqlens, scale, snapshots, update_state, out):
    """The PyTorch twin of ``_gdn_recurrent_kernel`` (arguments already checked; ``scale`` a float)."""
    N, H, K = q.shape
    HV, V = v.shape[1:]
    g, beta = gating_reference(a, b, A_log, dt_bias)
    o = torch.zeros_like(v) if out is None else out.zero_()
    cu = cu_seqlens.tolist()
    for i, slot in enumerate(slots.tolist()):
        if slot < 0:
            continue
        h = state[slot]
        for j, t in enumerate(range(cu[i], cu[i + 1])):
            khat = l2norm_reference(k[t].float()).repeat_interleave(HV // H, dim=0)
            h = update_reference(h, khat, v[t].float(), g[t], beta[t])
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
    zero). cu_seqlens: [B+1] int32 token offsets of each request's window. scale (a Python float)
    defaults to K**-0.5.
    q and k are raw: the op L2-normalises them per head itself (fla's ``use_qk_l2norm_in_kernel=True``), and
    computes the gate ``-exp(A_log) * softplus(a + dt_bias)`` and ``beta = sigmoid(b)`` from the raw a and b.

    Mutates ``state[slots]`` (unless ``update_state=False``) and, when given, ``snapshots``
    [B, T_max, HV, V, K] fp32 (state after each token of row i's window, indexed by row, not slot).
    Returns o: [N, HV, V] in v's dtype (written into ``out`` when given). ``validate`` enables the
    host-side value checks of ``cu_seqlens`` and ``slots`` (skipped during CUDA-graph capture).
    Every argument is checked before anything is written.
    """
    check_flags(update_state=update_state, validate=validate)
    N, B, H, HV, K, V, scale = _check(
        q, k, v, a, b, A_log, dt_bias, state, slots, cu_seqlens, snapshots, out, scale, validate
    )
    use = use_triton(impl, q)
    if not use:
        return _recurrent_reference(
            q, k, v, a, b, A_log, dt_bias, state, slots, cu_seqlens, scale, snapshots, update_state, out
        )
    o = torch.empty_like(v) if out is None else out
    if B == 0:
        return o
    ln = launch.resolve("recurrent", V, B * HV, q.device)
    snap = snapshots if snapshots is not None else state
    _gdn_recurrent_kernel[(ln.programs_per_head, HV, B)](
        q, k, v, a, b, A_log, dt_bias, state, slots, cu_seqlens, o, snap, scale,
        snapshots.shape[1] if snapshots is not None else 0,
        H, HV, K, V, ln.rows, ln.rows_per_program, snapshots is not None, update_state, ln.layout,
        num_warps=ln.num_warps,
    )  # fmt: skip
    return o
