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

from contextlib import contextmanager

import torch
import triton

from ._common import gating_reference, l2norm_reference, use_triton
from ._validate import check_cu_seqlens, check_gdn_inputs, check_out, check_slots, check_state, values_checkable
from .fold import fold_flushing_rows, fold_slot_reference, history_positions
from .ring import Ring
from .verify_kernel import _gdn_replay_verify_kernel

DOT_PRECISIONS = ("tf32", "tf32x3", "ieee")


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
        check_cu_seqlens(cu_seqlens, N, B, ring.window)
        check_slots("slots", slots, S)
    return N, B, H, HV, K, V


def gdn_replay_verify_reference(
    q, k, v, a, b, *, A_log, dt_bias, checkpoint, ring, slots, cu_seqlens, scale=None, dot_precision="tf32", out=None
):
    """PyTorch reference of ``gdn_replay_verify`` (same signature and effects; fp32 throughout,
    ``dot_precision`` has no effect on CPU). Materialises S_prev, which the kernel never does."""
    N, H, K = q.shape
    HV, V = v.shape[1:]
    group = HV // H
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
            k_h = l2norm_reference(ring.k[slot][:, hist].float()).repeat_interleave(group, dim=0)  # [HV, c, K]
            P = torch.cumsum(ring.g[slot][:, hist], -1)  # [HV, c]
            w = torch.exp(P[:, -1:] - P)
            u_h = ring.u[slot][:, hist].float() * w[..., None]  # [HV, c, V]
            S_prev = torch.exp(P[:, -1])[:, None, None] * S_prev + u_h.transpose(1, 2) @ k_h
        q_w = l2norm_reference(q[toks].float()).transpose(0, 1).repeat_interleave(group, dim=0) * scale  # [HV, T, K]
        k_w = l2norm_reference(k[toks].float()).transpose(0, 1).repeat_interleave(group, dim=0)
        v_w = v[toks].float().transpose(0, 1)  # [HV, T, V]
        g_w, b_w = g[toks].t(), beta[toks].t()  # [HV, T]
        G_w = torch.cumsum(g_w, -1)
        R = b_w[..., None] * (v_w - torch.exp(G_w)[..., None] * (k_w @ S_prev.transpose(1, 2)))
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        decay = torch.exp(torch.where(causal, G_w[:, :, None] - G_w[:, None, :], 0.0))
        A = torch.where(causal.tril(-1), b_w[:, :, None] * decay * (k_w @ k_w.transpose(1, 2)), 0.0)
        eye = torch.eye(T, dtype=torch.float32, device=q.device)
        U = torch.linalg.solve_triangular(eye + A, R, upper=False, unitriangular=True)  # [HV, T, V]
        qk = torch.where(causal, decay * (q_w @ k_w.transpose(1, 2)), 0.0)
        out = torch.exp(G_w)[..., None] * (q_w @ S_prev.transpose(1, 2)) + qk @ U
        o[toks] = out.transpose(0, 1).to(o.dtype)
        pos = [(bs + wp + s) & (L - 1) for s in range(T)]
        ring.k[slot][:, pos] = k[toks].transpose(0, 1)
        ring.v[slot][:, pos] = v[toks].transpose(0, 1)
        ring.g[slot][:, pos] = g_w
        ring.beta[slot][:, pos] = b_w
        ring.u[slot][:, pos] = U.to(ring.u.dtype)
        c.pending[slot] = T
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
    window 1..ring.window tokens. ``dot_precision``: "tf32" (default), "tf32x3" or "ieee" for
    the tensor-core products (the folded state never goes through them).

    Mutates: ``checkpoint[slot]`` of rows whose ring says flush (exact fold of their history);
    the ring records at the window's positions; ``ring.cursors.pending`` (pending window length).
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
    BV, BK, num_stages, num_warps = verify_config(K, V)
    c = ring.cursors
    # tl.dot needs M, K >= 16 and N >= 4 on the GPU; the CPU interpreter takes the true (cheaper) sizes.
    min_t, min_l = (4, 16) if q.is_cuda else (1, 1)
    fold_flushing_rows(checkpoint, ring, slots)
    _gdn_replay_verify_kernel[(V // BV, HV, B)](
        q, k, v, a, b, A_log, dt_bias, checkpoint, slots, cu_seqlens, o,
        ring.k, ring.v, ring.g, ring.beta, ring.u, c.write_pos, c.base, c.flush, c.pending, scale,
        H=H, HV=HV, K=K, V=V, BV=BV, BK=BK, L=ring.L, BT=max(min_t, triton.next_power_of_2(ring.window)),
        BL=max(min_l, ring.L), DOT_PRECISION=dot_precision, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return o


def verify_config(K: int, V: int) -> tuple[int, int, int, int]:
    """(BV, BK, num_stages, num_warps) of the verify launch: value rows per program, the K chunk streamed
    per loop step, the software-pipelining depth of that loop, and warps per program. (The fold launch
    before it runs on ``launch_config``'s tile and warps, the baseline's.)"""
    if _VERIFY_OVERRIDE:
        BV, BK, stages, warps = _VERIFY_OVERRIDE[-1]
        return min(V, BV), min(K, BK), stages, warps
    return min(V, 128), min(K, 32), 2, 2


_VERIFY_OVERRIDE: list[tuple[int, int, int, int]] = []


@contextmanager
def verify_config_override(BV: int, BK: int, num_stages: int, num_warps: int):
    """Benchmark-only: another tile for the verify launch."""
    _VERIFY_OVERRIDE.append((BV, BK, num_stages, num_warps))
    try:
        yield
    finally:
        _VERIFY_OVERRIDE.pop()
