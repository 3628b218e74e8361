"""Second launch of ``gdn_replay_verify``: fold, window outputs and new records, one value head per program.

A program owns ``BVP`` rows of one value head of one request (the whole head unless the batch is too
small to fill the GPU). It reads its row of ``META`` (staged by ``verify_prep``) in one round trip and
then never waits on a dependent load again:

1. a flushing row first folds its history into the checkpoint, block by block on the pinned
   ``tile_layout`` with ``_update`` (bitwise the baseline), writes the blocks back and marks them
   (a retry of the step finds the marks and does not fold again); it then runs step 2 on the folded
   state with an empty history;
2. the checkpoint streams through shared memory in ``[BVP, KC]`` column chunks with ``cp.async``,
   ``STAGES`` chunks in flight, the step's vectors (window vectors, weighted history dots, history
   update vectors, the window's values) arriving with the first. The ``S0 x`` dots of the 2T window
   vectors: with ``TC``, three TF32 tensor-core products of hi/lo parts (``_tf32_parts``, fp32-accurate),
   then through shared memory to the ``[rows, T]`` layout the window math uses (a row per thread);
   without, each thread owns whole rows and accumulates them in registers over the chunks (fp32 FMA, no
   cross-lane reduction), already in that layout;
3. ``S_prev x = e^Gt S0 x + sum_j u_j CW_j``, then per row, in-thread over the window:
   ``R = beta (v - e^G S_prev k^)``, ``U = (I + A)^-1 R`` by forward substitution, ``o = e^G S_prev q^
   + P U``; the window's ``u`` and raw ``v`` appended to the ring.

Bytes: the checkpoint is read once (64 KiB per head at K = V = 128); a flushing row reads and writes it
once more for the fold (the re-read in step 2 mostly hits L2).
"""

from __future__ import annotations

import triton.language as tl  # noqa: F401  (the interpreter looks for it in a kernel's globals)

from ._gluon import async_copy, gl, jit, mma_v2
from ._pinned import MARK, _dot_rows, _update
from .verify_prep import META_ROW


@jit
def _stage_fold(rk, rv, rg, rb, n, start, r0, ks, vs, gs, bs_, BVP: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                L: tl.constexpr, CP2: tl.constexpr, CPV: tl.constexpr, CPG: tl.constexpr):  # fmt: skip
    """Issue (no commit) the copies of the ``n`` history records a folding program replays, in logical order:
    the keys (``ks``), this program's rows of the values (``vs``), every record's gate and beta."""
    jk = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CP2)), 1)
    kc = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, CP2)), 0)
    async_copy.async_copy_global_to_shared(ks, rk + ((start + jk) & (L - 1)) * K + kc, mask=(jk < n) & (kc < K))
    jv = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CPV)), 1)
    rc = gl.expand_dims(gl.arange(0, BVP, layout=gl.SliceLayout(0, CPV)), 0)
    async_copy.async_copy_global_to_shared(vs, rv + ((start + jv) & (L - 1)) * V + r0 + rc, mask=(jv < n) & (rc < BVP))
    jg = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CPG)), 1)  # [L, 1]
    pg = (start + jg) & (L - 1)
    async_copy.async_copy_global_to_shared(gs, rg + pg, mask=jg < n)
    async_copy.async_copy_global_to_shared(bs_, rb + pg, mask=jg < n)


@jit
def _block_dots_tc(blk, xs, BV: tl.constexpr, K: tl.constexpr, NX: tl.constexpr, MMA: tl.constexpr):
    """``S x`` of the window vectors for one [BV, K] state block in shared memory, [BV, NX] in ``MMA``: the same
    TF32 x 3 tensor-core products, in the same K order, as the streaming path (``_stream_dots``), so the same
    bits per row."""
    DA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=1)
    DB: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=1)
    acc = gl.zeros([BV, NX], gl.float32, layout=MMA)
    for kk in gl.static_range(0, K, 16):
        a_hi, a_lo = _tf32_parts(blk.slice(kk, 16, dim=1).load(DA))
        b_hi, b_lo = _tf32_parts(xs.slice(kk, 16, dim=1).permute((1, 0)).load(DB))
        acc = mma_v2(a_lo, b_hi, acc, input_precision="tf32")
        acc = mma_v2(a_hi, b_lo, acc, input_precision="tf32")
        acc = mma_v2(a_hi, b_hi, acc, input_precision="tf32")
    return acc


