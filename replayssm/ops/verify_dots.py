"""The window's ``S x`` products on tensor cores, for the main kernel's stream and for a folding program's own blocks.

``_tc_products`` is the one piece of code that multiplies a state by the step's window vectors on tensor cores:
three TF32 ``mma.sync`` products of hi/lo parts (``_tf32_parts``, fp32-accurate), 16 columns of K at a time in
increasing order. The main kernel's stream (``verify_kernel``) calls it on each checkpoint chunk; a folding program
with ``DIF`` (dots in the fold, ``verify_launch.dots_in_fold``) calls it on its just-folded blocks (``_fold_dots``)
and then skips the stream of its checkpoint. A row's products are then the same instructions on the same values
whichever way its state reached shared memory, so a retried verify (which finds the rows folded already and streams
them) gives the first attempt's outputs bit for bit (``tests/ops/test_fold_once.py``).

Why (bench/NOTES.md, twenty-fifth session): a folding program of a pure-flush step used to write its folded blocks
and then stream them back from L2 through the chunk pipeline, the copies' latency exposed after a fold that already
fills the SM's issue slots (the sixteenth session's ncu: most of the post-fold stall samples on that stream). Here
the first block comes back from L2 while the second folds (the chunk buffer is free then) and the second goes
through shared memory from its registers, so no copy waits after the fold but the window vectors' (one 4 KiB row set
from L2).
"""

from __future__ import annotations

import triton.language as tl  # noqa: F401  (the interpreter looks for it in a kernel's globals)

from ._gluon import async_copy, gl, jit, mma_v2


@jit
def _tf32_parts(x):
    """(hi, lo) of fp32 x: hi keeps the 19 bits a TF32 tensor-core product reads, lo = x - hi (exact); hi*y_hi +
    hi*y_lo + lo*y_hi is the fp32 product up to ~2^-21 relative."""
    hi = (x.to(gl.int32, bitcast=True) & -8192).to(gl.float32, bitcast=True)
    return hi, x - hi


@jit
def _tc_products(acc, a_buf, xs, X0: tl.constexpr, KW: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr):
    """acc + a_buf[:, 0:KW] @ xs[:, X0:X0 + KW]^T: a [rows, KW] fp32 state slice and [NX, K] window vectors in
    shared memory, acc [rows, NX] in the MMA layout; 16 columns at a time, three TF32 products each."""
    for ks in gl.static_range(0, KW, 16):
        a_hi, a_lo = _tf32_parts(a_buf.slice(ks, 16, dim=1).load(DA))  # [rows, 16]
        b_hi, b_lo = _tf32_parts(xs.slice(X0 + ks, 16, dim=1).permute((1, 0)).load(DB))  # [16, NX]
        acc = mma_v2(a_lo, b_hi, acc, input_precision="tf32")
        acc = mma_v2(a_hi, b_lo, acc, input_precision="tf32")
        acc = mma_v2(a_hi, b_hi, acc, input_precision="tf32")
    return acc


@jit
def _fold_dots(h, pre, xs, p_x, chunks, BV: tl.constexpr, BVP: tl.constexpr, K: tl.constexpr, X2: tl.constexpr,
               NX: tl.constexpr, MMA: tl.constexpr, SMEM: tl.constexpr, COPY_X: tl.constexpr):  # fmt: skip
    """A folding program's window products (``DIF``), after its last block's fold: ``h`` is that block (registers,
    ``TILE``), ``pre`` holds the block before it (copied back from L2 while ``h`` folded; two blocks a program).
    With ``COPY_X`` the window vectors are copied into ``xs`` first (``p_x``: the staged ``X``, ``X2`` rows; ``xs``
    is then a view of the history keys' rows, ``PACK``, free once every warp is done folding); without, they came
    with the history's copies. Leaves the [BVP, NX] products in the chunk
    buffer (``chunks``, as the stream leaves them) and every thread past its last read of ``pre``."""
    DA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=1)
    DB: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=1)
    if COPY_X:
        gl.thread_barrier()  # every warp is done with the history keys (xs is their rows)
        async_copy.async_copy_global_to_shared(xs.slice(0, X2, dim=0), p_x)
        async_copy.commit_group()
    async_copy.wait_group(0)  # the window vectors and the block before this one
    gl.thread_barrier()
    acc0 = _tc_products(gl.zeros([BV, NX], gl.float32, layout=MMA), pre, xs, 0, K, DA, DB)
    gl.thread_barrier()  # every warp is done reading that block: the buffer takes this one
    pre.store(h)
    gl.thread_barrier()
    acc1 = _tc_products(gl.zeros([BV, NX], gl.float32, layout=MMA), pre, xs, 0, K, DA, DB)
    gl.thread_barrier()  # the products overlay the buffer
    acc_s = chunks._reinterpret(gl.float32, [BVP, NX], SMEM)
    acc_s.slice(0, BV, dim=0).store(acc0)
    acc_s.slice(BV, BV, dim=0).store(acc1)


@jit
def _copy_window(vw, a_s, pt_s, gb_s, v, GA, GB, vh, bos, T, r0, i_hv, HV: tl.constexpr, V: tl.constexpr,
                 BT: tl.constexpr, BVP: tl.constexpr, CPV: tl.constexpr, M2: tl.constexpr):  # fmt: skip
    """``DIF`` 3: the window's values (``vw``) and staged matrices (``a_s``, ``pt_s``, ``gb_s``: buffers of their own,
    not the history keys' rows) copied in a group of their own before anything else, so that a folding program finds
    them landed when its fold is over (the fold's first wait covers this group; a streaming row's first chunk wait
    does too). Value head row ``vh`` of ``GA`` / ``GB``."""
    r2 = gl.expand_dims(gl.arange(0, BVP, layout=gl.SliceLayout(0, CPV)), 0) + r0  # [1, BVP]
    v_t = gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(1, CPV)), 1)  # [BT, 1]
    v_tok = bos.to(gl.int64) + gl.where(v_t < T, v_t, 0)
    async_copy.async_copy_global_to_shared(vw, v + (v_tok * HV + i_hv) * V + r2, mask=v_t < T)
    i0 = gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(1, M2)), 1)
    i1 = gl.expand_dims(gl.arange(0, BT, layout=gl.SliceLayout(0, M2)), 0)
    p_ga = GA + vh * (2 * BT * BT) + i0 * BT + i1
    async_copy.async_copy_global_to_shared(a_s, p_ga)
    async_copy.async_copy_global_to_shared(pt_s, p_ga + BT * BT)
    i4 = gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(1, M2)), 1)
    async_copy.async_copy_global_to_shared(gb_s, GB + vh * (4 * BT) + i4 * BT + i1)
    async_copy.commit_group()
