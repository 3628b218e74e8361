"""ReplaySSM verify: window outputs from checkpoint + ring history, without materialising any state.

Per request and value head, with checkpoint ``S0``, ``c`` history records ``(k^_j, g_j, u_j)`` and
the window ``(q^_s, k^_s, v_s, g_s, beta_s)`` (docs/design.md, "the math"):

    S_prev x = exp(Gt) S0 x + sum_j exp(Gt - P_j) (k^_j . x) u_j              x in {q^_s, k^_s}
    A[s, r]  = beta_s exp(G_s - G_r) (k^_s . k^_r)   (s > r);  R_s = beta_s (v_s - exp(G_s) S_prev k^_s)
    U        = (I + A)^-1 R;   o_s = exp(G_s) S_prev q^_s + sum_{r<=s} exp(G_s - G_r) (k^_r . q^_s) u_r

Rows whose ring says ``flush`` first fold their history into the checkpoint with the baseline's own
pinned update (inside the same kernel: one read, one write of the tile) and then run with an empty
history. Every row appends its window's records (``k^``, raw ``v``, ``g``, ``beta``, ``u``) at logical
positions ``write_pos .. write_pos + T - 1``; ``ring_commit`` later decides how many of them count.
"""

from __future__ import annotations

import torch
import triton

from . import launch, verify_launch
from ._common import use_triton
from ._gluon import check_interpretable
from ._pinned import gating_reference, l2norm_reference, tile_layout
from ._validate import (
    check_cu_seqlens,
    check_flags,
    check_gdn_inputs,
    check_no_overlap,
    check_out,
    check_scale,
    check_slots,
    check_state,
    named,
    values_checkable,
)
from .fold import fold_slot_reference, folded_this_epoch, history_positions
from .ring import Ring
from .verify_kernel import _gdn_replay_verify_kernel
from .verify_prep import META_FIELDS, _window_prep_kernel, prep_warps
from .verify_window import dots_layout


def check_ring_matches(ring, S, H, HV, K, V, device, dtype) -> None:
    """The ring was allocated for these slots, heads, head dims, device and activation dtype."""
    if not isinstance(ring, Ring):
        raise TypeError(f"ring must be a Ring, got {type(ring).__name__}")
    want = (S, H, ring.L, K)
    if tuple(ring.k.shape) != want or tuple(ring.v.shape) != (S, HV, ring.L, V):
        raise ValueError(
            f"ring was allocated for (S, H, L, K)={tuple(ring.k.shape)}, HV={ring.v.shape[1]}, V={ring.v.shape[3]}; "
            f"the call needs {want}, HV={HV}, V={V}"
        )
    if ring.k.device != device:
        raise ValueError(f"ring must be on {device}, got {ring.k.device}")
    if ring.dtype != dtype:
        raise TypeError(f"ring records are {ring.dtype} but the activations are {dtype}")


def _check(q, k, v, a, b, A_log, dt_bias, checkpoint, ring, slots, cu_seqlens, out, scale, validate):
    N, B, H, HV, K, V = check_gdn_inputs(q, k, v, a, b, A_log, dt_bias, slots, cu_seqlens)
    S = check_state("checkpoint", checkpoint, HV, V, K, q.device)
    check_ring_matches(ring, S, H, HV, K, V, q.device, k.dtype)
    check_out(out, v)
    inputs = named(q=q, k=k, v=v, a=a, b=b, A_log=A_log, dt_bias=dt_bias, slots=slots, cu_seqlens=cu_seqlens)
    check_no_overlap(named(out=out, checkpoint=checkpoint), inputs, spans=ring.written_spans)
    scale = check_scale(scale, K)
    if validate and values_checkable(slots, cu_seqlens):
        check_cu_seqlens(cu_seqlens, N, B, ring.window)
        check_slots("slots", slots, S)
        ring.cursors.check_values()
    return N, B, H, HV, K, V, scale


def gdn_replay_verify_reference(
    q, k, v, a, b, *, A_log, dt_bias, checkpoint, ring, slots, cu_seqlens, scale=None, out=None, validate=True
):
    """``gdn_replay_verify`` with ``impl="reference"``: the PyTorch twin of its kernels, behind the same checks."""
    return gdn_replay_verify(
        q, k, v, a, b, A_log=A_log, dt_bias=dt_bias, checkpoint=checkpoint, ring=ring, slots=slots,
        cu_seqlens=cu_seqlens, scale=scale, out=out, validate=validate, impl="reference",
    )  # fmt: skip


