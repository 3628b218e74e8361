"""Second launch of ``gdn_replay_verify``, persistent: each program walks a list of (request, value head) items
with the next ones' copies in flight.

A program owns one SM's share of the ``B x HV x (V / BVP)`` items (item ``pid``, ``pid + P``, ...; request-major,
so consecutive items of one program belong to different requests). Everything an item needs -- its ``[BVP, K]``
checkpoint tile, its row of ``META``, the window vectors, the history's update vectors and weighted dots (a row
that reconstructs), the window's values and ``[T, T]`` matrices, and for a folding row its history's keys,
values, gates and betas and its fold marker -- arrives by ``cp.async`` into one of ``STAGES`` shared-memory
stages, issued ``STAGES - 1`` items ahead. While an item is worked on (a fold's FP32 arithmetic, the tensor-core
dots, the window math), the copies of the next ones keep the memory system busy: the fold is no longer a phase
in which the SM stops streaming.

Per item, from its stage:

1. a flushing row whose block is not yet folded in this epoch: the tile into the pinned ``tile_layout``
   registers, ``_fold_staged`` (bitwise the baseline), the folded tile back to the checkpoint and into the
   stage, the fold markers; then an empty history;
2. ``S0 x`` of the 2T window vectors on tensor cores (three TF32 ``mma.sync`` products of hi/lo parts:
   ``_tf32_parts``), in the same order as the chunked kernel (``verify_kernel``), so the same bits;
3. ``S_prev x = e^Gt S0 x + sum_j u_j CW_j``, the window (``_window_outputs``), the outputs and the window's
   records.

Bytes: the checkpoint is read once; a flushing row writes it once more. The window math is the chunked
kernel's, so outputs and records are bitwise the same as its.
"""

from __future__ import annotations

import triton.language as tl  # noqa: F401  (the interpreter looks for it in a kernel's globals)

from ._gluon import async_copy, gl, jit, mma_v2
from ._pinned import MARK
from .verify_kernel import _fold_staged, _tf32_parts, _window_outputs
from .verify_prep import META_ROW


@jit
def _meta_field(m, mi, f: tl.constexpr):
    """Field ``f`` of a ``META`` row held as a [META_ROW] tensor."""
    return gl.sum(gl.where(mi == f, m, 0), axis=0)


