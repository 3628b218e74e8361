"""The main kernel of ``gdn_replay_verify``: fold, window outputs and new records, one value head per program.

A program owns ``BVP`` rows of one value head of one request (the whole head unless the batch is too
small to fill the GPU). Staged (``STAGED``), it reads its row of ``META`` (written by the launch before it,
``verify_prep``, which also orders the requests, ``_order_rank``; the row names its request) in one round trip
and then never waits on a dependent load again. In one launch (``STAGED`` off) it loads its request's slot and
window bounds, then that slot's cursors (two round trips; the request's first program sets ``pending``), and
computes its key head's window terms itself (``verify_window._window_terms``) while its first chunks are in
flight; at one-wave batches it is a programmatic dependent launch (``PDL``, ``verify_launch.use_pdl``):

1. a flushing row first folds its history into the checkpoint (``verify_fold``), block by block on the
   pinned ``tile_layout`` with ``_update`` (bitwise the baseline), writes the blocks back and marks them
   (a retry of the step finds the marks and does not fold again); it then runs step 2 on the folded
   state with an empty history;
2. the checkpoint streams through shared memory in ``[BVP, KC]`` column chunks with ``cp.async``,
   ``STAGES`` chunks in flight, the step's vectors arriving with the first (staged: window vectors, weighted
   history dots, history update vectors, the window's values; one launch: the history's keys in a copy group of
   their own ahead of it, the vectors and dots computed meanwhile). The ``S0 x`` dots of the 2T window
   vectors: with ``TC``, three TF32 tensor-core products of hi/lo parts (``_tf32_parts``, fp32-accurate; the
   window vectors XOR-swizzled by row in shared memory, ``SMEM_X``, so the eight rows of a B-operand load hit
   different banks), then through shared memory to the ``[rows, T]`` layout the window math uses (a row per thread);
   without, each thread owns whole rows and accumulates them in registers over the chunks (fp32 FMA, no
   cross-lane reduction), already in that layout;
3. ``S_prev x = e^Gt S0 x + sum_j u_j CW_j``, then per row, in-thread over the window:
   ``R = beta (v - e^G S_prev k^)``, ``U = (I + A)^-1 R`` by forward substitution, ``o = e^G S_prev q^
   + P U``; the window's ``u`` and raw ``v`` appended to the ring.

Bytes: the checkpoint is read once (64 KiB per head at K = V = 128); a flushing row reads and writes it
once more for the fold (the re-read in step 2 mostly hits L2).

Shared memory: the chunks (a folding row's next state block while it folds), the history's update vectors (its
values), the history keys (a folding row's; one launch: any row's). Staged, where they fit (``PACK``,
``verify_launch.pack_in_keys``), the stream's small buffers (window vectors, weighted dots, window values, the
window's matrices and decays) are views of the keys' rows, which only a folding row fills and only before its
stream starts, and a fold's gates and betas sit in the keys' last row (a fold replays at most L - T records): at
T=1, L=32 that makes four programs per SM fit (56.0 KiB each).
"""

from __future__ import annotations

import triton.language as tl  # noqa: F401  (the interpreter looks for it in a kernel's globals)

from ._gluon import async_copy, gl, jit
from ._pinned import MARK
from .verify_dots import _copy_window, _tc_products
from .verify_fold import _fold_head, _packed_views
from .verify_prep import META_ROW
from .verify_window import _window_terms


@jit
def _epilogue_index(o, bos, T, r0, i_hv, HV: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BVP: tl.constexpr,
                    EPI: tl.constexpr):  # fmt: skip
    """(tok, rows, live, p_o) of the [rows, BT] window math in ``EPI``."""
    tok = gl.arange(0, BT, layout=gl.SliceLayout(0, EPI))
    tok64 = bos.to(gl.int64) + gl.where(tok < T, tok, 0)  # padding lanes re-read token 0, then get masked
    rows_e = r0 + gl.arange(0, BVP, layout=gl.SliceLayout(1, EPI))
    live_e = gl.expand_dims(rows_e < V, 1) & gl.expand_dims(tok < T, 0)
    p_o = o + (gl.expand_dims(tok64, 0) * HV + i_hv) * V + gl.expand_dims(rows_e, 1)
    return tok, rows_e, live_e, p_o


@jit
def _x_rows(X, req, i_h, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, CP2: tl.constexpr):
    """Pointers to the staged window vectors of (request ``req``, key head ``i_h``): [2BT, K] in ``CP2``."""
    x_r = gl.arange(0, 2 * BT, layout=gl.SliceLayout(1, CP2))
    x_c = gl.arange(0, K, layout=gl.SliceLayout(0, CP2))
    return X + (req * H + i_h) * (2 * BT * K) + gl.expand_dims(x_r, 1) * K + gl.expand_dims(x_c, 0)