@jit
def _block_dots_regs(h, xs, NX: tl.constexpr, TILE: tl.constexpr):
    """``S x`` of the window vectors for one block held in the pinned tile's registers (fp32 FMA, a butterfly over
    the K-lanes per vector), [BV, NX] in ``TILE``: for windows too short for the tensor cores, whose 2T vectors
    make this cheaper than a round trip of the block through shared memory."""
    col = gl.expand_dims(gl.arange(0, NX, layout=gl.SliceLayout(0, TILE)), 0)  # [1, NX]
    acc = gl.zeros([h.shape[0], NX], gl.float32, layout=TILE)
    for x in gl.static_range(NX):
        hb, xb = gl.broadcast(h, xs.slice(x, 1, dim=0).load(TILE))  # [BV, K]
        acc = gl.where(col == x, gl.expand_dims(_dot_rows(hb, xb), 1), acc)
    return acc


@jit
def _flush_head(ckpt, marks, ep, todo, n, r0, chunks, xs, ks, vs, gs, bs_, BVP: tl.constexpr, BV: tl.constexpr,
                K: tl.constexpr, L: tl.constexpr, NX: tl.constexpr, TC: tl.constexpr, TILE: tl.constexpr,
                CP2: tl.constexpr, ROWS1: tl.constexpr, SMEM: tl.constexpr, SMEM_BLK: tl.constexpr,
                MMA: tl.constexpr):  # fmt: skip
    """A flushing program's rows ``r0 .. r0 + BVP`` (one or two ``BV``-row blocks of the pinned tile): fold the
    ``n`` staged records into each block unless ``todo`` is 0 (folded already in this epoch: a retried step),
    write it back, mark it, and take the window dots from the folded block, so the folded state never streams
    back through the chunk pipeline. Tensor cores: from the block in shared memory (the chunk buffer); with two
    blocks, block 1's checkpoint arrives while block 0 folds and block 0's folded rows come back from L2 while
    block 1 folds. FMA: straight from the registers. Leaves the dots, [BVP, NX], at the start of the chunk
    buffer. The staging copies (``_stage_fold``) and the window vectors ``xs`` are the last group committed
    before the call."""
    NB: tl.constexpr = BVP // BV
    rows = r0 + gl.arange(0, BV, layout=gl.SliceLayout(1, TILE))
    cols = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, TILE)), 0)
    p_h = ckpt + gl.expand_dims(rows, 1) * K + cols  # block 0 in the tile's registers (block b: + b * BV * K)
    br = gl.expand_dims(gl.arange(0, BV, layout=gl.SliceLayout(1, CP2)), 1)
    bc = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, CP2)), 0)
    p_blk = ckpt + (r0 + br) * K + bc  # block 0's copy pointers
    blk = chunks._reinterpret(gl.float32, [BV, K], SMEM_BLK)  # one state block in the chunk buffer
    m = gl.arange(0, BV // MARK, layout=gl.SliceLayout(1, TILE))
    mark_ep = gl.full([BV // MARK], 0, gl.int32, layout=gl.SliceLayout(1, TILE)) + ep
    ks_rows = ks._reinterpret(gl.float32, [L, K], ROWS1)
    vs_rows = vs._reinterpret(vs.dtype, [L, BVP], ROWS1)
    gs_rows = gs._reinterpret(gl.float32, [L, 1], ROWS1)
    bs_rows = bs_._reinterpret(gl.float32, [L, 1], ROWS1)
    if todo != 0:
        h = gl.load(p_h)
        if NB > 1:
            async_copy.async_copy_global_to_shared(blk, p_blk + BV * K)  # block 1
            async_copy.commit_group()
            async_copy.wait_group(1)
        else:
            async_copy.wait_group(0)
        gl.thread_barrier()
        h = _fold_staged(h, ks_rows, vs_rows, gs_rows, bs_rows, n, 0, BV, TILE)
        gl.store(p_h, h)
        gl.store(marks + r0 // MARK + m, mark_ep)
        if TC:
            if NB > 1:
                async_copy.wait_group(0)
                gl.thread_barrier()
                h1 = blk.load(TILE)
                gl.thread_barrier()  # every warp holds its rows of block 1, and block 0's folded rows are stored
                async_copy.async_copy_global_to_shared(blk, p_blk)  # block 0, folded, back while block 1 folds
                async_copy.commit_group()
                h1 = _fold_staged(h1, ks_rows, vs_rows, gs_rows, bs_rows, n, BV, BV, TILE)
                gl.store(p_h + BV * K, h1)
                gl.store(marks + (r0 + BV) // MARK + m, mark_ep)
                async_copy.wait_group(0)
                gl.thread_barrier()
                d0 = _block_dots_tc(blk, xs, BV, K, NX, MMA)
                gl.thread_barrier()
                blk.store(h1)
                gl.thread_barrier()
                d1 = _block_dots_tc(blk, xs, BV, K, NX, MMA)
            else:
                blk.store(h)
                gl.thread_barrier()
                d0 = _block_dots_tc(blk, xs, BV, K, NX, MMA)
                d1 = d0
        else:
            d0 = _block_dots_regs(h, xs, NX, TILE)
            d1 = d0
            if NB > 1:
                async_copy.wait_group(0)
                gl.thread_barrier()
                h1 = _fold_staged(blk.load(TILE), ks_rows, vs_rows, gs_rows, bs_rows, n, BV, BV, TILE)
                gl.store(p_h + BV * K, h1)
                gl.store(marks + (r0 + BV) // MARK + m, mark_ep)
                d1 = _block_dots_regs(h1, xs, NX, TILE)
    else:  # folded already by this step (a retry): the dots of the folded blocks
        if TC:
            async_copy.async_copy_global_to_shared(blk, p_blk)
            async_copy.commit_group()
            async_copy.wait_group(0)
            gl.thread_barrier()
            d0 = _block_dots_tc(blk, xs, BV, K, NX, MMA)
            d1 = d0
            if NB > 1:
                gl.thread_barrier()
                async_copy.async_copy_global_to_shared(blk, p_blk + BV * K)
                async_copy.commit_group()
                async_copy.wait_group(0)
                gl.thread_barrier()
                d1 = _block_dots_tc(blk, xs, BV, K, NX, MMA)
        else:
            async_copy.wait_group(0)
            gl.thread_barrier()
            d0 = _block_dots_regs(gl.load(p_h), xs, NX, TILE)
            d1 = d0
            if NB > 1:
                gl.thread_barrier()  # one block's registers at a time
                d1 = _block_dots_regs(gl.load(p_h + BV * K), xs, NX, TILE)
    gl.thread_barrier()  # every warp is done with the chunk buffer: it takes the dots
    acc_s = chunks._reinterpret(gl.float32, [BVP, NX], SMEM)
    acc_s.slice(0, BV, dim=0).store(d0)
    if NB > 1:
        acc_s.slice(BV, BV, dim=0).store(d1)
    gl.thread_barrier()


@jit
def _fold_staged(h, ks, vs, gs, bs, n, row0: tl.constexpr, BV: tl.constexpr, TILE: tl.constexpr):
    """``_fold_records`` with the keys, values, gates and betas read from shared memory (records in logical
    order); the same pinned ``_update`` on the same data, so bitwise the same states."""
    ONE: tl.constexpr = gl.SliceLayout(1, TILE)
    for j in range(0, n):
        g = gl.sum(gs.index(j).load(ONE), axis=0)
        beta = gl.sum(bs.index(j).load(ONE), axis=0)
        khat = gl.expand_dims(ks.index(j).load(gl.SliceLayout(0, TILE)), 0)
        v = vs.index(j).slice(row0, BV).load(gl.SliceLayout(1, TILE)).to(gl.float32)
        h = _update(h, khat, v, gl.exp(g), beta)
    return h


@jit
def _tf32_parts(x):
    """(hi, lo) of fp32 x: hi keeps the 19 bits a TF32 tensor-core product reads, lo = x - hi (exact); hi*y_hi +
    hi*y_lo + lo*y_hi is the fp32 product up to ~2^-21 relative."""
    hi = (x.to(gl.int32, bitcast=True) & -8192).to(gl.float32, bitcast=True)
    return hi, x - hi


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
def _stage_window(xs, vw, X, head, v, bos, T, i_hv, r0, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                  BT: tl.constexpr, BVP: tl.constexpr, CP2: tl.constexpr, CPV: tl.constexpr):  # fmt: skip
    """Issue (no commit) the copies of the window vectors staged by ``verify_prep`` and the window's values."""
    x_r = gl.arange(0, 2 * BT, layout=gl.SliceLayout(1, CP2))
    x_c = gl.arange(0, K, layout=gl.SliceLayout(0, CP2))
    p_x = X + head * (2 * BT * K) + gl.expand_dims(x_r, 1) * K + gl.expand_dims(x_c, 0)
    async_copy.async_copy_global_to_shared(xs.slice(0, 2 * BT, dim=0), p_x)
    r2 = gl.expand_dims(gl.arange(0, BVP, layout=gl.SliceLayout(0, CPV)), 0) + r0  # [1, BVP]
    v_t = gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(1, CPV)), 1)  # [BT, 1]
    v_tok = bos.to(gl.int64) + gl.where(v_t < T, v_t, 0)
    async_copy.async_copy_global_to_shared(vw, v + (v_tok * HV + i_hv) * V + r2, mask=v_t < T)


@jit
def _stage_gates(a_s, pt_s, gb_s, GA, GB, vh, BT: tl.constexpr, M2: tl.constexpr):
    """Issue (no commit) the copies of the window's [T, T] matrices and gates staged by ``verify_prep``."""
    i0 = gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(1, M2)), 1)
    i1 = gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(0, M2)), 0)
    p_ga = GA + vh * (2 * BT * BT) + i0 * BT + i1
    async_copy.async_copy_global_to_shared(a_s, p_ga)
    async_copy.async_copy_global_to_shared(pt_s, p_ga + BT * BT)
    i4 = gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(1, M2)), 1)
    async_copy.async_copy_global_to_shared(gb_s, GB + vh * (4 * BT) + i4 * BT + i1)


