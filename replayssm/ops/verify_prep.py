"""First launch of the staged ``gdn_replay_verify`` (``verify_launch.one_launch`` off): everything of a window that does
not need the checkpoint.

One program per (request, key head), ``prep_warps`` warps. What it stages lets the main kernel
(``verify_kernel``) start streaming its checkpoint after a single round trip to memory, with no dependent
loads after it:

- ``META [B, 8]`` int32 (key head 0): slot, bos, T, write_pos, base, flush, epoch and index of a request, in the
  order the main kernel's programs take them (``_order_rank``: folding requests kept out of the last waves);
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

The program is latency-bound, so its shape follows the round trips, not the arithmetic: every load that
does not depend on another is issued before the first store (a compiler may not move a load past a store
that could alias it), the history keys arrive by ``cp.async`` while the window is normalised and gated, and
the work inside is spread over the warps with no serial per-token or per-value-head loop. Three dependent
round trips in all: the row's slot and bounds; its cursors, window vectors and gates; its history.
The history keys (``SWK``) and the window vectors (``SWX``) sit in shared memory XOR-swizzled by row: the history
dots read 4 key rows and 8 window rows at the same columns per load, which unswizzled all hit the same banks
(H200, T=4, B=256: this launch 37.1 -> 22.6 us).

Its instructions count too (ncu, H200: half the issue slots busy with under three warps per scheduler), so the work a
program repeats is kept small: the gates are computed once, an element per lane, and moved to the two layouts of the
matrices (elementwise, so the same bits; they were computed twice, four elements per thread at T=1); the history keys
are copied in ring order, each record at a constant address with only its mask computed, and the dots are gathered
back to record order (the same sums; the address arithmetic of the logical order cost ~8 instructions a record).
T=1, L=32, B=256: 2,608 -> 2,208 instructions (compiled), this launch 18.1 -> 16.1 us (bench/NOTES.md, nineteenth
session).
"""

from __future__ import annotations

import triton.language as tl  # noqa: F401  (the interpreter looks for it in a kernel's globals)

from ._gluon import async_copy, gl, jit
from ._pinned import _gating, _l2norm

META_FIELDS = 8  # slot, bos, T, write_pos, base, flush, epoch, request
META_ROW = tl.constexpr(META_FIELDS)  # the same, readable inside kernels


def prep_warps(programs: int, sm_count: int, BT: int) -> int:
    """Warps per prep program. Many programs (at least two per SM): one warp, the fewest instructions per
    program (H200, T=4, B=256: 38.7 us with one warp, 54.5 with two, 84.4 with four). Few programs: the
    latency of one program is the launch's, so its work is spread (B=8: 4.9 us with two warps at T <= 4, 4.0
    with four at T=8, against 6.0 and 6.9 with one). bench/results/2026-12-01b-h200/ has the sweep."""
    if programs >= 2 * sm_count:
        return 1
    return 4 if BT >= 8 else 2


@jit
def _meta_row(mi, slot, bos, T, wp, bs, fl, ep, req):
    """The ``META`` row (``mi`` = arange(META_FIELDS)): slot, bos, T, write_pos, base, flush, epoch, request."""
    row = gl.where(mi == 0, slot, gl.where(mi == 1, bos, gl.where(mi == 2, T, gl.where(mi == 7, req, 0))))
    return gl.where(mi == 3, wp, gl.where(mi == 4, bs, gl.where(mi == 5, fl, gl.where(mi == 6, ep, row))))


@jit
def _order_rank(f_raw, ob, B, i_b, free_tail):
    """Where request ``i_b`` goes in the main kernel's program order (its ``META`` row), from every request's flush
    flag ``f_raw`` [BP] (``ob``: arange(BP); rows past ``B`` are not the batch's). The others are spread evenly over
    the whole order and the folding requests among them, evenly over all but the last ``free_tail`` of the others
    (at most half of them; ties by request index): the long programs stay mixed with the short ones, as the fold's
    arithmetic overlaps the others' streams, but none of them starts in the last waves, where a fold would run on
    with most of the GPU idle. Every program computes the same keys, so the ranks are a permutation of the batch,
    each kind in its own order. Only the order changes: each program's arithmetic is the same."""
    live = ob < B
    f = gl.where(live & (f_raw != 0), 1, 0)
    n = gl.where(live, 1 - f, 0)
    nf = gl.sum(f, axis=0).to(gl.float32)
    nn = gl.sum(n, axis=0).to(gl.float32)
    i_f = (gl.associative_scan(f, 0, _add) - f).to(gl.float32)  # rank among the folding requests
    i_n = (gl.associative_scan(n, 0, _add) - n).to(gl.float32)  # ... among the others
    spread = gl.maximum(1.0 - free_tail / gl.maximum(nn, 1.0), 0.5)  # the share of the others' keys folds take
    key = gl.where(f != 0, (i_f + 0.5) * (spread / gl.maximum(nf, 1.0)), (i_n + 0.5) / gl.maximum(nn, 1.0))
    mine = gl.sum(gl.where(ob == i_b, key, 0.0), axis=0)
    before = live & ((key < mine) | ((key == mine) & (ob < i_b)))
    return gl.sum(gl.where(before, 1, 0), axis=0)


