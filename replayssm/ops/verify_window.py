"""The one-launch verify's window terms: the verify of a small batch or a short window in one main launch.

``gdn_replay_verify`` runs its main kernel (``verify_kernel``) in one of two ways (``one_launch`` in
``ops/verify_launch.py`` chooses):

- staged: ``verify_prep`` computes a window's terms once per key head, in a launch of its own, and the main
  kernel reads them;
- one launch: each program of the main kernel reads its request's slot, window bounds and cursors itself (the
  first program of a request sets ``pending[slot] = T``; there is no ``META`` launch: a layer-step at T=4, B=8
  saved its 1.3 us and a kernel boundary, bench/NOTES.md, twelfth session) and computes its key head's window
  terms (``_window_terms``) while its first checkpoint chunks are in flight:

  - ``_window_load``, ``_window_normalise``: the window's keys and queries, ``[2BT, K]`` fp32 in the pinned tile,
    normalised with ``_l2norm`` (bitwise the keys the baseline normalises; the keys are also appended to the
    ring), ``k^_0..k^_{BT-1}`` then ``q^_s * scale``; rows past the window are zero;
  - ``_window_gates``, ``_window_cumgates``: the value head's ``g`` and ``beta`` (the baseline's ``_gating``) and
    the cumulative gates;
  - ``_window_matrices``: ``A``, ``P^T`` and the decays into shared memory, from ``D = k^ x^T`` (``_smem_dots``);
  - ``_history_weights``, ``_history_dots``: the history's dots weighted by the decay since each record.

Why both: one launch saves the staging launch and its round trips, which is most of a small batch's or a short
window's step, but each value head's program recomputes its key head's terms on the stream's critical path,
which costs more than the staging launch at T >= 2 with many programs (H200, bench/NOTES.md, eighth session).
The products use ``dots_layout`` (lanes along K: conflict-free shared-memory reads); the replicated pair layout
the staging kernel can afford made the one launch 2-3x slower.
"""

from __future__ import annotations

import functools

import triton.language as tl

from ._gluon import async_copy, gl, jit
from ._pinned import _gating, _l2norm


@jit
def _window_load(q, k, bos, T, i_h, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, ROWS: tl.constexpr):
    """(x, xr, xc): the [2BT, K] raw window vectors of key head ``i_h`` (keys, then queries; 0 past the window) in
    ``ROWS`` (the pinned tile), fp32, and their row and column indices."""
    xr = gl.expand_dims(gl.arange(0, 2 * BT, layout=gl.SliceLayout(1, ROWS)), 1)  # [2BT, 1]: k rows, q rows
    xc = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, ROWS)), 0)  # [1, K]
    t_x = xr & (BT - 1)
    off = ((bos.to(gl.int64) + gl.minimum(t_x, T - 1)) * H + i_h) * K + xc
    live_x = (t_x < T) & (xc < K)
    x = gl.load(k + off, mask=live_x & (xr < BT), other=0.0).to(gl.float32)
    x += gl.load(q + off, mask=live_x & (xr >= BT), other=0.0).to(gl.float32)
    return x, xr, xc


@jit
def _window_normalise(x, xr, scale, BT: tl.constexpr):
    """k^ and q^ * scale of ``_window_load``'s vectors: the pinned ``_l2norm``, bitwise the baseline's keys."""
    xn = _l2norm(x)
    return gl.where(xr >= BT, xn * scale, xn)


@jit
def _window_gates(a, b, A_log, dt_bias, bos, T, i_hv, HV: tl.constexpr, BT: tl.constexpr, N: tl.constexpr,
                  LAY: tl.constexpr):  # fmt: skip
    """(g, beta) [N] in ``LAY`` of value head ``i_hv``, entry n for window token ``n % BT`` (0 past the window)."""
    t = gl.arange(0, N, layout=LAY) & (BT - 1)
    live = t < T
    off = (bos.to(gl.int64) + gl.minimum(t, T - 1)) * HV + i_hv
    a_w = gl.load(a + off, mask=live, other=0.0).to(gl.float32)
    b_w = gl.load(b + off, mask=live, other=0.0).to(gl.float32)
    g, beta = _gating(a_w, b_w, gl.load(A_log + i_hv).to(gl.float32), gl.load(dt_bias + i_hv).to(gl.float32))
    return gl.where(live, g, 0.0), gl.where(live, beta, 0.0)