@jit
def _stream_dots(chunks, xs, BVP: tl.constexpr, K: tl.constexpr, KC: tl.constexpr, KS: tl.constexpr,
                 BT: tl.constexpr, NX: tl.constexpr, STAGES: tl.constexpr, TC: tl.constexpr, MMA: tl.constexpr,
                 L3: tl.constexpr, SMEM: tl.constexpr, c_ptr):  # fmt: skip
    """``S0 x`` of the window vectors, streaming the checkpoint through ``chunks`` a [BVP, KC] column chunk at a
    time (``STAGES`` in flight; the first ``STAGES`` already issued, one commit group each): on tensor cores
    (three TF32 products of hi/lo parts, fp32-accurate) or as in-thread FMA rows. Returns the (k, q) dots [BVP,
    BT] in the window math's layout (a row per thread)."""
    NC: tl.constexpr = K // KC
    EPI: tl.constexpr = gl.SliceLayout(2, L3)
    if TC:
        DA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=1)
        DB: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=1)
        acc = gl.zeros([BVP, NX], gl.float32, layout=MMA)
    else:
        acc_k = gl.zeros([BVP, BT], gl.float32, layout=EPI)
        acc_q = gl.zeros([BVP, BT], gl.float32, layout=EPI)
    for c in gl.static_range(NC):
        async_copy.wait_group(STAGES - 1)
        gl.thread_barrier()
        buf = chunks.index(c % STAGES)
        if TC:
            for ks in gl.static_range(0, KC, 16):
                a_hi, a_lo = _tf32_parts(buf.slice(ks, 16, dim=1).load(DA))  # [BVP, 16]
                b_hi, b_lo = _tf32_parts(xs.slice(c * KC + ks, 16, dim=1).permute((1, 0)).load(DB))  # [16, NX]
                acc = mma_v2(a_lo, b_hi, acc, input_precision="tf32")
                acc = mma_v2(a_hi, b_lo, acc, input_precision="tf32")
                acc = mma_v2(a_hi, b_hi, acc, input_precision="tf32")
        else:
            for ks in gl.static_range(0, KC, KS):
                h = gl.expand_dims(buf.slice(ks, KS, dim=1).load(gl.SliceLayout(1, L3)), 1)  # [BVP, 1, KS]
                xk = xs.slice(0, BT, dim=0).slice(c * KC + ks, KS, dim=1).load(gl.SliceLayout(0, L3))  # [BT, KS]
                xq = xs.slice(BT, BT, dim=0).slice(c * KC + ks, KS, dim=1).load(gl.SliceLayout(0, L3))
                acc_k += gl.sum(h * gl.expand_dims(xk, 0), axis=2)
                acc_q += gl.sum(h * gl.expand_dims(xq, 0), axis=2)
        gl.thread_barrier()  # every warp is done with this stage: refill it
        if c + STAGES < NC:
            async_copy.async_copy_global_to_shared(chunks.index(c % STAGES), c_ptr + (c + STAGES) * KC)
        async_copy.commit_group()
    if TC:  # to the window math's layout (a row per thread) through the (now idle) chunk buffer
        acc_s = chunks._reinterpret(gl.float32, [BVP, NX], SMEM)
        acc_s.store(acc)
        gl.thread_barrier()
        acc_k = acc_s.slice(0, BT, dim=1).load(EPI)
        acc_q = acc_s.slice(BT, BT, dim=1).load(EPI)
    return acc_k, acc_q