@jit
def _window_outputs(dk, dq, v_raw, live_e, tok, a_s, pt_s, eg, beta, BT: tl.constexpr, EPI: tl.constexpr):
    """U = (I + A)^-1 beta (v - e^G S_prev k^) and o = e^G S_prev q^ + P U for [rows, BT] tensors in ``EPI``."""
    U = beta * (gl.where(live_e, v_raw.to(gl.float32), 0.0) - eg * dk)
    for s in gl.static_range(1, BT):
        corr = gl.sum(U * a_s.slice(s, 1, dim=0).load(EPI), axis=1)  # sum_r A[s, r] u_r
        U = gl.where(gl.expand_dims(tok, 0) == s, U - gl.expand_dims(corr, 1), U)
    out = eg * dq
    for r in gl.static_range(BT):
        u_r = gl.sum(gl.where(gl.expand_dims(tok, 0) == r, U, 0.0), axis=1)
        out = out + gl.expand_dims(u_r, 1) * pt_s.slice(r, 1, dim=0).load(EPI)
    return U, out


@jit
def _gdn_replay_verify_kernel(
    q, k, v, a, b, A_log, dt_bias, scale, checkpoint, o, ring_k, ring_v, ring_g, ring_beta, ring_u, ring_folded, META,
    X, GA, GB, CW, slots, cu_seqlens, c_wp, c_base, c_flush, c_epoch, c_pending,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, BT: tl.constexpr,
    BV: tl.constexpr, BVP: tl.constexpr, KC: tl.constexpr, KS: tl.constexpr, STAGES: tl.constexpr,
    TILE: tl.constexpr, L3: tl.constexpr, M2: tl.constexpr, CPT: tl.constexpr, CP2: tl.constexpr,
    CP3: tl.constexpr, CPV: tl.constexpr, CPG: tl.constexpr, SMEM: tl.constexpr, SMEM_CHUNK: tl.constexpr,
    ROWS1: tl.constexpr, PRE: tl.constexpr, SMEM_PRE: tl.constexpr, TC: tl.constexpr, NX: tl.constexpr,
    MMA: tl.constexpr, STAGED: tl.constexpr, ROWS: tl.constexpr, LG: tl.constexpr, CWG: tl.constexpr,
    LH: tl.constexpr, CWH: tl.constexpr, SMEM_X: tl.constexpr, PDL: tl.constexpr, PACK: tl.constexpr,
    DIF: tl.constexpr,
):  # fmt: skip
    if PDL:  # a programmatic dependent launch: wait for the kernel before to finish, then let the next one launch
        gl.inline_asm_elementwise("griddepcontrol.wait; griddepcontrol.launch_dependents; // $0", "=r", [],
                                  dtype=gl.int32, is_pure=False, pack=1)  # fmt: skip
    gl.static_assert(DIF == 0 or (STAGED and TC and PRE), "DIF: the staged kernel, tensor cores, two prefetched blocks")
    i_hv = gl.program_id(0)
    i_b = gl.program_id(1)
    i_v = gl.program_id(2)  # small batches split a head's rows over several programs
    i_h = i_hv // (HV // H)
    NC: tl.constexpr = K // KC
    EPI: tl.constexpr = gl.SliceLayout(2, L3)
    r0 = i_v * BVP
    mb = META + i_b * META_ROW  # staged: the row the staging kernel placed here (it orders the requests)
    if STAGED:
        slot = gl.load(mb)
        bos = gl.load(mb + 1)
        T = gl.load(mb + 2)
    else:  # one launch: this program's request, straight from the batch and its cursors (no META launch)
        slot = gl.load(slots + i_b)
        bos = gl.load(cu_seqlens + i_b)
        T = gl.load(cu_seqlens + i_b + 1) - bos
    if STAGED:  # (one launch: built where they are used, so that they do not stay live through its prologue)
        tok, rows_e, live_e, p_o = _epilogue_index(o, bos, T, r0, i_hv, HV, V, BT, BVP, EPI)

    chunks = gl.allocate_shared_memory(gl.float32, [STAGES, BVP, KC], SMEM_CHUNK)
    if PACK:  # staged: the stream's small buffers live in the rows of a folding row's keys (its fold is over first)
        us = gl.allocate_shared_memory(ring_u.dtype.element_ty, [L, BVP], SMEM)  # history update vectors
        keys = gl.allocate_shared_memory(gl.float32, [L, K], SMEM)
        xs, cs, vw, a_s, pt_s, gb_s, fold_g, fold_b = _packed_views(keys, v.dtype.element_ty, K, L, BT, BVP, NX,
                                                                     SMEM, SMEM_X)  # fmt: skip
        gbv = gb_s
    else:
        xs = gl.allocate_shared_memory(gl.float32, [NX, K], SMEM_X)  # window vectors (rows past 2BT: MMA padding)
        us = gl.allocate_shared_memory(ring_u.dtype.element_ty, [L, BVP], SMEM)  # history update vectors
        cs = gl.allocate_shared_memory(gl.float32, [L, 2 * BT], SMEM)  # weighted history dots
        vw = gl.allocate_shared_memory(v.dtype.element_ty, [BT, BVP], SMEM)  # the window's values
        if STAGED:
            a_s = gl.allocate_shared_memory(gl.float32, [BT, BT], SMEM)  # A[s, r]
            pt_s = gl.allocate_shared_memory(gl.float32, [BT, BT], SMEM)  # P[s, r] stored as [r, s]
            gb_s = gl.allocate_shared_memory(gl.float32, [4, BT], SMEM)  # e^G_s, beta_s, e^Gt, -
            gbv = gb_s
        else:  # the same, A | P^T side by side and the decays in columns < BT (_window_matrices)
            ap_s = gl.allocate_shared_memory(gl.float32, [BT, 2 * BT], SMEM)
            gb_s = gl.allocate_shared_memory(gl.float32, [4, 2 * BT], SMEM)
            a_s = ap_s.slice(0, BT, dim=1)
            pt_s = ap_s.slice(BT, BT, dim=1)
            gbv = gb_s.slice(0, BT, dim=1)
        keys = gl.allocate_shared_memory(gl.float32, [L, K], SMEM)  # a folding row's history keys (one launch: any)
    if DIF >= 2 and PACK:  # noqa: SIM108  (a constexpr branch) the window vectors of a program that folds, early
        xf = gl.allocate_shared_memory(gl.float32, [NX, K], SMEM_X)
    else:
        xf = xs
    if DIF == 3 and PACK:  # the window's values and matrices, copied before a fold: buffers of their own
        vw = gl.allocate_shared_memory(v.dtype.element_ty, [BT, BVP], SMEM)
        a_s = gl.allocate_shared_memory(gl.float32, [BT, BT], SMEM)
        pt_s = gl.allocate_shared_memory(gl.float32, [BT, BT], SMEM)
        gb_s = gl.allocate_shared_memory(gl.float32, [4, BT], SMEM)
        gbv = gb_s
    if ring_u.dtype.element_ty.primitive_bitwidth >= v.dtype.element_ty.primitive_bitwidth:
        fold_v = us._reinterpret(v.dtype.element_ty, [L, BVP], SMEM)  # ... and its values (folded before us fills)
    else:
        fold_v = gl.allocate_shared_memory(v.dtype.element_ty, [L, BVP], SMEM)
    if not PACK:
        fold_g = gl.allocate_shared_memory(gl.float32, [L, 1], SMEM)  # ... its gates
        fold_b = gl.allocate_shared_memory(gl.float32, [L, 1], SMEM)  # ... and its betas

    if slot < 0:
        if not STAGED:
            tok, rows_e, live_e, p_o = _epilogue_index(o, bos, T, r0, i_hv, HV, V, BT, BVP, EPI)
        gl.store(p_o, gl.zeros([BVP, BT], gl.float32, layout=EPI).to(o.dtype.element_ty), mask=live_e)
    else:
        if STAGED:
            wp = gl.load(mb + 3)
            bs = gl.load(mb + 4)
            fl = gl.load(mb + 5)
            req = gl.load(mb + 7).to(gl.int64)  # the request this program's META row describes
        else:
            wp = gl.load(c_wp + slot)
            bs = gl.load(c_base + slot)
            fl = gl.load(c_flush + slot)
            req = i_b.to(gl.int64)
            if (i_hv == 0) & (i_v == 0):
                gl.store(c_pending + slot, T)  # the window ring_commit will decide on
        s64 = slot.to(gl.int64)
        ckpt = checkpoint + (s64 * HV + i_hv) * V * K
        rv = ring_v + (s64 * HV + i_hv) * L * V
        ru = ring_u + (s64 * HV + i_hv) * L * V
        vh = req * HV + i_hv
        rk = ring_k + (s64 * H + i_h) * L * K
        rg = ring_g + (s64 * HV + i_hv) * L
        rb = ring_beta + (s64 * HV + i_hv) * L
        if DIF == 3:  # nothing of the window left to wait for after a fold (verify_dots._copy_window)
            _copy_window(vw, a_s, pt_s, gb_s, v, GA, GB, req * HV + i_hv, bos, T, r0, i_hv, HV, V, BT, BVP, CPV, M2)
        dif = fl != 0  # DIF: whether this program folded here and took its window products with the fold (below)
        if fl != 0:  # 1. fold (once per epoch), then an empty history
            if STAGED:  # noqa: SIM108  (a constexpr branch: only one load is compiled)
                ep = gl.load(mb + 6)
            else:
                ep = gl.load(c_epoch + slot)
            marks = ring_folded + (s64 * HV + i_hv) * (V // MARK)
            dif = _fold_head(ckpt, rk, rv, rg, rb, marks, ep, wp, bs, r0, keys, fold_v, fold_g, fold_b, chunks, xf,
                             _x_rows(X, req, i_h, H, K, BT, CP2), BVP, BV, K, V, L, TILE, CP2, CPV, CPG, ROWS1, PRE,
                             SMEM_PRE, DIF, 2 * BT, NX, MMA, SMEM, PACK)  # fmt: skip
            if PACK:  # a head folded already (a retry) left its copies into the keys' rows in flight
                async_copy.wait_group(0)
            gl.thread_barrier()  # the folded rows are visible to every thread of the program
        n_hist = gl.where(fl != 0, 0, wp)
        if DIF:  # a program that folded here streams no checkpoint: its products are in the chunk buffer
            stream = dif == 0
        else:
            stream: gl.constexpr = True

        # 2. Copies: the first chunk with the step's vectors (group 0), then one group per further chunk.
        c_rows = gl.arange(0, BVP, layout=gl.SliceLayout(1, CPT))
        c_cols = gl.arange(0, KC, layout=gl.SliceLayout(0, CPT))
        c_ptr = ckpt + gl.expand_dims(r0 + c_rows, 1) * K + gl.expand_dims(c_cols, 0)
        if not STAGED:  # the history's keys alone first: their dots need no checkpoint
            jk = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CP2)), 1)
            kk = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, CP2)), 0)
            p_keys = rk + ((bs + jk) & (L - 1)) * K + kk
            async_copy.async_copy_global_to_shared(keys, p_keys, mask=(jk < n_hist) & (kk < K))
            async_copy.commit_group()
        if stream:
            async_copy.async_copy_global_to_shared(chunks.index(0), c_ptr)
            if STAGED:
                async_copy.async_copy_global_to_shared(xs.slice(0, 2 * BT, dim=0), _x_rows(X, req, i_h, H, K, BT, CP2))
        j2 = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CPV)), 1)  # [L, 1]
        r2 = gl.expand_dims(gl.arange(0, BVP, layout=gl.SliceLayout(0, CPV)), 0) + r0  # [1, BVP]
        if stream:  # (a program that folded here has no history to read)
            async_copy.async_copy_global_to_shared(us, ru + ((bs + j2) & (L - 1)) * V + r2, mask=j2 < n_hist)
            if STAGED:
                jc = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CP3)), 1)
                c2 = gl.expand_dims(gl.arange(0, 2 * BT, layout=gl.SliceLayout(0, CP3)), 0)
                p_cw = CW + vh * (L * 2 * BT) + jc * (2 * BT) + c2
                async_copy.async_copy_global_to_shared(cs, p_cw, mask=jc < n_hist)
        if DIF != 3:
            v_t = gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(1, CPV)), 1)  # [BT, 1]
            v_tok = bos.to(gl.int64) + gl.where(v_t < T, v_t, 0)
            async_copy.async_copy_global_to_shared(vw, v + (v_tok * HV + i_hv) * V + r2, mask=v_t < T)
        async_copy.commit_group()
        for st in gl.static_range(1, STAGES):
            if stream:
                async_copy.async_copy_global_to_shared(chunks.index(st), c_ptr + st * KC)
            async_copy.commit_group()
        if STAGED:
            if DIF != 3:
                i0 = gl.arange(0, BT, layout=gl.SliceLayout(1, M2))
                i1 = gl.arange(0, BT, layout=gl.SliceLayout(0, M2))
                p_ga = GA + vh * (2 * BT * BT) + gl.expand_dims(i0, 1) * BT + gl.expand_dims(i1, 0)
                a_s.store(gl.load(p_ga))
                pt_s.store(gl.load(p_ga + BT * BT))
                i4 = gl.arange(0, 4, layout=gl.SliceLayout(1, M2))
                gb_s.store(gl.load(GB + vh * (4 * BT) + gl.expand_dims(i4, 1) * BT + gl.expand_dims(i1, 0)))
        else:
            _window_terms(q, k, a, b, A_log, dt_bias, scale, bos, T, wp, bs, n_hist, i_h, i_hv, i_v, rk, rg, rb, xs,
                          keys, cs, ap_s, gb_s, H, HV, K, L, BT, STAGES, ROWS, LG, CWG, LH, CWH)  # fmt: skip

        # S0 x for the window vectors, a chunk of K at a time: on tensor cores (three TF32 products of hi/lo parts,
        # fp32-accurate) or as in-thread FMA rows.
        if TC:
            DA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=1)
            DB: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=1)
            acc_s = chunks._reinterpret(gl.float32, [BVP, NX], SMEM)  # the products, once the chunks are idle
        if stream:
            if TC:
                acc = gl.zeros([BVP, NX], gl.float32, layout=MMA)
            else:
                acc_k = gl.zeros([BVP, BT], gl.float32, layout=EPI)
                acc_q = gl.zeros([BVP, BT], gl.float32, layout=EPI)
            for c in gl.static_range(NC):
                async_copy.wait_group(STAGES - 1)
                gl.thread_barrier()
                buf = chunks.index(c % STAGES)
                if TC:
                    acc = _tc_products(acc, buf, xs, c * KC, KC, DA, DB)
                else:
                    for ks in gl.static_range(0, KC, KS):
                        h = gl.expand_dims(buf.slice(ks, KS, dim=1).load(gl.SliceLayout(1, L3)), 1)  # [BVP, 1, KS]
                        xk = xs.slice(0, BT, dim=0).slice(c * KC + ks, KS, dim=1).load(gl.SliceLayout(0, L3))
                        xq = xs.slice(BT, BT, dim=0).slice(c * KC + ks, KS, dim=1).load(gl.SliceLayout(0, L3))
                        acc_k += gl.sum(h * gl.expand_dims(xk, 0), axis=2)
                        acc_q += gl.sum(h * gl.expand_dims(xq, 0), axis=2)
                gl.thread_barrier()  # every warp is done with this stage: refill it
                if c + STAGES < NC:
                    async_copy.async_copy_global_to_shared(chunks.index(c % STAGES), c_ptr + (c + STAGES) * KC)
                async_copy.commit_group()
            if TC:  # to the window math's layout (a row per thread) through the (now idle) chunk buffer
                acc_s.store(acc)
        else:  # DIF, folded here: the products are in acc_s (verify_dots._fold_dots); the window's values land
            async_copy.wait_group(0)
        if TC:
            gl.thread_barrier()
            acc_k = acc_s.slice(0, BT, dim=1).load(EPI)
            acc_q = acc_s.slice(BT, BT, dim=1).load(EPI)

        # 3. The history term, then the window.
        eh = gbv.slice(2, 1, dim=0).load(EPI)  # [1, BT]: e^Gt
        dk = acc_k * eh
        dq = acc_q * eh
        us_rows = us._reinterpret(ring_u.dtype.element_ty, [L, BVP], ROWS1)  # indexable by record
        cs_rows = cs._reinterpret(gl.float32, [L, 2 * BT], ROWS1)
        for j in range(0, n_hist):  # (cs is written only where n_hist > 0)
            u = gl.expand_dims(us_rows.index(j).load(gl.SliceLayout(1, EPI)).to(gl.float32), 1)  # [BVP, 1]
            cj = cs_rows.index(j)
            dk = dk + u * gl.expand_dims(cj.slice(0, BT).load(gl.SliceLayout(0, EPI)), 0)
            dq = dq + u * gl.expand_dims(cj.slice(BT, BT).load(gl.SliceLayout(0, EPI)), 0)
        eg = gbv.slice(0, 1, dim=0).load(EPI)
        beta = gbv.slice(1, 1, dim=0).load(EPI)
        v_raw = vw.permute((1, 0)).load(EPI)  # [BVP, BT]
        if not STAGED:
            tok, rows_e, live_e, p_o = _epilogue_index(o, bos, T, r0, i_hv, HV, V, BT, BVP, EPI)
        U, out = _window_outputs(dk, dq, v_raw, live_e, tok, a_s, pt_s, eg, beta, BT, EPI)
        gl.store(p_o, out.to(o.dtype.element_ty), mask=live_e)
        p_rec = gl.expand_dims((bs + wp + tok) & (L - 1), 0) * V + gl.expand_dims(rows_e, 1)
        gl.store(ru + p_rec, U.to(ring_u.dtype.element_ty), mask=live_e)
        gl.store(rv + p_rec, v_raw, mask=live_e)