@functools.cache
def dots_layout(M: int, N: int, K: int, W: int, max_out: int = 8):
    """(layout, CW) of ``_smem_dots`` for an [M, N] product over K with ``W`` warps: a [M, N, CW] BlockedLayout
    whose lanes run along K first, four K-elements per thread (one 16-byte shared load), so that eight lanes read
    128 contiguous bytes of one row (a conflict-free shared-memory wavefront) and a row is read by as few threads
    as the register budget allows; the rest of the lanes and all warps split M and N (no cross-warp reduction).
    At most ``max_out`` outputs per thread (4 * max_out accumulators) where one K-lane per thread allows it: a
    larger product takes fewer K-lanes.
    Where M * N is smaller than the lanes, the spare lanes and warps repeat the work (it is tiny there).

    Why: the replicated pair layout (a (row, column) pair per thread, K in-thread) read ~190 KiB of shared memory
    per program for a 4 x 8 Gram at T=4, 2-4 rows per bank, and the shared-memory pipe it shares with the
    checkpoint stream made the one-launch verify 2-3x slower (bench/NOTES.md)."""
    best = None
    for tk in (8, 4, 2, 1):
        lanes = 32 // tk
        for tn in (1, 2, 4, 8, 16, 32):
            if tn > lanes:
                break
            tm = lanes // tn
            for wn in (1, 2, 4, 8):
                if wn > W:
                    break
                wm = W // wn
                sm = max(1, M // (tm * wm))
                sn = max(1, N // (tn * wn))
                waste = max(1, tm * wm // M) * max(1, tn * wn // N)  # threads repeating the same outputs
                cost = (sm * sn > max_out, -tk, sm + sn, waste)
                if sm * sn > max_out and tk > 1:
                    continue
                if best is None or cost < best[0]:
                    best = (cost, [sm, sn], [tm, tn, tk], [wm, wn, 1])
        if best is not None:
            break
    _, spt, tpw, wpc = best
    tk = tpw[2]
    vk = max(1, min(4, K // tk))
    return gl.BlockedLayout([spt[0], spt[1], vk], tpw, wpc, [2, 1, 0]), vk * tk


@jit
def _smem_dots(a_s, b_s, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, LD: tl.constexpr, CW: tl.constexpr):
    """``D[m, n] = sum_k a[m, k] b[n, k]`` [M, N] fp32 in ``SliceLayout(2, LD)``, for shared [M, K] ``a_s`` and
    [N, K] ``b_s``, in [M, N, CW] partial products (``dots_layout``): per-thread FMAs over K, one reduction at the
    end (in-thread, then over the K-lanes of a warp)."""
    acc = gl.zeros([M, N, CW], gl.float32, layout=LD)
    for kc in gl.static_range(0, K, CW):
        x = a_s.slice(kc, CW, dim=1).load(gl.SliceLayout(1, LD))  # [M, CW]
        y = b_s.slice(kc, CW, dim=1).load(gl.SliceLayout(0, LD))  # [N, CW]
        acc += gl.expand_dims(x, 1) * gl.expand_dims(y, 0)
    return gl.sum(acc, axis=2)


@jit
def _window_cumgates(a, b, A_log, dt_bias, bos, T, i_hv, HV: tl.constexpr, BT: tl.constexpr, MT: tl.constexpr):
    """(G_i [BT, 1], G_t [1, 2BT]) in ``MT``: the window's cumulative log-decay ``G_s = sum_{j <= s} g_j`` by row
    and by column (token ``c % BT``), each summed in the same order j = 0, 1, ... from uniform (scalar) loads,
    so no reduction crosses lanes or warps and ``G_i`` is bitwise ``G_t`` at i = t."""
    i = gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(1, MT)), 1)
    t = gl.expand_dims(gl.arange(0, 2 * BT, layout=gl.SliceLayout(0, MT)), 0) & (BT - 1)
    A = gl.load(A_log + i_hv).to(gl.float32)
    dtb = gl.load(dt_bias + i_hv).to(gl.float32)
    Gr = gl.zeros([BT, 1], gl.float32, layout=MT)
    Gc = gl.zeros([1, 2 * BT], gl.float32, layout=MT)
    for j in gl.static_range(BT):
        off = (bos.to(gl.int64) + gl.minimum(T - 1, j)) * HV + i_hv
        g_j, _ = _gating(gl.load(a + off).to(gl.float32), gl.load(b + off).to(gl.float32), A, dtb)
        g_j = gl.where(j < T, g_j, 0.0)
        Gr += gl.where(j <= i, g_j, 0.0)
        Gc += gl.where(j <= t, g_j, 0.0)
    return Gr, Gc


@jit
def _window_matrices(xs, Gr, Gc, be_r, be_c, e_gt, ap_s, gb_s, K: tl.constexpr, BT: tl.constexpr,
                     LG: tl.constexpr, CWG: tl.constexpr):  # fmt: skip
    """The window's matrices and decays into shared memory, from the normalised vectors ``xs`` [2BT, K]
    (shared): ``D = k^ x^T`` [BT, 2BT] (``_smem_dots``; x = keys then queries) gives, in ``ap_s`` [BT, 2BT],
    ``A[s, r] = beta_s e^(G_s - G_r) k^_s.k^_r`` (s > r) in columns r < BT and ``P^T[r, s] = e^(G_s - G_r)
    q^_s.k^_r`` (r <= s) in columns BT + s; ``gb_s`` [4, 2BT] rows: ``e^G_t``, ``beta_t``, ``e^Gt`` (the history's
    total decay; columns t < BT are the window's). ``Gr``, ``Gc``: ``_window_cumgates``; beta by row (``be_r``
    [BT]) and by column (``be_c`` [2BT], token ``c % BT``) in the slices of ``SliceLayout(2, LG)``."""
    MT: gl.constexpr = gl.SliceLayout(2, LG)
    D = _smem_dots(xs.slice(0, BT, dim=0), xs.slice(0, 2 * BT, dim=0), BT, 2 * BT, K, LG, CWG)
    i = gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(1, MT)), 1)  # [BT, 1]: s for A, r for P^T
    c = gl.expand_dims(gl.arange(0, 2 * BT, layout=gl.SliceLayout(0, MT)), 0)  # [1, 2BT]
    t = c & (BT - 1)
    low = t <= i
    a_part = gl.where(c < i, gl.expand_dims(be_r, 1) * gl.exp(gl.where(low, Gr - Gc, 0.0)) * D, 0.0)
    p_part = gl.where(i <= t, gl.exp(gl.where(i <= t, Gc - Gr, 0.0)) * D, 0.0)
    ap_s.store(gl.where(c < BT, a_part, p_part))
    i4 = gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(1, MT)), 1)  # rows of gb_s: e^G, beta, e^Gt, 0
    gb = gl.where(i4 == 0, gl.exp(Gc), gl.where(i4 == 1, gl.expand_dims(be_c, 0), 0.0))
    gb_s.store(gl.where(i4 == 2, e_gt, gb))