@jit
def _stage_item(
    item, slot, bos, T, wp, bs, fl, st, v, checkpoint, ring_k, ring_v, ring_g, ring_beta, ring_u, ring_folded,
    META, X, GA, GB, CW, tiles, metas, xs, hist, cs, vw, ga, gb, fk, fgb, fm,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, BT: tl.constexpr,
    BVP: tl.constexpr, NPH: tl.constexpr, CPT: tl.constexpr, CP2: tl.constexpr, CP3: tl.constexpr,
    CPV: tl.constexpr, CPG: tl.constexpr, CP1: tl.constexpr, CPM: tl.constexpr, SMEM: tl.constexpr,
    ROWS1: tl.constexpr,
):  # fmt: skip
    """Issue (not commit) every copy item ``item`` needs into stage ``st``; its cursors are already known."""
    i_b = item // (HV * NPH)
    i_hv = (item // NPH) % HV
    r0 = (item % NPH) * BVP
    i_h = i_hv // (HV // H)
    live = slot >= 0
    s64 = gl.maximum(slot, 0).to(gl.int64)
    b64 = i_b.to(gl.int64)
    vh = b64 * HV + i_hv
    # the row's META (read back when the item is worked on)
    mi = gl.arange(0, META_ROW, layout=CP1)
    async_copy.async_copy_global_to_shared(metas.index(st), META + b64 * META_ROW + mi)
    # the checkpoint tile
    t_r = gl.expand_dims(gl.arange(0, BVP, layout=gl.SliceLayout(1, CPT)), 1)
    t_c = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, CPT)), 0)
    ckpt = checkpoint + (s64 * HV + i_hv) * V * K
    async_copy.async_copy_global_to_shared(tiles.index(st), ckpt + (r0 + t_r) * K + t_c, mask=live & (t_c < K))
    # window vectors, values, [T, T] matrices and gates (staged by verify_prep)
    x_r = gl.expand_dims(gl.arange(0, 2 * BT, layout=gl.SliceLayout(1, CP2)), 1)
    x_c = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, CP2)), 0)
    head = b64 * H + i_h
    async_copy.async_copy_global_to_shared(xs.index(st).slice(0, 2 * BT, dim=0),
                                           X + head * (2 * BT * K) + x_r * K + x_c, mask=live & (x_c < K))  # fmt: skip
    v_t = gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(1, CPV)), 1)  # [BT, 1]
    rr = gl.expand_dims(gl.arange(0, BVP, layout=gl.SliceLayout(0, CPV)), 0) + r0  # [1, BVP]
    v_tok = bos.to(gl.int64) + gl.where(v_t < T, v_t, 0)
    async_copy.async_copy_global_to_shared(vw.index(st), v + (v_tok * HV + i_hv) * V + rr, mask=live & (v_t < T))
    ga_r = gl.expand_dims(gl.arange(0, 2 * BT, layout=gl.SliceLayout(1, CPM)), 1)
    ga_c = gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(0, CPM)), 0)
    async_copy.async_copy_global_to_shared(ga.index(st), GA + vh * (2 * BT * BT) + ga_r * BT + ga_c,
                                           mask=live & (ga_c < BT))  # fmt: skip
    gb_r = gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(1, CPM)), 1)
    async_copy.async_copy_global_to_shared(gb.index(st), GB + vh * (4 * BT) + gb_r * BT + ga_c,
                                           mask=live & (ga_c < BT))  # fmt: skip
    jv = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CPV)), 1)  # [L, 1]
    pv = (bs + jv) & (L - 1)
    if fl != 0:  # a folding row: its history's keys, values, gates and betas, and its fold marker
        jk = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CP2)), 1)
        rk = ring_k + (s64 * H + i_h) * L * K
        async_copy.async_copy_global_to_shared(fk.index(st), rk + ((bs + jk) & (L - 1)) * K + x_c,
                                               mask=live & (jk < wp) & (x_c < K))  # fmt: skip
        fv = hist.index(st)._reinterpret(v.dtype.element_ty, [L, BVP], SMEM)
        async_copy.async_copy_global_to_shared(fv, ring_v + (s64 * HV + i_hv) * L * V + pv * V + rr,
                                               mask=live & (jv < wp))  # fmt: skip
        jg = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CPG)), 1)  # [L, 1]
        pg = (s64 * HV + i_hv) * L + ((bs + jg) & (L - 1))
        async_copy.async_copy_global_to_shared(fgb.index(2 * st), ring_g + pg, mask=live & (jg < wp))
        async_copy.async_copy_global_to_shared(fgb.index(2 * st + 1), ring_beta + pg, mask=live & (jg < wp))
        marks = ring_folded + (s64 * HV + i_hv) * (V // MARK) + r0 // MARK
        async_copy.async_copy_global_to_shared(fm.index(st), marks + mi, mask=live & (mi < BVP // MARK))
    else:  # a reconstructing row: its history's update vectors and weighted dots
        ru = ring_u + (s64 * HV + i_hv) * L * V
        async_copy.async_copy_global_to_shared(hist.index(st), ru + pv * V + rr, mask=live & (jv < wp))
        jc = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CP3)), 1)
        c2 = gl.expand_dims(gl.arange(0, 2 * BT, layout=gl.SliceLayout(0, CP3)), 0)
        async_copy.async_copy_global_to_shared(cs.index(st), CW + vh * (L * 2 * BT) + jc * (2 * BT) + c2,
                                               mask=live & (jc < wp))  # fmt: skip