def _verify_reference(q, k, v, a, b, A_log, dt_bias, checkpoint, ring, slots, cu_seqlens, scale, out):
    """The PyTorch twin of the verify's kernels (arguments already checked; ``scale`` a float; fp32 throughout).
    Materialises S_prev, which the kernels never do."""
    N, H, K = q.shape
    HV, V = v.shape[1:]
    group = HV // H
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
            if not folded_this_epoch(ring, slot):
                S_prev = fold_slot_reference(S_prev, ring, slot, hist)
                checkpoint[slot] = S_prev
                ring.folded[slot] = c.epoch[slot]
            hist = []
        if hist:
            k_h = ring.k[slot][:, hist].repeat_interleave(group, dim=0)  # [HV, c, K], already normalised
            P = torch.cumsum(ring.g[slot][:, hist], -1)  # [HV, c]
            w = torch.exp(P[:, -1:] - P)
            u_h = ring.u[slot][:, hist].float() * w[..., None]  # [HV, c, V]
            S_prev = torch.exp(P[:, -1])[:, None, None] * S_prev + u_h.transpose(1, 2) @ k_h
        khat = l2norm_reference(k[toks].float())  # [T, H, K]
        q_w = l2norm_reference(q[toks].float()).transpose(0, 1).repeat_interleave(group, dim=0) * scale  # [HV, T, K]
        k_w = khat.transpose(0, 1).repeat_interleave(group, dim=0)
        v_w = v[toks].float().transpose(0, 1)  # [HV, T, V]
        g_w, b_w = g[toks].t(), beta[toks].t()  # [HV, T]
        G_w = torch.cumsum(g_w, -1)
        R = b_w[..., None] * (v_w - torch.exp(G_w)[..., None] * (k_w @ S_prev.transpose(1, 2)))
        idx = torch.arange(T, device=q.device)
        causal = idx[:, None] >= idx[None, :]
        decay = torch.exp(torch.where(causal, G_w[:, :, None] - G_w[:, None, :], 0.0))
        A = torch.where(idx[:, None] > idx[None, :], b_w[:, :, None] * decay * (k_w @ k_w.transpose(1, 2)), 0.0)
        U = R.clone()  # (I + A) U = R by forward substitution (T <= 8: cheaper than a general triangular solve)
        for s in range(1, T):
            U[:, s] -= (A[:, s, :s, None] * U[:, :s]).sum(1)
        qk = torch.where(causal, decay * (q_w @ k_w.transpose(1, 2)), 0.0)
        o_w = torch.exp(G_w)[..., None] * (q_w @ S_prev.transpose(1, 2)) + qk @ U
        o[toks] = o_w.transpose(0, 1).to(o.dtype)
        pos = [(bs + wp + s) & (L - 1) for s in range(T)]
        ring.k[slot][:, pos] = khat.transpose(0, 1)
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
    out: torch.Tensor | None = None,
    validate: bool = True,
    impl: str = "auto",
) -> torch.Tensor:
    """ReplaySSM speculative verify of one GDN layer over a batch of windows.

    q, k: [N, H, K]; v: [N, HV, V]; a, b: [N, HV] (one activation dtype, the ring's); A_log, dt_bias:
    [HV]. checkpoint: [S, HV, V, K] fp32. ring: this layer's ``Ring`` (its cursors are read, not
    moved). slots: [B] int32, -1 = padding (skipped, outputs zero). cu_seqlens: [B+1] int32, every
    window 1..ring.window tokens. scale (a Python float) defaults to K**-0.5.
    q and k are raw: the op L2-normalises them per head itself (fla's ``use_qk_l2norm_in_kernel=True``), and
    computes the gate ``-exp(A_log) * softplus(a + dt_bias)`` and ``beta = sigmoid(b)`` from the raw a and b.

    Mutates: ``checkpoint[slot]`` of rows whose ring says flush (exact fold of their history, once per
    step: a retry before ``ring_commit`` does not fold again) and their fold markers; the ring records
    at the window's positions; ``ring.cursors.pending`` (the window length). Call ``ring_commit`` once
    all layers have verified. Returns o: [N, HV, V] in v's dtype (written into ``out`` when given).
    Every argument is checked before anything is written; ``validate`` (skipped under graph capture) adds the
    value checks of ``cu_seqlens``, the slot ids and the cursors' ranges.
    """
    check_flags(validate=validate)
    N, B, H, HV, K, V, scale = _check(
        q, k, v, a, b, A_log, dt_bias, checkpoint, ring, slots, cu_seqlens, out, scale, validate
    )
    if not use_triton(impl, q):
        return _verify_reference(q, k, v, a, b, A_log, dt_bias, checkpoint, ring, slots, cu_seqlens, scale, out)
    check_interpretable(v=v, ring_u=ring.u)
    o = torch.empty_like(v) if out is None else out
    if B == 0:
        return o
    BT = triton.next_power_of_2(ring.window)
    c = ring.cursors
    L = ring.L
    dev = q.device
    vl = verify_launch  # the launch-time choices, looked up at call time (scripts/sm90_compile.py patches them)
    staged = not vl.one_launch(BT, L, B * HV, dev)
    ln = launch.resolve("verify", V, B * HV, dev, split_small=True)
    pdl = vl.use_pdl(HV * B * ln.programs_per_head, dev) and not staged  # (before any launch: it checks a switch)
    if staged:
        META = torch.empty(B, META_FIELDS, dtype=torch.int32, device=dev)
        X = torch.empty(B, H, 2 * BT, K, dtype=torch.float32, device=dev)
        GA = torch.empty(B, HV, 2, BT, BT, dtype=torch.float32, device=dev)
        GB = torch.empty(B, HV, 4, BT, dtype=torch.float32, device=dev)
        CW = torch.empty(B, HV, L, 2 * BT, dtype=torch.float32, device=dev)
        GP = triton.next_power_of_2(HV // H)
        pw = prep_warps(B * H, launch.sm_count(dev), BT)
        _window_prep_kernel[(H, B)](
            q, k, a, b, A_log, dt_bias, slots, cu_seqlens, ring.k, ring.g, ring.beta, c.write_pos, c.base, c.flush,
            c.epoch, c.pending, scale, X, META, GA, GB, CW, B, vl.fold_free_tail(HV * ln.programs_per_head, dev, BT), H,
            HV, K, L, BT, GP, *vl.prep_layouts(K, BT, pw), vl.rows_smem(8), vl.rows_smem(min(8, BT)),
            *vl.order_layout(B, pw), vl.gate_layout(GP, BT, pw), num_warps=pw,
        )  # fmt: skip
    else:  # the main kernel reads each row's slot, window and cursors itself, and sets ``pending``
        META = X = GA = GB = CW = slots  # not read
    KC = min(ln.k_chunk, K)
    stages = max(1, min(ln.stages, K // KC))
    # a folding program copies its next state block into the idle chunk buffer while it folds, when it fits
    pre = ln.rows_per_program > ln.rows and ln.rows * K <= stages * ln.rows_per_program * KC
    tc, nx, mma = vl.tensor_cores(ln, BT, KC, stages, dev)
    pack = staged and vl.pack_in_keys(L, K, BT, nx, ln.rows_per_program, v.element_size())
    dif = vl.dots_in_fold(staged, tc, pre, ln.rows, ln.rows_per_program, nx, pack, L)
    W = ln.num_warps
    _gdn_replay_verify_kernel[(HV, B, ln.programs_per_head)](
        q, k, v, a, b, A_log, dt_bias, scale, checkpoint, o, ring.k, ring.v, ring.g, ring.beta, ring.u, ring.folded,
        META, X, GA, GB, CW, slots, cu_seqlens, c.write_pos, c.base, c.flush, c.epoch, c.pending, H, HV, K, V, L,
        BT, ln.rows, ln.rows_per_program, KC, vl.K_STEP, stages, ln.layout,
        *vl.main_layouts(ln, BT, KC), vl.SMEM, vl.chunk_smem(KC), vl.ROWS1, pre, vl.SMEM_PRE, tc, nx, mma, staged,
        tile_layout(W), *dots_layout(BT, 2 * BT, K, W), *dots_layout(L, 2 * BT, K, W),
        vl.window_smem(tc, staged, BT), pdl, pack, dif, num_warps=W, **vl.MAXNREG,
        **({"launch_pdl": True} if pdl else {}),
    )  # fmt: skip
    return o