@jit
def _history_weights(g_hist, L: tl.constexpr, LH: tl.constexpr):
    """(w, e^Gt): ``w_j = e^(sum_{i > j} g_i)``, the decay since history record j, [L] in
    ``SliceLayout(1, SliceLayout(2, LH))``, and the history's total decay; g_hist: [L] gates (0 past the history)
    in ``SliceLayout(0, SliceLayout(2, LH))``."""
    S2: tl.constexpr = gl.SliceLayout(2, LH)
    j = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, S2)), 1)
    i = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(0, S2)), 0)
    w = gl.exp(gl.sum(gl.where(i > j, gl.expand_dims(g_hist, 0), 0.0), axis=1))
    return w, gl.exp(gl.sum(g_hist, axis=0))


@jit
def _history_dots(ks, xs, w, cs, K: tl.constexpr, L: tl.constexpr, BT: tl.constexpr, LH: tl.constexpr,
                  CWH: tl.constexpr):  # fmt: skip
    """``cs[j, x] = w_j k^_j . x`` for the history keys ``ks`` [L, K] and window vectors ``xs`` (shared), by
    ``_smem_dots`` in ``LH``; w: ``_history_weights`` (in ``SliceLayout(1, SliceLayout(2, LH))``)."""
    acc = _smem_dots(ks, xs.slice(0, 2 * BT, dim=0), L, 2 * BT, K, LH, CWH)
    cs.store(gl.expand_dims(w, 1) * acc)