@jit
def _meta_scalars(META, item, ok, HV: tl.constexpr, NPH: tl.constexpr):
    """slot, bos, T, write_pos, base, flush of the request of ``item`` (a padding row when not ``ok``)."""
    mb = META + (item // (HV * NPH)).to(gl.int64) * META_ROW
    slot = gl.load(mb, mask=ok, other=-1)
    bos = gl.load(mb + 1, mask=ok, other=0)
    T = gl.load(mb + 2, mask=ok, other=0)
    wp = gl.load(mb + 3, mask=ok, other=0)
    bs = gl.load(mb + 4, mask=ok, other=0)
    fl = gl.load(mb + 5, mask=ok, other=0)
    return slot, bos, T, wp, bs, fl


@jit
def _gdn_replay_verify_persistent_kernel(
    v, checkpoint, o, ring_k, ring_v, ring_g, ring_beta, ring_u, ring_folded, META, X, GA, GB, CW, n_items,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, BT: tl.constexpr,
    BV: tl.constexpr, BVP: tl.constexpr, STAGES: tl.constexpr, TILE: tl.constexpr, L3: tl.constexpr,
    CPT: tl.constexpr, CP2: tl.constexpr, CP3: tl.constexpr, CPV: tl.constexpr, CPG: tl.constexpr,
    CP1: tl.constexpr, CPM: tl.constexpr, SMEM: tl.constexpr, SMEM_TILE: tl.constexpr, ROWS1: tl.constexpr,
    NX: tl.constexpr, MMA: tl.constexpr,
):  # fmt: skip
    pid = gl.program_id(0)
    P = gl.num_programs(0)
    NPH: tl.constexpr = V // BVP
    D: tl.constexpr = STAGES - 1
    EPI: tl.constexpr = gl.SliceLayout(2, L3)
    HB: tl.constexpr = L * BVP * ring_u.dtype.element_ty.primitive_bitwidth // 8  # bytes of a stage's records
    HBV: tl.constexpr = L * BVP * v.dtype.element_ty.primitive_bitwidth // 8

    tiles = gl.allocate_shared_memory(gl.float32, [STAGES, BVP, K], SMEM_TILE)
    metas = gl.allocate_shared_memory(gl.int32, [STAGES, META_ROW], ROWS1)
    xs = gl.allocate_shared_memory(gl.float32, [STAGES, NX, K], SMEM)  # window vectors (past 2BT: MMA padding)
    if HB >= HBV:  # history update vectors; a folding row's values share the buffer
        hist = gl.allocate_shared_memory(ring_u.dtype.element_ty, [STAGES, L, BVP], SMEM)
    else:
        hist = gl.allocate_shared_memory(v.dtype.element_ty, [STAGES, L, BVP], SMEM)
    cs = gl.allocate_shared_memory(gl.float32, [STAGES, L, 2 * BT], SMEM)  # weighted history dots
    vw = gl.allocate_shared_memory(v.dtype.element_ty, [STAGES, BT, BVP], SMEM)  # the window's values
    ga = gl.allocate_shared_memory(gl.float32, [STAGES, 2 * BT, BT], SMEM)  # A[s, r], then P[s, r] as [r, s]
    gb = gl.allocate_shared_memory(gl.float32, [STAGES, 4, BT], SMEM)  # e^G_s, beta_s, e^Gt, -
    fk = gl.allocate_shared_memory(gl.float32, [STAGES, L, K], SMEM)  # a folding row's history keys
    fgb = gl.allocate_shared_memory(gl.float32, [2 * STAGES, L, 1], SMEM)  # ... its gates, betas (2 st, 2 st + 1)
    fm = gl.allocate_shared_memory(gl.int32, [STAGES, META_ROW], ROWS1)  # ... its fold marker (element 0)

    n_my = (n_items - pid + P - 1) // P
    for d in gl.static_range(D):  # the pipeline's first items
        item = pid + d * P
        slot, bos, T, wp, bs, fl = _meta_scalars(META, item, d < n_my, HV, NPH)
        if d < n_my:
            _stage_item(item, slot, bos, T, wp, bs, fl, d, v, checkpoint, ring_k, ring_v, ring_g, ring_beta, ring_u,
                        ring_folded, META, X, GA, GB, CW, tiles, metas, xs, hist, cs, vw, ga, gb, fk, fgb, fm, H, HV,
                        K, V, L, BT, BVP, NPH, CPT, CP2, CP3, CPV, CPG, CP1, CPM, SMEM, ROWS1)  # fmt: skip
        async_copy.commit_group()
    slot_n, bos_n, T_n, wp_n, bs_n, fl_n = _meta_scalars(META, pid + D * P, D < n_my, HV, NPH)

    mi = gl.arange(0, META_ROW, layout=CP1)
    tok = gl.arange(0, BT, layout=gl.SliceLayout(0, EPI))
    rows_l = gl.arange(0, BVP, layout=gl.SliceLayout(1, EPI))
    for i in range(0, n_my):
        j = i + D
        if j < n_my:  # issue item j, whose cursors were read one item ago
            _stage_item(pid + j * P, slot_n, bos_n, T_n, wp_n, bs_n, fl_n, j % STAGES, v, checkpoint, ring_k,
                        ring_v, ring_g, ring_beta, ring_u, ring_folded, META, X, GA, GB, CW, tiles, metas, xs, hist,
                        cs, vw, ga, gb, fk, fgb, fm, H, HV, K, V, L, BT, BVP, NPH, CPT, CP2, CP3, CPV, CPG, CP1,
                        CPM, SMEM, ROWS1)  # fmt: skip
        async_copy.commit_group()
        slot_n, bos_n, T_n, wp_n, bs_n, fl_n = _meta_scalars(META, pid + (j + 1) * P, j + 1 < n_my, HV, NPH)
        async_copy.wait_group(D)
        gl.thread_barrier()

        # item i, from its stage
        st = i % STAGES
        item = pid + i * P
        i_hv = (item // NPH) % HV
        r0 = (item % NPH) * BVP
        m = metas.index(st).load(CP1)
        slot = _meta_field(m, mi, 0)
        bos = _meta_field(m, mi, 1)
        T = _meta_field(m, mi, 2)
        wp = _meta_field(m, mi, 3)
        fl = _meta_field(m, mi, 5)
        ep = _meta_field(m, mi, 6)
        tok64 = bos.to(gl.int64) + gl.where(tok < T, tok, 0)  # padding lanes re-read token 0, then get masked
        rows_e = r0 + rows_l
        live_e = gl.expand_dims(rows_e < V, 1) & gl.expand_dims(tok < T, 0)
        p_o = o + (gl.expand_dims(tok64, 0) * HV + i_hv) * V + gl.expand_dims(rows_e, 1)
        if slot < 0:
            gl.store(p_o, gl.zeros([BVP, BT], gl.float32, layout=EPI).to(o.dtype.element_ty), mask=live_e)
        else:
            s64 = slot.to(gl.int64)
            bs = _meta_field(m, mi, 4)
            tb = tiles.index(st)
            if fl != 0:  # 1. fold (once per epoch), then an empty history
                todo = _meta_field(fm.index(st).load(CP1), mi, 0) != ep
                if todo:
                    rows = r0 + gl.arange(0, BV, layout=gl.SliceLayout(1, TILE))
                    cols = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, TILE)), 0)
                    ks_rows = fk.index(st)._reinterpret(gl.float32, [L, K], ROWS1)
                    vs_rows = hist.index(st)._reinterpret(v.dtype.element_ty, [L, BVP], ROWS1)
                    gs_rows = fgb.index(2 * st)._reinterpret(gl.float32, [L, 1], ROWS1)
                    bs_rows = fgb.index(2 * st + 1)._reinterpret(gl.float32, [L, 1], ROWS1)
                    ckpt = checkpoint + (s64 * HV + i_hv) * V * K
                    marks = ring_folded + (s64 * HV + i_hv) * (V // MARK)
                    mrow = gl.arange(0, BV // MARK, layout=gl.SliceLayout(1, TILE))
                    for blk in gl.static_range(BVP // BV):
                        blk_s = tb.slice(blk * BV, BV, dim=0)
                        h = _fold_staged(blk_s.load(TILE), ks_rows, vs_rows, gs_rows, bs_rows, wp, blk * BV, BV,
                                         TILE)  # fmt: skip
                        gl.store(ckpt + gl.expand_dims(rows + blk * BV, 1) * K + cols, h)
                        blk_s.store(h)
                        mark = marks + (r0 + blk * BV) // MARK
                        gl.store(mark + mrow, gl.full([BV // MARK], 0, gl.int32, layout=gl.SliceLayout(1, TILE)) + ep)
                    gl.thread_barrier()  # the folded tile is visible to every warp
            n_hist = gl.where(fl != 0, 0, wp)

            # 2. S0 x for the window vectors on tensor cores, 16 columns of K at a time.
            DA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=1)
            DB: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=1)
            acc = gl.zeros([BVP, NX], gl.float32, layout=MMA)
            xb = xs.index(st)
            for ks in gl.static_range(0, K, 16):
                a_hi, a_lo = _tf32_parts(tb.slice(ks, 16, dim=1).load(DA))  # [BVP, 16]
                b_hi, b_lo = _tf32_parts(xb.slice(ks, 16, dim=1).permute((1, 0)).load(DB))  # [16, NX]
                acc = mma_v2(a_lo, b_hi, acc, input_precision="tf32")
                acc = mma_v2(a_hi, b_lo, acc, input_precision="tf32")
                acc = mma_v2(a_hi, b_hi, acc, input_precision="tf32")
            gl.thread_barrier()  # every warp is done with the tile: it takes the dots to the window's layout
            acc_s = tb._reinterpret(gl.float32, [BVP, NX], SMEM)
            acc_s.store(acc)
            gl.thread_barrier()
            acc_k = acc_s.slice(0, BT, dim=1).load(EPI)
            acc_q = acc_s.slice(BT, BT, dim=1).load(EPI)

            # 3. The history term, then the window.
            gb_s = gb.index(st)
            a_s = ga.index(st).slice(0, BT, dim=0)
            pt_s = ga.index(st).slice(BT, BT, dim=0)
            eh = gb_s.slice(2, 1, dim=0).load(EPI)  # [1, BT]: e^Gt
            dk = acc_k * eh
            dq = acc_q * eh
            us_rows = hist.index(st)._reinterpret(ring_u.dtype.element_ty, [L, BVP], ROWS1)
            cs_rows = cs.index(st)._reinterpret(gl.float32, [L, 2 * BT], ROWS1)
            for jh in range(0, n_hist):
                u = gl.expand_dims(us_rows.index(jh).load(gl.SliceLayout(1, EPI)).to(gl.float32), 1)  # [BVP, 1]
                cj = cs_rows.index(jh)
                dk = dk + u * gl.expand_dims(cj.slice(0, BT).load(gl.SliceLayout(0, EPI)), 0)
                dq = dq + u * gl.expand_dims(cj.slice(BT, BT).load(gl.SliceLayout(0, EPI)), 0)
            eg = gb_s.slice(0, 1, dim=0).load(EPI)
            beta = gb_s.slice(1, 1, dim=0).load(EPI)
            v_raw = vw.index(st).permute((1, 0)).load(EPI)  # [BVP, BT]
            U, out = _window_outputs(dk, dq, v_raw, live_e, tok, a_s, pt_s, eg, beta, BT, EPI)
            gl.store(p_o, out.to(o.dtype.element_ty), mask=live_e)
            p_rec = gl.expand_dims((bs + wp + tok) & (L - 1), 0) * V + gl.expand_dims(rows_e, 1)
            gl.store(ring_u + (s64 * HV + i_hv) * L * V + p_rec, U.to(ring_u.dtype.element_ty), mask=live_e)
            gl.store(ring_v + (s64 * HV + i_hv) * L * V + p_rec, v_raw, mask=live_e)
        gl.thread_barrier()  # every warp is done with the stage: the next issue refills it
