"""The verify's launch-time choices and layouts (``gdn_replay_verify``, ops/verify.py).

Staged (``verify_prep`` then the main kernel) or in one main launch (``one_launch``); the window dots on tensor cores
or FMA rows (``tensor_cores``); a programmatic dependent launch (``use_pdl``); the staged order's fold-free tail
(``fold_free_tail``); the layouts and shared-memory swizzles of the prep and main kernels; their register cap. None of
these enter the arithmetic of a committed state (the fold's pinned update is the same in every choice); each choice
is made for speed on an H200, with the measurement behind it in its docstring (the layouts: docs/kernels.md and
bench/NOTES.md), and the environment switches force them for benchmarks and tests.
"""

from __future__ import annotations

import functools

import torch
import triton

from .._env import switch
from . import launch
from ._gluon import INTERPRET, gl
from ._pinned import tile_layout


def prep_layouts(K: int, BT: int, W: int):
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
FOLD_FREE_WAVES_DECODE = 3.0  # the same for plain decode (T=1), whose folding programs replay the most records


def fold_free_tail(programs_per_request: int, device: torch.device, BT: int = 2) -> float:
    """Requests at the end of the staged main kernel's order in which no fold starts: ``FOLD_FREE_WAVES`` waves of
    ``ONE_LAUNCH_PER_SM`` programs per SM, ``FOLD_FREE_WAVES_DECODE`` for plain decode (``BT`` 1)
    (``verify_prep._order_rank`` caps it at half the non-folding requests). Swept on an H200
    (bench/results/2026-12-03g-h200/, runs 3 and 6, random steps, us per layer-step): at T = 2, 4, 8 none of 0.5, 1,
    2.5, 4 waves beat 1.5 (T=4, B=128: 203.5 / 201.7 against 202.1-208.5); at T=1 a folding program replays up to
    L - 1 records, 3-5x a streaming one, and 3 waves gained at L=32 (B=256 308.4 / 308.0 -> 306.5 / 306.5, B=128
    163.7 / 164.8 -> 162.7 / 162.4; 5 and 8 no better) and changed nothing at L=16 (293.4 / 293.6 -> 293.9 / 293.8)."""
    waves = FOLD_FREE_WAVES_DECODE if BT == 1 else FOLD_FREE_WAVES
    return waves * ONE_LAUNCH_PER_SM * launch.sm_count(device) / programs_per_request