@jit
def _gdn_replay_verify_kernel(
    v, checkpoint, o, ring_k, ring_v, ring_g, ring_beta, ring_u, ring_folded, META, X, GA, GB, CW, FOLD,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, BT: tl.constexpr,
    BV: tl.constexpr, BVP: tl.constexpr, KC: tl.constexpr, KS: tl.constexpr, STAGES: tl.constexpr,
    CHS: tl.constexpr, TILE: tl.constexpr, L3: tl.constexpr, M2: tl.constexpr, CPT: tl.constexpr,
    CP2: tl.constexpr, CP3: tl.constexpr, CPV: tl.constexpr, CPG: tl.constexpr, SMEM: tl.constexpr,
    SMEM_CHUNK: tl.constexpr, ROWS1: tl.constexpr, SMEM_BLK: tl.constexpr, TC: tl.constexpr, NX: tl.constexpr,
    MMA: tl.constexpr,
):  # fmt: skip
    i_hv = gl.program_id(0)
    i_b = gl.program_id(1)
    i_v = gl.program_id(2)  # small batches split a head's rows over several programs
    i_h = i_hv // (HV // H)
    EPI: tl.constexpr = gl.SliceLayout(2, L3)
    r0 = i_v * BVP
    mb = META + i_b * META_ROW
    slot = gl.load(mb)
    bos = gl.load(mb + 1)
    T = gl.load(mb + 2)
    tok = gl.arange(0, BT, layout=gl.SliceLayout(0, EPI))
    tok64 = bos.to(gl.int64) + gl.where(tok < T, tok, 0)  # padding lanes re-read token 0, then get masked
    rows_e = r0 + gl.arange(0, BVP, layout=gl.SliceLayout(1, EPI))
    live_e = gl.expand_dims(rows_e < V, 1) & gl.expand_dims(tok < T, 0)
    p_o = o + (gl.expand_dims(tok64, 0) * HV + i_hv) * V + gl.expand_dims(rows_e, 1)

    chunks = gl.allocate_shared_memory(gl.float32, [CHS, BVP, KC], SMEM_CHUNK)  # >= STAGES; a folding block fits
    xs = gl.allocate_shared_memory(gl.float32, [NX, K], SMEM)  # window vectors (rows past 2BT: MMA padding)
    us = gl.allocate_shared_memory(ring_u.dtype.element_ty, [L, BVP], SMEM)  # history update vectors
    cs = gl.allocate_shared_memory(gl.float32, [L, 2 * BT], SMEM)  # weighted history dots
    vw = gl.allocate_shared_memory(v.dtype.element_ty, [BT, BVP], SMEM)  # the window's values
    a_s = gl.allocate_shared_memory(gl.float32, [BT, BT], SMEM)  # A[s, r]
    pt_s = gl.allocate_shared_memory(gl.float32, [BT, BT], SMEM)  # P[s, r] stored as [r, s]
    gb_s = gl.allocate_shared_memory(gl.float32, [4, BT], SMEM)  # e^G_s, beta_s, e^Gt, -
    fold_k = gl.allocate_shared_memory(gl.float32, [L, K], SMEM)  # a folding row's history keys
    if ring_u.dtype.element_ty.primitive_bitwidth >= v.dtype.element_ty.primitive_bitwidth:
        fold_v = us._reinterpret(v.dtype.element_ty, [L, BVP], SMEM)  # ... and its values (folded before us fills)
    else:
        fold_v = gl.allocate_shared_memory(v.dtype.element_ty, [L, BVP], SMEM)
    fold_g = gl.allocate_shared_memory(gl.float32, [L, 1], SMEM)  # ... its gates
    fold_b = gl.allocate_shared_memory(gl.float32, [L, 1], SMEM)  # ... and its betas

    if slot < 0:
        gl.store(p_o, gl.zeros([BVP, BT], gl.float32, layout=EPI).to(o.dtype.element_ty), mask=live_e)
    else:
        wp = gl.load(mb + 3)
        bs = gl.load(mb + 4)
        fl = gl.load(mb + 5)
        s64 = slot.to(gl.int64)
        ckpt = checkpoint + (s64 * HV + i_hv) * V * K
        rv = ring_v + (s64 * HV + i_hv) * L * V
        ru = ring_u + (s64 * HV + i_hv) * L * V
        vh = i_b.to(gl.int64) * HV + i_hv
        head = i_b.to(gl.int64) * H + i_h
        if fl != 0:  # 1. fold (once per epoch) and the window dots from the folded blocks; an empty history
            todo = gl.load(FOLD + vh)
            ep = gl.load(mb + 6)
            rk = ring_k + (s64 * H + i_h) * L * K
            rg = ring_g + (s64 * HV + i_hv) * L
            rb = ring_beta + (s64 * HV + i_hv) * L
            marks = ring_folded + (s64 * HV + i_hv) * (V // MARK)
            _stage_window(xs, vw, X, head, v, bos, T, i_hv, r0, HV, K, V, BT, BVP, CP2, CPV)
            _stage_gates(a_s, pt_s, gb_s, GA, GB, vh, BT, M2)
            if todo != 0:
                _stage_fold(rk, rv, rg, rb, wp, bs, r0, fold_k, fold_v, fold_g, fold_b, BVP, K, V, L, CP2, CPV, CPG)
            async_copy.commit_group()
            _flush_head(ckpt, marks, ep, todo, wp, r0, chunks, xs, fold_k, fold_v, fold_g, fold_b, BVP, BV, K, L, NX,
                        TC, TILE, CP2, ROWS1, SMEM, SMEM_BLK, MMA)  # fmt: skip
            acc_s = chunks._reinterpret(gl.float32, [BVP, NX], SMEM)
            acc_k = acc_s.slice(0, BT, dim=1).load(EPI)
            acc_q = acc_s.slice(BT, BT, dim=1).load(EPI)
        else:
            # 2. Copies: the first chunk with the step's vectors (group 0), then one group per further chunk.
            c_rows = gl.arange(0, BVP, layout=gl.SliceLayout(1, CPT))
            c_cols = gl.arange(0, KC, layout=gl.SliceLayout(0, CPT))
            c_ptr = ckpt + gl.expand_dims(r0 + c_rows, 1) * K + gl.expand_dims(c_cols, 0)
            async_copy.async_copy_global_to_shared(chunks.index(0), c_ptr)
            _stage_window(xs, vw, X, head, v, bos, T, i_hv, r0, HV, K, V, BT, BVP, CP2, CPV)
            j2 = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CPV)), 1)  # [L, 1]
            r2 = gl.expand_dims(gl.arange(0, BVP, layout=gl.SliceLayout(0, CPV)), 0) + r0  # [1, BVP]
            async_copy.async_copy_global_to_shared(us, ru + ((bs + j2) & (L - 1)) * V + r2, mask=j2 < wp)
            jc = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CP3)), 1)
            c2 = gl.expand_dims(gl.arange(0, 2 * BT, layout=gl.SliceLayout(0, CP3)), 0)
            async_copy.async_copy_global_to_shared(cs, CW + vh * (L * 2 * BT) + jc * (2 * BT) + c2, mask=jc < wp)
            _stage_gates(a_s, pt_s, gb_s, GA, GB, vh, BT, M2)
            async_copy.commit_group()
            for st in gl.static_range(1, STAGES):
                async_copy.async_copy_global_to_shared(chunks.index(st), c_ptr + st * KC)
                async_copy.commit_group()
            acc_k, acc_q = _stream_dots(chunks, xs, BVP, K, KC, KS, BT, NX, STAGES, TC, MMA, L3, SMEM, c_ptr)
        n_hist = gl.where(fl != 0, 0, wp)

        # 3. The history term, then the window.
        eh = gb_s.slice(2, 1, dim=0).load(EPI)  # [1, BT]: e^Gt
        dk = acc_k * eh
        dq = acc_q * eh
        us_rows = us._reinterpret(ring_u.dtype.element_ty, [L, BVP], ROWS1)  # indexable by record
        cs_rows = cs._reinterpret(gl.float32, [L, 2 * BT], ROWS1)
        for j in range(0, n_hist):
            u = gl.expand_dims(us_rows.index(j).load(gl.SliceLayout(1, EPI)).to(gl.float32), 1)  # [BVP, 1]
            cj = cs_rows.index(j)
            dk = dk + u * gl.expand_dims(cj.slice(0, BT).load(gl.SliceLayout(0, EPI)), 0)
            dq = dq + u * gl.expand_dims(cj.slice(BT, BT).load(gl.SliceLayout(0, EPI)), 0)
        eg = gb_s.slice(0, 1, dim=0).load(EPI)
        beta = gb_s.slice(1, 1, dim=0).load(EPI)
        v_raw = vw.permute((1, 0)).load(EPI)  # [BVP, BT]
        U, out = _window_outputs(dk, dq, v_raw, live_e, tok, a_s, pt_s, eg, beta, BT, EPI)
        gl.store(p_o, out.to(o.dtype.element_ty), mask=live_e)
        p_rec = gl.expand_dims((bs + wp + tok) & (L - 1), 0) * V + gl.expand_dims(rows_e, 1)
        gl.store(ru + p_rec, U.to(ring_u.dtype.element_ty), mask=live_e)
        gl.store(rv + p_rec, v_raw, mask=live_e)