@jit
def _window_terms(q, k, a, b, A_log, dt_bias, scale, bos, T, wp, bs, n_hist, i_h, i_hv, i_v, rk, rg, rb, xs, keys,
                  cs, ap_s, gb_s, H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, L: tl.constexpr,
                  BT: tl.constexpr, STAGES: tl.constexpr, ROWS: tl.constexpr, LG: tl.constexpr, CWG: tl.constexpr,
                  LH: tl.constexpr, CWH: tl.constexpr):  # fmt: skip
    """A program's window terms into shared memory (``xs``, ``ap_s``, ``gb_s``, ``cs``), and the window's keys,
    gates and betas appended to the ring (by the program of rows 0; keys by its key head's first value head).
    Called once the checkpoint's copies are issued, the history's keys (in ``keys``) being the oldest of
    ``STAGES + 1`` copy groups: the window's matrices need no copy, so they run while the first chunks are on
    their way; the history's dots wait for the keys alone."""
    GROUP: tl.constexpr = HV // H
    x, xr, xc = _window_load(q, k, bos, T, i_h, H, K, BT, ROWS)
    jl = gl.arange(0, L, layout=gl.SliceLayout(0, gl.SliceLayout(2, LH)))
    g_hist = gl.load(rg + ((bs + jl) & (L - 1)), mask=jl < n_hist, other=0.0)
    MT: gl.constexpr = gl.SliceLayout(2, LG)
    _, be_r = _window_gates(a, b, A_log, dt_bias, bos, T, i_hv, HV, BT, BT, gl.SliceLayout(1, MT))
    g_c, be_c = _window_gates(a, b, A_log, dt_bias, bos, T, i_hv, HV, BT, 2 * BT, gl.SliceLayout(0, MT))
    Gr, Gc = _window_cumgates(a, b, A_log, dt_bias, bos, T, i_hv, HV, BT, MT)
    w_hist, e_gt = _history_weights(g_hist, L, LH)
    xn = _window_normalise(x, xr, scale, BT)
    xs.slice(0, 2 * BT, dim=0).store(xn)
    if i_v == 0:
        t_x = xr & (BT - 1)
        p_k = rk + ((bs + wp + t_x) & (L - 1)) * K + xc
        gl.store(p_k, xn, mask=(t_x < T) & (xr < BT) & (xc < K) & (i_hv % GROUP == 0))
        t1 = gl.arange(0, 2 * BT, layout=gl.SliceLayout(0, MT))
        p_w = (bs + wp + t1) & (L - 1)
        gl.store(rg + p_w, g_c, mask=t1 < T)
        gl.store(rb + p_w, be_c, mask=t1 < T)
    gl.thread_barrier()  # xs written by every warp
    _window_matrices(xs, Gr, Gc, be_r, be_c, e_gt, ap_s, gb_s, K, BT, LG, CWG)
    async_copy.wait_group(STAGES)  # the history's keys
    gl.thread_barrier()
    if n_hist > 0:
        _history_dots(keys, xs, w_hist, cs, K, L, BT, LH, CWH)