def gate_layout(GP: int, BT: int, W: int):
    """Layout of the staging kernel's [GP, BT] gates (a key head's value heads over the window), computed once with
    an element per lane where they fit (the two layouts of its matrices then take them by ``convert_layout``)."""
    lanes_t = min(BT, 32)
    return gl.BlockedLayout([1, 1], [32 // lanes_t, lanes_t], [W, 1], [1, 0])


def order_layout(B: int, W: int):
    """(BP, layout) of the staging kernel's [BP] vector of every request's flush flag (``_order_rank``)."""
    BP = max(32, triton.next_power_of_2(B))
    return BP, gl.BlockedLayout([max(1, BP // (32 * W))], [32], [W], [0])


K_STEP = 4  # K-elements of a row multiplied per step of the main kernel's chunk loop (one 16-byte shared load)


def main_layouts(ln: launch.Launch, BT: int, KC: int):
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
MAXNREG = {} if INTERPRET else {"maxnreg": 128}


def tensor_cores(ln: launch.Launch, BT: int, KC: int, stages: int, device: torch.device):
    """(on, NX, layout) of the window dots on tensor cores: on a GPU with TF32 ``mma.sync`` (compute capability
    >= 8.0), for windows of at least 3 tokens (BT, the window rounded up to a power of two, >= 4: 2BT >= 8 vectors
    fill the 8-wide MMA tile), with at least one
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


MANY_WAVES = 8  # many_waves: from this many waves of main-kernel programs on, a batch counts as many-wave


def many_waves(programs: int, device: torch.device) -> bool:
    """Whether ``programs`` main-kernel programs fill at least ``MANY_WAVES`` waves of ``ONE_LAUNCH_PER_SM`` per SM
    (B >= 66 rows at HV=64 on an H200): where a plain-decode commit spreads its rows' folds over steps
    (``cursors.fold_phase_pays``) and the verify then runs staged (``one_launch``). Never on the CPU."""
    return device.type == "cuda" and programs >= MANY_WAVES * ONE_LAUNCH_PER_SM * launch.sm_count(device)


def one_launch(BT: int, L: int, programs: int, device: torch.device) -> bool:
    """Whether the verify runs in one main launch (each program computes its key head's window terms,
    ``verify_window``) rather than staged (``verify_prep`` first): where the history's dots (``L x 2BT``, computed
    by every value head in one launch) are at most ``ONE_LAUNCH_HISTORY``, the largest measured faster, and the
    window is a single token (plain decode, below ``many_waves``) or, up to 4 tokens (BT <= 4), the batch fits in
    one wave of main-kernel programs (fewer than ``ONE_LAUNCH_PER_SM`` per SM). H200, against the staged verify in
    one run (bench/results/2026-12-02c-h200/, run 4): one launch is faster at T=1 (B=256, L=16: 320.0 vs 324.8 us; L=32:
    340.2 vs 354.6; B=8: 15.3 vs 16.8) and at T=4, B=8, L=16 (26.4 vs 28.6); slower at T=2, B=256 (354.3 vs 349.9;
    L=32: 391.9 vs 370.7), at T=4 from B=128 (run 3: 235.4 vs 230.3; L=32 non-flush 417.7 vs 361.6) and at T=8
    (B=8, L=32: 43.5 vs 40.5). Plain decode over many waves (``many_waves``) runs staged: there the commit's fold
    phase spreads the rows' folds over steps (``cursors.fold_phase_pays``), and the staging kernel's order keeps the
    folding requests out of the last waves (bench/results/2026-12-03g-h200/, run 4, T=1 with the fold phase, one
    launch / staged / one launch / staged: B=256, L=16 302.4 / 293.6 / 302.3 / 294.0 us; L=32 322.8 / 308.0 / 323.2
    / 308.1; B=128, L=16 156.6 / 151.4 / 156.9 / 151.2; before the fold phase, every row folding in the same step,
    staged was the slower, above). ``REPLAYSSM_VERIFY_ONE_LAUNCH=0`` / ``=1`` forces either (benchmarks, tests)."""
    env = switch("REPLAYSSM_VERIFY_ONE_LAUNCH")
    if env:
        return env == "1"
    if BT > 4 or L * 2 * BT > ONE_LAUNCH_HISTORY:
        return False
    if BT == 1:
        return not many_waves(programs, device)
    return programs < ONE_LAUNCH_PER_SM * launch.sm_count(device)


def use_tensor_cores(device: torch.device) -> bool:
    """The verify's window dots run on tensor cores (TF32 x 3) on CUDA devices of compute capability >= 8.0;
    ``REPLAYSSM_VERIFY_TC=0`` keeps them on FMA units (a switch for benchmarks and comparisons). In the CPU
    interpreter the tensor-core path runs as an fp32 ``dot``."""
    if switch("REPLAYSSM_VERIFY_TC") == "0":
        return False
    if device.type != "cuda":
        return True
    return torch.cuda.get_device_capability(device) >= (8, 0)


def dots_in_fold(staged: bool, tc: bool, pre: bool, rows: int, rows_per_program: int, nx: int, pack: bool, L: int):
    """How a folding program of the staged main kernel takes its window products (``REPLAYSSM_VERIFY_DIF``): 0, by
    streaming its folded checkpoint back from L2 as a streaming row does; 1, 2 or 3, from its just-folded blocks
    (``verify_dots._fold_dots``), the window vectors copied once its fold is over (1) or with its history (2: into a
    buffer of their own where ``pack`` would place them in the history keys' rows), and with 3 also the window's
    values and staged matrices copied first of all, into buffers of their own (``verify_dots._copy_window``), so
    that nothing is left to wait for after a fold. Shared memory in sm_90 builds at T=4: 45,056 / 49,152 / 50,368
    bytes at L=16 in modes 1 / 2 / 3 (four programs per SM fit up to 57,344); at L > 16, where ``pack`` fills that
    already (57,344 at L=32), modes 2 and 3 would leave three programs per SM, so they run as mode 1 there.

    Blocks or stream, the outputs are bitwise the same (one product code, ``verify_dots._tc_products``). Unset, the
    switch means 2 at L <= 16 and 0 above: measured A/B (bench/NOTES.md, twenty-seventh and twenty-ninth sessions),
    mode 2 cut the fold per record by 5.6-6.4% on an H100 at T=4, L=16, B=256 and by 0.8-1.7% on an H200 (short of the
    2% its A/B asked for; kept for the H100's gain: nowhere slower, random steps the same within noise), while every
    mode was 15-16% slower at L=32. The modes apply only where the verify is staged, the products are on tensor
    cores, a program folds two blocks and prefetches the second (``PRE``: the many-wave shape) and there are at most
    8 window vectors (``nx``: T <= 4; at T=8 the two blocks' [64, 16] products spill 32-40 bytes under the
    128-register cap, sm_90 builds); elsewhere 0 whatever the switch. Any other value of the switch than 0 to 3 or
    unset raises ``ValueError``."""
    env = switch("REPLAYSSM_VERIFY_DIF")
    if env == "":
        env = "2" if L <= 16 else "0"
    if env == "0" or not (staged and tc and pre and rows_per_program == 2 * rows and nx <= 8):
        return 0
    return 1 if pack and L > 16 else int(env)  # (modes 2 and 3 packed at L=32 would leave three programs per SM)


def use_pdl(programs: int, device: torch.device) -> bool:
    """Whether the one-launch verify's main kernel of ``programs`` programs is a programmatic dependent launch: on
    compute capability >= 9.0, where the programs fit in one wave (fewer than ``ONE_LAUNCH_PER_SM`` per SM). Its
    programs are then scheduled while the kernel before drains and wait for it (``griddepcontrol.wait``, before they
    read anything) instead of the launch waiting; then they let the next kernel launch at once
    (``griddepcontrol.launch_dependents``). Nothing is read early, so the effect is the same whatever kernel comes
    before; a kernel after it sees its writes as long as it either is launched normally (it then waits for this one
    to finish, as always) or, launched as a dependent, waits with ``griddepcontrol.wait`` before it reads, as every
    replayssm kernel launched that way does. H200 (bench/NOTES.md, twelfth session): T=4, B=8 22.1 -> 21.4 us a
    layer-step, T=1 B=8 13.7 -> 13.1; but T=1 B=256 (31 waves) 313 -> 315, hence one wave only.
    ``REPLAYSSM_VERIFY_PDL=0`` / ``=1`` forces it off / on at any batch of the one-launch path (benchmarks); the staged
    path never takes it (``gdn_replay_verify``: a staged main kernel as a dependent of the staging kernel measured
    within 0.7% either way, bench/NOTES.md, eighteenth session); never below compute capability 9.0 nor in the CPU
    interpreter. Any other value raises ``ValueError``."""
    env = switch("REPLAYSSM_VERIFY_PDL")
    if INTERPRET or device.type != "cuda" or env == "0" or torch.cuda.get_device_capability(device) < (9, 0):
        return False
    return env == "1" or programs < ONE_LAUNCH_PER_SM * launch.sm_count(device)


def pack_in_keys(L: int, K: int, BT: int, NX: int, BVP: int, v_bytes: int) -> bool:
    """Whether the staged main kernel keeps its stream's small buffers (the [NX, K] window vectors, the [L, 2BT]
    history dots, the [BT, BVP] window values, the [BT, BT] matrices and the [4, BT] decays, each from a row of K
    fp32) in the rows of its [L, K] history keys, and a folding row's [L] gates and betas in the keys' last row
    (a fold replays at most L - T records): a folding row's keys are dead once its fold is over, before the stream
    fills those buffers, and a streaming row never holds keys (staged, the history's dots come from ``verify_prep``).
    Where they fit (every T <= 4 at K=128 and L = 16 or 32, T=8 at L=32). It saves what they took, 1.5-1.8 KiB a
    program at T=1 and 5.8-6.4 KiB at T=4 (sm_90 builds, scripts/sm90_compile.py), and at T=1, L=32 (57.8 -> 56.0 KiB)
    it lets a fourth program on each SM (228 KiB an SM, 1 KiB reserved a program). The outputs are bitwise the same.
    H200, B=256, base / packed, twice (bench/results/2026-12-04c-h200/, run 1): T=1 L=32 305.9 / 306.5 -> 302.8 /
    303.8 us, T=8 L=32 590.6 / 583.2 -> 578.5 / 574.7, T=1 L=16 292.8 / 293.2 -> 293.5 / 296.4 (run 2, again: 292.3 /
    294.4 -> 292.8 / 295.5), T=2 L=32 and T=4 within 1%."""

    def rows(elements, nbytes=4):  # rows of K fp32 a buffer takes (a power of two)
        return -(-elements * nbytes // (4 * K))

    end = NX  # verify_fold._packed_views' placement, after the window vectors: each at a multiple of its own rows
    for r in (rows(L * 2 * BT), rows(BT * BVP, v_bytes), rows(BT * BT), rows(BT * BT), rows(4 * BT)):
        end = -(-end // r) * r + r
    return end <= L and 2 * L <= K


def chunk_smem(KC: int):
    """[rows, KC] fp32 chunks, 16-byte vectors XOR-swizzled by row: a warp reading one vector of 8 consecutive
    rows touches every bank once."""
    per_phase = max(1, 128 // (4 * KC))
    return gl.SwizzledSharedLayout(4, per_phase, max(1, min(8, KC // 4)), [1, 0])


SMEM = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
ROWS1 = gl.SwizzledSharedLayout(1, 1, 1, [0])  # the same unswizzled bytes, indexable row by row


@functools.cache
def rows_smem(rows: int):
    """[rows, K] fp32 in shared memory read by lanes that hold different rows at the same columns (a row is 512
    bytes, so unswizzled they all hit the same four banks): 16-byte vectors XOR-swizzled by row, ``rows`` rows per
    pattern (conflict-free up to that many). Eight for a state block read on the pinned tile and for the staging
    kernel's history keys; a buffer that is also sliced ``BT`` rows at a time takes ``BT`` (a slice may not split a
    pattern). H200, T=4, B=256: staging 37.1 -> 22.6 us, the step 442.6 -> 416.1 us (bench/NOTES.md, ninth session)."""
    return gl.SwizzledSharedLayout(4, 1, rows, [1, 0])


SMEM_PRE = rows_smem(8)  # a [rows, K] state block: conflict-free pinned-tile reads


def window_smem(tc: bool, staged: bool, BT: int):
    """The main kernel's [NX, K] window vectors: on the tensor-core path (eight rows per B-operand load) swizzled by
    row, eight rows per pattern when staged, ``BT`` in one launch (its Gram slices them ``BT`` rows at a time);
    unswizzled on the FMA rows, which read them as broadcasts."""
    if not tc:
        return SMEM
    return rows_smem(8 if staged else min(8, BT))
