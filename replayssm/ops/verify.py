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

import functools
import os

import torch
import triton

from . import launch
from ._common import use_triton
from ._gluon import INTERPRET, gl
from ._pinned import gating_reference, l2norm_reference, tile_layout
from ._validate import (
    check_cu_seqlens,
    check_gdn_inputs,
    check_out,
    check_scale,
    check_slots,
    check_state,
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
    check_out(out, v)
    S = check_state("checkpoint", checkpoint, HV, V, K, q.device)
    check_ring_matches(ring, S, H, HV, K, V, q.device, k.dtype)
    scale = check_scale(scale, K)
    if validate and values_checkable(slots, cu_seqlens):
        check_cu_seqlens(cu_seqlens, N, B, ring.window)
        check_slots("slots", slots, S)
    return N, B, H, HV, K, V, scale


def gdn_replay_verify_reference(
    q, k, v, a, b, *, A_log, dt_bias, checkpoint, ring, slots, cu_seqlens, scale=None, out=None
):
    """PyTorch reference of ``gdn_replay_verify`` (same signature and effects; fp32 throughout).
    Materialises S_prev, which the kernel never does."""
    N, H, K = q.shape
    HV, V = v.shape[1:]
    group = HV // H
    scale = K**-0.5 if scale is None else float(scale)
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


def _prep_layouts(K: int, BT: int, W: int):
    """Layouts of the prep kernel (``W`` warps per key head): the [2BT, K] window vectors in the pinned tile (a
    row's norm is then the baseline's arithmetic), the [BT, BT, K] Gram products, the [value heads, BT, BT]
    gate matrices, the [L, 2BT, KCH] history products (a record and a window vector per thread, K in-thread),
    the [value heads, L] history gates, the [value heads, L, 2BT] weighted dots, the [L, K] key copy, META."""
    rows = tile_layout(W)
    kk3 = gl.BlockedLayout([1, 1, 4], [1, 1, 32], [W, 1, 1], [2, 1, 0])
    lanes2 = max(1, 32 // BT)
    g3 = gl.BlockedLayout([1, 1, max(1, BT // lanes2)], [1, 32 // lanes2, lanes2], [W, 1, 1], [2, 1, 0])
    tl1 = min(2 * BT, 32)
    lh = gl.BlockedLayout([1, 1, 8], [32 // tl1, tl1, 1], [W, 1, 1], [2, 1, 0])
    gh = gl.BlockedLayout([1, 1], [1, 32], [W, 1], [1, 0])
    lw = gl.BlockedLayout([1, 1, 1], [1, 32 // tl1, tl1], [1, W, 1], [2, 1, 0])
    cpk = gl.BlockedLayout([1, 4], [1, 32], [W, 1], [1, 0])
    ml = gl.BlockedLayout([1], [32], [W], [0])
    return rows, kk3, g3, lh, gh, lw, cpk, ml


FOLD_FREE_WAVES = 1.5  # the last waves of main-kernel programs in which no folding request starts (_order_rank)


def fold_free_tail(programs_per_request: int, device: torch.device) -> float:
    """Requests at the end of the staged main kernel's order in which no fold starts: ``FOLD_FREE_WAVES`` waves of
    ``ONE_LAUNCH_PER_SM`` programs per SM (``verify_prep._order_rank`` caps it at half the non-folding requests)."""
    return FOLD_FREE_WAVES * ONE_LAUNCH_PER_SM * launch.sm_count(device) / programs_per_request


def _order_layout(B: int, W: int):
    """(BP, layout) of the staging kernel's [BP] vector of every request's flush flag (``_order_rank``)."""
    BP = max(32, triton.next_power_of_2(B))
    return BP, gl.BlockedLayout([max(1, BP // (32 * W))], [32], [W], [0])


K_STEP = 4  # K-elements of a row multiplied per step of the main kernel's chunk loop (one 16-byte shared load)


def _main_layouts(ln: launch.Launch, BT: int, KC: int):
    """Layouts of the main kernel: the [rows, BT, K_STEP] products (a row per thread, the window in-thread; their
    [rows, BT] slice is the window math's layout), the [BT, BT] matrices, and the copy layouts (16-byte vectors
    along the contiguous dim) of the [rows, KC] checkpoint chunks, the [2BT, K] window vectors, the [L, 2BT]
    history dots and the [L, rows] / [BT, rows] 16-bit records and values."""
    W = ln.num_warps
    l3 = gl.BlockedLayout([1, BT, K_STEP], [32, 1, 1], [W, 1, 1], [2, 1, 0])
    m2 = gl.BlockedLayout([1, 1], [4, 8], [W, 1], [1, 0])
    kl = min(32, KC // 4)
    cpt = gl.BlockedLayout([1, 4], [32 // kl, kl], [W, 1], [1, 0])
    cp2 = gl.BlockedLayout([1, 4], [1, 32], [W, 1], [1, 0])
    vec = min(4, 2 * BT)  # a copy vector never runs past a [2BT] row (at T=1 a row is 8 bytes)
    lanes = min(32, 2 * BT // vec)
    cp3 = gl.BlockedLayout([1, vec], [32 // lanes, lanes], [W, 1], [1, 0])
    lv = max(1, min(16, ln.rows_per_program // 8))
    cpv = gl.BlockedLayout([1, 8], [32 // lv, lv], [W, 1], [1, 0])
    cpg = gl.BlockedLayout([1, 1], [32, 1], [W, 1], [1, 0])
    return l3, m2, cpt, cp2, cp3, cpv, cpg


# 128 registers: four 4-warp programs per SM (the compiler's own choice, 139-146, leaves three); no spills at T <= 4
# (one launch at T=4, L=32, which ``one_launch`` leaves staged, spills 40 bytes outside the loops)
_MAXNREG = {} if INTERPRET else {"maxnreg": 128}


def _tensor_cores(ln: launch.Launch, BT: int, KC: int, stages: int, device: torch.device):
    """(on, NX, layout) of the window dots on tensor cores: on a GPU with TF32 ``mma.sync`` (compute capability
    >= 8.0), for windows of at least 4 tokens (2BT >= 8 vectors fill the 8-wide MMA tile), with at least one
    16-row MMA tile per warp and chunks of at least 16 columns; NX = the 2BT window vectors (padded to 8)."""
    W = ln.num_warps
    nx = max(2 * BT, 8)
    # T <= 2 (2BT < 8) would pad the MMA tile with idle columns: measured slower than the FMA rows on an H200
    # (T=2, B=256: 328.8 vs 313.0 us; T=1: 294.6 vs 285.3), faster at T=4 (401.9 vs 416.3) and T=8 (637.9 vs 707.2)
    on = use_tensor_cores(device) and 2 * BT >= 8 and ln.rows_per_program >= 16 * W and KC >= 16
    on = on and stages * KC >= nx  # the dots leave the loop through the chunk buffer
    nx = nx if on else 2 * BT
    return on, nx, gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[W, 1], instr_shape=[16, 8])


ONE_LAUNCH_PER_SM = 4  # main-kernel programs resident per SM (128 registers, 4 warps)


ONE_LAUNCH_HISTORY = 128  # the most history dots (records x window vectors) a one-wave batch takes in one launch


def one_launch(BT: int, L: int, programs: int, device: torch.device) -> bool:
    """Whether the verify runs in one main launch (each program computes its key head's window terms,
    ``verify_window``) rather than staged (``verify_prep`` first): where the history's dots (``L x 2BT``, computed
    by every value head in one launch) are at most ``ONE_LAUNCH_HISTORY``, the largest measured faster, and the
    window is a single token (plain decode) or, up to 4 tokens (BT <= 4), the batch fits in one wave of
    main-kernel programs (fewer than ``ONE_LAUNCH_PER_SM`` per SM). H200, against the staged verify in one run
    (bench/results/2026-12-02c-h200/, run 4): one launch is faster at T=1 (B=256, L=16: 320.0 vs 324.8 us; L=32:
    340.2 vs 354.6; B=8: 15.3 vs 16.8) and at T=4, B=8, L=16 (26.4 vs 28.6); slower at T=2, B=256 (354.3 vs 349.9;
    L=32: 391.9 vs 370.7), at T=4 from B=128 (run 3: 235.4 vs 230.3; L=32 non-flush 417.7 vs 361.6) and at T=8
    (B=8, L=32: 43.5 vs 40.5). ``REPLAYSSM_VERIFY_ONE_LAUNCH=0`` / ``=1`` forces either (benchmarks, tests)."""
    env = os.environ.get("REPLAYSSM_VERIFY_ONE_LAUNCH", "")
    if env not in ("", "0", "1"):
        raise ValueError(f"REPLAYSSM_VERIFY_ONE_LAUNCH must be 0, 1 or unset, got {env!r}")
    if env:
        return env == "1"
    if BT > 4 or L * 2 * BT > ONE_LAUNCH_HISTORY:
        return False
    return BT == 1 or programs < ONE_LAUNCH_PER_SM * launch.sm_count(device)


def use_tensor_cores(device: torch.device) -> bool:
    """The verify's window dots run on tensor cores (TF32 x 3) on CUDA devices of compute capability >= 8.0;
    ``REPLAYSSM_VERIFY_TC=0`` keeps them on FMA units (a switch for benchmarks and comparisons). In the CPU
    interpreter the tensor-core path runs as an fp32 ``dot``."""
    if os.environ.get("REPLAYSSM_VERIFY_TC", "1") == "0":
        return False
    if device.type != "cuda":
        return True
    return torch.cuda.get_device_capability(device) >= (8, 0)


def use_pdl(programs: int, device: torch.device) -> bool:
    """Whether the one-launch verify's main kernel of ``programs`` programs is a programmatic dependent launch: on
    compute capability >= 9.0, where the programs fit in one wave (fewer than ``ONE_LAUNCH_PER_SM`` per SM). Its
    programs are then scheduled while the kernel before drains and wait for it (``griddepcontrol.wait``, before they
    read anything) instead of the launch waiting; then they let the next kernel launch at once
    (``griddepcontrol.launch_dependents``). Nothing is read early, so the effect is the same whatever kernel comes
    before; a kernel after it sees its writes as long as it either is launched normally (it then waits for this one
    to finish, as always) or, launched as a dependent, waits with ``griddepcontrol.wait`` before it reads, as every
    replayssm kernel launched that way does. H200 (bench/NOTES.md, twelfth session): T=4, B=8 22.1 -> 21.4 us a
    layer-step, T=1 B=8 13.7 -> 13.2; but T=1 B=256 (31 waves) 313 -> 315, hence one wave only.
    ``REPLAYSSM_VERIFY_PDL=0`` / ``=1`` forces it off / on at any batch (benchmarks); never below compute capability
    9.0 nor in the CPU interpreter. Any other value raises ``ValueError``."""
    env = os.environ.get("REPLAYSSM_VERIFY_PDL", "")
    if env not in ("", "0", "1"):
        raise ValueError(f"REPLAYSSM_VERIFY_PDL must be 0, 1 or unset, got {env!r}")
    if INTERPRET or device.type != "cuda" or env == "0" or torch.cuda.get_device_capability(device) < (9, 0):
        return False
    return env == "1" or programs < ONE_LAUNCH_PER_SM * launch.sm_count(device)


def _chunk_smem(KC: int):
    """[rows, KC] fp32 chunks, 16-byte vectors XOR-swizzled by row: a warp reading one vector of 8 consecutive
    rows touches every bank once."""
    per_phase = max(1, 128 // (4 * KC))
    return gl.SwizzledSharedLayout(4, per_phase, max(1, min(8, KC // 4)), [1, 0])


_SMEM = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
_ROWS1 = gl.SwizzledSharedLayout(1, 1, 1, [0])  # the same unswizzled bytes, indexable row by row


@functools.cache
def _rows_smem(rows: int):
    """[rows, K] fp32 in shared memory read by lanes that hold different rows at the same columns (a row is 512
    bytes, so unswizzled they all hit the same four banks): 16-byte vectors XOR-swizzled by row, ``rows`` rows per
    pattern (conflict-free up to that many). Eight for a state block read on the pinned tile and for the staging
    kernel's history keys; a buffer that is also sliced ``BT`` rows at a time takes ``BT`` (a slice may not split a
    pattern). H200, T=4, B=256: staging 37.1 -> 22.6 us, the step 442.6 -> 416.1 us (bench/NOTES.md, ninth session)."""
    return gl.SwizzledSharedLayout(4, 1, rows, [1, 0])


_SMEM_PRE = _rows_smem(8)  # a [rows, K] state block: conflict-free pinned-tile reads


def _window_smem(tc: bool, staged: bool, BT: int):
    """The main kernel's [NX, K] window vectors: on the tensor-core path (eight rows per B-operand load) swizzled by
    row, eight rows per pattern when staged, ``BT`` in one launch (its Gram slices them ``BT`` rows at a time);
    unswizzled on the FMA rows, which read them as broadcasts."""
    if not tc:
        return _SMEM
    return _rows_smem(8 if staged else min(8, BT))


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

    Mutates: ``checkpoint[slot]`` of rows whose ring says flush (exact fold of their history, once per
    step: a retry before ``ring_commit`` does not fold again) and their fold markers; the ring records
    at the window's positions; ``ring.cursors.pending`` (the window length). Call ``ring_commit`` once
    all layers have verified. Returns o: [N, HV, V] in v's dtype (written into ``out`` when given).
    Every argument is checked before anything is written.
    """
    N, B, H, HV, K, V, scale = _check(
        q, k, v, a, b, A_log, dt_bias, checkpoint, ring, slots, cu_seqlens, out, scale, validate
    )
    if not use_triton(impl, q):
        return gdn_replay_verify_reference(
            q, k, v, a, b, A_log=A_log, dt_bias=dt_bias, checkpoint=checkpoint, ring=ring, slots=slots,
            cu_seqlens=cu_seqlens, scale=scale, out=out,
        )  # fmt: skip
    o = torch.empty_like(v) if out is None else out
    if B == 0:
        return o
    BT = triton.next_power_of_2(ring.window)
    c = ring.cursors
    L = ring.L
    dev = q.device
    staged = not one_launch(BT, L, B * HV, dev)
    ln = launch.resolve("verify", V, B * HV, dev, split_small=True)
    pdl = use_pdl(HV * B * ln.programs_per_head, dev) and not staged  # (before any launch: it checks a switch)
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
            c.epoch, c.pending, scale, X, META, GA, GB, CW, B, fold_free_tail(HV * ln.programs_per_head, dev), H, HV,
            K, L, BT, GP, *_prep_layouts(K, BT, pw), _rows_smem(8), _rows_smem(min(8, BT)), *_order_layout(B, pw),
            num_warps=pw,
        )  # fmt: skip
    else:  # the main kernel reads each row's slot, window and cursors itself, and sets ``pending``
        META = X = GA = GB = CW = slots  # not read
    KC = min(ln.k_chunk, K)
    stages = max(1, min(ln.stages, K // KC))
    # a folding program copies its next state block into the idle chunk buffer while it folds, when it fits
    pre = ln.rows_per_program > ln.rows and ln.rows * K <= stages * ln.rows_per_program * KC
    tc, nx, mma = _tensor_cores(ln, BT, KC, stages, dev)
    W = ln.num_warps
    _gdn_replay_verify_kernel[(HV, B, ln.programs_per_head)](
        q, k, v, a, b, A_log, dt_bias, scale, checkpoint, o, ring.k, ring.v, ring.g, ring.beta, ring.u, ring.folded,
        META, X, GA, GB, CW, slots, cu_seqlens, c.write_pos, c.base, c.flush, c.epoch, c.pending, H, HV, K, V, L,
        BT, ln.rows, ln.rows_per_program, KC, K_STEP, stages, ln.layout,
        *_main_layouts(ln, BT, KC), _SMEM, _chunk_smem(KC), _ROWS1, pre, _SMEM_PRE, tc, nx, mma, staged,
        tile_layout(W), *dots_layout(BT, 2 * BT, K, W), *dots_layout(L, 2 * BT, K, W),
        _window_smem(tc, staged, BT), pdl, num_warps=W, **_MAXNREG, **({"launch_pdl": True} if pdl else {}),
    )  # fmt: skip
    return o