@jit
def _add(x, y):
    return x + y


@jit
def _group_index(i_h, T, GROUP: tl.constexpr, GP: tl.constexpr, BT: tl.constexpr, LAY: tl.constexpr):
    """(head, live) [GP, BT] in ``LAY``: the value head of each row of the group, and where the window has a token."""
    gv = gl.expand_dims(gl.arange(0, GP, layout=gl.SliceLayout(1, LAY)), 1)
    t = gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(0, LAY)), 0)
    return i_h * GROUP + gv, (gv < GROUP) & (t < T)


@jit
def _group_gates(a, b, A_log, dt_bias, bos, T, i_h, HV: tl.constexpr, GROUP: tl.constexpr, GP: tl.constexpr,
                 BT: tl.constexpr, LAY: tl.constexpr):  # fmt: skip
    """(g, beta) [GP, BT] in ``LAY`` of the group's value heads over the window (0 where not live)."""
    gv = gl.expand_dims(gl.arange(0, GP, layout=gl.SliceLayout(1, LAY)), 1)
    t = gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(0, LAY)), 0)
    hv, live = _group_index(i_h, T, GROUP, GP, BT, LAY)
    off = (bos.to(gl.int64) + gl.minimum(t, T - 1)) * HV + hv
    a_w = gl.load(a + off, mask=live, other=0.0).to(gl.float32)
    b_w = gl.load(b + off, mask=live, other=0.0).to(gl.float32)
    A = gl.load(A_log + hv, mask=gv < GROUP, other=0.0).to(gl.float32)
    dtb = gl.load(dt_bias + hv, mask=gv < GROUP, other=0.0).to(gl.float32)
    g, beta = _gating(a_w, b_w, A, dtb)
    return gl.where(live, g, 0.0), gl.where(live, beta, 0.0)


@jit
def _window_prep_kernel(
    q, k, a, b, A_log, dt_bias, slots, cu_seqlens, ring_k, ring_g, ring_beta, write_pos, base, flush, epoch,
    pending, scale, X, META, GA, GB, CW, B, free_tail,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, L: tl.constexpr, BT: tl.constexpr, GP: tl.constexpr,
    ROWS: tl.constexpr, KK3: tl.constexpr, G3: tl.constexpr, LH: tl.constexpr, GH: tl.constexpr, LW: tl.constexpr,
    CPK: tl.constexpr, ML: tl.constexpr, SWK: tl.constexpr, SWX: tl.constexpr, BP: tl.constexpr, OL: tl.constexpr,
    GG: tl.constexpr,
):  # fmt: skip
    i_h = gl.program_id(0)
    i_b = gl.program_id(1)
    GROUP: tl.constexpr = HV // H
    KCH: tl.constexpr = LH.size_per_thread[2]
    slot = gl.load(slots + i_b)
    bos = gl.load(cu_seqlens + i_b)
    T = gl.load(cu_seqlens + i_b + 1) - bos
    mi = gl.arange(0, META_ROW, layout=ML)
    # Key head 0 places the row's META (_order_rank): every row's flush flag, loaded beside its own slot and cursors.
    ob = gl.arange(0, BP, layout=OL)
    every = (ob < B) & (i_h == 0)
    s_all = gl.load(slots + ob, mask=every, other=-1)
    f_all = gl.load(flush + s_all, mask=every & (s_all >= 0), other=0)
    if slot < 0:
        if i_h == 0:
            p_meta = META + _order_rank(f_all, ob, B, i_b, free_tail) * META_ROW + mi
            gl.store(p_meta, _meta_row(mi, slot, bos, T, 0, 0, 0, 0, i_b))
    else:
        s64 = slot.to(gl.int64)
        b64 = i_b.to(gl.int64)
        # 1. Every load of the second round trip: cursors, window vectors, the group's gates (two layouts).
        wp = gl.load(write_pos + slot)
        bs = gl.load(base + slot)
        fl = gl.load(flush + slot)
        ep = gl.load(epoch + slot)
        xr = gl.expand_dims(gl.arange(0, 2 * BT, layout=gl.SliceLayout(1, ROWS)), 1)  # [2BT, 1]: k rows, q rows
        xc = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, ROWS)), 0)  # [1, K]
        t_x = xr & (BT - 1)
        is_q = xr >= BT
        off = ((bos.to(gl.int64) + gl.minimum(t_x, T - 1)) * H + i_h) * K + xc
        live_x = (t_x < T) & (xc < K)
        x = gl.load(k + off, mask=live_x & (xr < BT), other=0.0).to(gl.float32)
        x += gl.load(q + off, mask=live_x & is_q, other=0.0).to(gl.float32)
        M0: gl.constexpr = gl.SliceLayout(2, G3)  # [GP, BT] indexed (value head, s)
        M1: gl.constexpr = gl.SliceLayout(1, G3)  # [GP, BT] indexed (value head, r)
        # the gates once, an element per lane (GG), then moved to the two layouts (the same bits: elementwise)
        g_c, be_c = _group_gates(a, b, A_log, dt_bias, bos, T, i_h, HV, GROUP, GP, BT, GG)
        g0, be0 = gl.convert_layout(g_c, M0), gl.convert_layout(be_c, M0)
        g1, be1 = gl.convert_layout(g_c, M1), gl.convert_layout(be_c, M1)
        hv0, _ = _group_index(i_h, T, GROUP, GP, BT, M0)
        hv1, live1 = _group_index(i_h, T, GROUP, GP, BT, M1)

        # 2. The history (a folding row has none left): its gates and, by cp.async, its keys.
        n_hist = gl.where(fl != 0, 0, wp)
        rk = ring_k + (s64 * H + i_h) * L * K
        gv_h = gl.expand_dims(gl.arange(0, GP, layout=gl.SliceLayout(1, GH)), 1)  # [GP, 1]
        j_h = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(0, GH)), 0)  # [1, L]
        g_hist = gl.load(ring_g + (s64 * HV + i_h * GROUP + gv_h) * L + ((bs + j_h) & (L - 1)),
                         mask=(gv_h < GROUP) & (j_h < n_hist), other=0.0)  # fmt: skip
        ks = gl.allocate_shared_memory(gl.float32, [L, K], SWK)
        # In ring (physical) order: a record's address and place are constants, only its mask is computed (the
        # logical order, record j at (base + j) & (L - 1), is restored on the dots, step 5).
        pk = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CPK)), 1)
        kk_c = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, CPK)), 0)
        in_hist = ((pk - bs) & (L - 1)) < n_hist
        async_copy.async_copy_global_to_shared(ks, rk + pk * K + kk_c, mask=in_hist & (kk_c < K))
        async_copy.commit_group()

        # 3. Normalise the window vectors (rows in parallel; each row's arithmetic is the pinned one), store them.
        xn = _l2norm(x)
        xn = gl.where(is_q, xn * scale, xn)
        xs = gl.allocate_shared_memory(gl.float32, [2 * BT, K], SWX)
        xs.store(xn)
        head = b64 * H + i_h
        gl.store(X + head * (2 * BT * K) + xr * K + xc, xn)
        gl.store(rk + ((bs + wp + t_x) & (L - 1)) * K + xc, xn, mask=live_x & (xr < BT))
        if i_h == 0:
            p_meta = META + _order_rank(f_all, ob, B, i_b, free_tail) * META_ROW + mi
            gl.store(p_meta, _meta_row(mi, slot, bos, T, wp, bs, fl, ep, i_b))
            gl.store(pending + slot, T)
        gl.thread_barrier()

        # 4. Gram matrices of the window (dim 0 = s, dim 1 = r), then every value head's decays and matrices.
        xk0 = xs.slice(0, BT, dim=0).load(gl.SliceLayout(1, KK3))
        xk1 = xs.slice(0, BT, dim=0).load(gl.SliceLayout(0, KK3))
        xq0 = xs.slice(BT, BT, dim=0).load(gl.SliceLayout(1, KK3))
        kk = gl.convert_layout(gl.sum(gl.expand_dims(xk0, 1) * gl.expand_dims(xk1, 0), axis=2), gl.SliceLayout(0, G3))
        qk = gl.convert_layout(gl.sum(gl.expand_dims(xq0, 1) * gl.expand_dims(xk1, 0), axis=2), gl.SliceLayout(0, G3))
        s3 = gl.expand_dims(gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(1, gl.SliceLayout(0, G3))), 1), 0)
        r3 = gl.expand_dims(gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(0, gl.SliceLayout(0, G3))), 0), 0)
        low = r3 <= s3
        G0 = gl.sum(gl.where(low, gl.expand_dims(g1, 1), 0.0), axis=2)  # cumulative gate at s: [GP, BT] in M0
        G1 = gl.sum(gl.where(s3 <= r3, gl.expand_dims(g0, 2), 0.0), axis=1)  # cumulative gate at r: [GP, BT] in M1
        decay = gl.exp(gl.where(low, gl.expand_dims(G0, 2) - gl.expand_dims(G1, 1), 0.0))
        A_sr = gl.where(r3 < s3, gl.expand_dims(be0, 2) * decay * gl.expand_dims(kk, 0), 0.0)
        ga = GA + gl.expand_dims((b64 * HV + hv0) * (2 * BT * BT), 2)
        live3 = gl.expand_dims(gl.expand_dims(gl.arange(0, GP, layout=gl.SliceLayout(1, M0)), 1), 2) < GROUP
        live3 = live3 & (s3 < BT) & (r3 < BT)
        gl.store(ga + s3 * BT + r3, A_sr, mask=live3)
        gl.store(ga + BT * BT + r3 * BT + s3, gl.where(low, decay * gl.expand_dims(qk, 0), 0.0), mask=live3)
        t1 = gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(0, M1)), 0)
        gb = GB + (b64 * HV + hv1) * (4 * BT) + t1
        head_ok = (hv1 < i_h * GROUP + GROUP) & (t1 < BT)
        gl.store(gb, gl.exp(G1), mask=head_ok)
        gl.store(gb + BT, be1, mask=head_ok)
        p_w = (bs + wp + t1) & (L - 1)
        gl.store(ring_g + (s64 * HV + hv1) * L + p_w, g1, mask=live1)
        gl.store(ring_beta + (s64 * HV + hv1) * L + p_w, be1, mask=live1)

        # 5. The history's total decay e^Gt per value head, and its weighted dots.
        Gt = gl.sum(g_hist, axis=1)  # [GP]
        t_h = gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(0, GH)), 0)
        eh = gl.expand_dims(gl.exp(Gt), 1) + gl.zeros([GP, BT], gl.float32, layout=GH)
        gb_h = GB + (b64 * HV + i_h * GROUP + gv_h) * (4 * BT) + 2 * BT + t_h
        gl.store(gb_h, eh, mask=(gv_h < GROUP) & (t_h < BT))
        async_copy.wait_group(0)
        gl.thread_barrier()
        if n_hist > 0:
            acc = gl.zeros([L, 2 * BT], gl.float32, layout=gl.SliceLayout(2, LH))
            for kc in gl.static_range(0, K, KCH):  # a record and a window vector per thread, K in-thread
                keys = ks.slice(kc, KCH, dim=1).load(gl.SliceLayout(1, LH))  # [L, KCH]
                xv = xs.slice(kc, KCH, dim=1).load(gl.SliceLayout(0, LH))  # [2BT, KCH]
                acc += gl.sum(gl.expand_dims(keys, 1) * gl.expand_dims(xv, 0), axis=2)
            ACC: gl.constexpr = gl.SliceLayout(2, LH)
            j_a = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, ACC)), 1)
            x_a = gl.expand_dims(gl.arange(0, 2 * BT, layout=gl.SliceLayout(0, ACC)), 0)
            acc = gl.gather(acc, gl.broadcast((bs + j_a) & (L - 1), x_a)[0], 0)  # ring order -> record order
            P = gl.associative_scan(g_hist, 1, _add)  # cumulative log-decay through record j
            w = gl.convert_layout(gl.exp(gl.expand_dims(Gt, 1) - P), gl.SliceLayout(2, LW))  # [GP, L]
            cw = gl.expand_dims(w, 2) * gl.expand_dims(gl.convert_layout(acc, gl.SliceLayout(0, LW)), 0)
            W2: gl.constexpr = gl.SliceLayout(2, LW)
            W0: gl.constexpr = gl.SliceLayout(0, LW)
            gv3 = gl.expand_dims(gl.expand_dims(gl.arange(0, GP, layout=gl.SliceLayout(1, W2)), 1), 2)
            j3 = gl.expand_dims(gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(0, W2)), 0), 2)
            x3 = gl.expand_dims(gl.expand_dims(gl.arange(0, 2 * BT, layout=gl.SliceLayout(0, W0)), 0), 0)
            p_cw = CW + ((b64 * HV + i_h * GROUP + gv3) * L + j3) * (2 * BT) + x3
            gl.store(p_cw, cw, mask=(gv3 < GROUP) & (j3 < n_hist) & (x3 < 2 * BT))
