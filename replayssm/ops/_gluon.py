"""Gluon on the GPU, Triton's interpreter on the CPU: ``gl`` and ``jit`` for the pinned-layout kernels.

The kernels that run the recurrent update are written in Gluon (``triton.experimental.gluon``) so that
their register layouts are fixed explicitly: the reduction order of every row's ``sum_K`` is then a
property of the code, not of the compiler's layout choices, and the baseline and the exact fold are
bitwise equal by construction (docs/kernels.md). Gluon kernels do not run in Triton's CPU
interpreter, so when ``TRITON_INTERPRET=1`` is set (before this module is imported) ``gl`` is a
small stand-in that maps each Gluon call used by these kernels onto its ``triton.language``
equivalent, ignores layouts, and emulates shared memory with NumPy. The CPU test-suite therefore
runs the very same kernel source, checking its indexing, masking and protocol logic; only the
layouts (which change speed and rounding order, never the math) are exercised on the GPU alone.
"""

from __future__ import annotations

import types

import numpy as np
import torch
import triton
import triton.language as tl
from triton.experimental import gluon as _gluon
from triton.experimental.gluon import language as _gl

from ._interpreter import INTERPRET


def _unwrap(x):
    """A Python int from a constexpr, an int, or a 0-d interpreter tensor."""
    if isinstance(x, tl.constexpr):
        x = x.value
    if isinstance(x, tl.tensor):
        return int(np.asarray(x.handle.data).reshape(-1)[0])
    return int(x)


class _Shared:
    """NumPy-backed stand-in for a Gluon shared-memory descriptor (interpreter only)."""

    def __init__(self, data: np.ndarray, dtype):
        self.data, self.dtype = data, dtype

    def index(self, i):
        return _Shared(self.data[_unwrap(i)], self.dtype)

    def slice(self, start, length, dim=0):
        idx = [slice(None)] * self.data.ndim
        s = _unwrap(start)
        idx[_unwrap(dim)] = slice(s, s + _unwrap(length))
        return _Shared(self.data[tuple(idx)], self.dtype)

    def _reinterpret(self, dtype, shape, layout):
        shape = [_unwrap(x) for x in shape]
        if not self.data.flags.c_contiguous:
            raise ValueError("_reinterpret of a strided shared-memory view")
        flat = self.data.reshape(-1).view(_np_dtype(dtype))  # the same bytes read as ``dtype``: a view of the start
        return _Shared(flat[: int(np.prod(shape))].reshape(shape), dtype)

    def permute(self, order):
        return _Shared(self.data.transpose([_unwrap(o) for o in order]), self.dtype)

    def load(self, layout=None):
        from triton.runtime.interpreter import TensorHandle

        return tl.tensor(TensorHandle(self.data.copy(), self.dtype), tl.block_type(self.dtype, list(self.data.shape)))

    def store(self, value):
        self.data[...] = np.broadcast_to(value.handle.data, self.data.shape)


def _np_dtype(dtype):
    return {tl.float32: np.float32, tl.float16: np.float16, tl.int32: np.int32, tl.int64: np.int64}[dtype]


def check_interpretable(**tensors) -> None:
    """In the interpreter, refuse bf16 operands of a kernel that keeps them in (emulated) shared memory: NumPy has no
    bf16, so it would fail mid-launch with a bare ``KeyError``. On a GPU, nothing to check."""
    if not INTERPRET:
        return
    for name, t in tensors.items():
        if t.dtype == torch.bfloat16:
            raise TypeError(f"{name} is bfloat16, which this kernel cannot take in Triton's CPU interpreter "
                            "(TRITON_INTERPRET=1: its shared memory is emulated with NumPy, which has no bf16); use "
                            "float32 or float16 on the CPU, or impl='reference'")  # fmt: skip


def _allocate_shared_memory(element_ty, shape, layout=None, value=None):
    shape = [_unwrap(s) for s in shape]
    buf = _Shared(np.full(shape, np.nan if element_ty.is_floating() else 0, dtype=_np_dtype(element_ty)), element_ty)
    if value is not None:
        buf.store(value)
    return buf


def _static_assert(cond, msg=""):
    if not (cond.value if isinstance(cond, tl.constexpr) else cond):
        raise AssertionError(f"static_assert failed: {msg}")


def _shim() -> types.SimpleNamespace:
    """``gl`` for the interpreter: the Gluon names these kernels use, routed to ``triton.language``.

    Each function looks its ``tl`` counterpart up at call time, because the interpreter patches
    ``triton.language`` while a kernel runs.
    """
    ns = types.SimpleNamespace()
    ns.constexpr = tl.constexpr
    for name in ("float32", "float16", "bfloat16", "int1", "int32", "int64"):
        setattr(ns, name, getattr(tl, name))
    ns.static_range = lambda *args, **kwargs: tl.static_range(*args, **kwargs)
    ns.BlockedLayout, ns.SliceLayout, ns.SwizzledSharedLayout = (
        _gl.BlockedLayout,
        _gl.SliceLayout,
        _gl.SwizzledSharedLayout,
    )
    ns.NVMMADistributedLayout, ns.DotOperandLayout = _gl.NVMMADistributedLayout, _gl.DotOperandLayout

    def route(name):
        def f(*args, **kwargs):
            return getattr(tl, name)(*args, **kwargs)

        f.__name__ = name
        return f

    names = (
        "program_id",
        "load",
        "store",
        "where",
        "exp",
        "log",
        "sqrt",
        "fma",
        "maximum",
        "minimum",
        "expand_dims",
        "broadcast",
        "gather",
    )
    for name in names:
        setattr(ns, name, route(name))
    ns.sum = lambda x, axis=None: tl.sum(x, axis)

    def reduce(inputs, axis, combine_fn, keep_dims=False):
        # The pinned dot product is an fma chain on the GPU; here a plain sum of products is the same function
        # (the interpreter is not bitwise with the GPU anyway) and about 20x faster than a Python combine.
        if getattr(combine_fn, "__name__", "") == "_fma_combine":
            a, b = inputs
            return tl.sum(a * b, axis, keep_dims=keep_dims), None
        return tl.reduce(inputs, axis, combine_fn, keep_dims=keep_dims)

    ns.reduce = reduce
    ns.max = lambda x, axis=None: tl.max(x, axis)
    ns.associative_scan = lambda x, axis, combine_fn, reverse=False: tl.associative_scan(x, axis, combine_fn, reverse)
    ns.arange = lambda start, end, layout=None: tl.arange(start, end)
    ns.full = lambda shape, value, dtype, layout=None: tl.full(shape, value, dtype)
    ns.zeros = lambda shape, dtype, layout=None: tl.zeros(shape, dtype)
    ns.convert_layout = lambda value, layout, assert_trivial=False: value
    ns.thread_barrier = lambda: None
    ns.static_assert = _static_assert
    ns.allocate_shared_memory = _allocate_shared_memory
    return ns


def _async_copy_shim() -> types.SimpleNamespace:
    """``cp.async`` for the interpreter, with the GPU's ordering: a copy reads global memory when it is issued but
    lands in the (emulated) shared memory only when a ``wait_group`` covers its commit group, as on the GPU, where
    nothing else orders it. A kernel that reads a buffer before waiting for the copy into it therefore reads what
    was there before (NaN in a fresh buffer), in the CPU tests as on a GPU, instead of the interpreter hiding the
    missing wait (bench/NOTES.md, fifteenth session: such a wait, missed, passed every CPU test and failed on the
    H200). Copies of groups never waited for never land."""
    open_group: list = []  # copies issued since the last commit
    committed: list = []  # committed groups, oldest first, not yet waited for

    def copy(smem, pointer, mask=None, cache_modifier="", eviction_policy="", volatile=False):
        open_group.append((smem, tl.load(pointer, mask=mask, other=0) if mask is not None else tl.load(pointer)))

    def commit_group():
        committed.append(list(open_group))
        open_group.clear()

    def wait_group(num_outstanding=0):
        keep = max(0, _unwrap(num_outstanding))
        while len(committed) > keep:
            for smem, value in committed.pop(0):
                smem.store(value)

    return types.SimpleNamespace(async_copy_global_to_shared=copy, commit_group=commit_group, wait_group=wait_group)


def _mma_v2_shim(a, b, acc, input_precision=None):
    """The tensor-core product for the interpreter: an fp32 ``dot`` (layouts and TF32 rounding are GPU-only)."""
    return tl.dot(a, b, acc, input_precision="ieee")


if INTERPRET:
    gl = _shim()
    async_copy = _async_copy_shim()
    mma_v2 = _mma_v2_shim
    jit = triton.jit
else:
    from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2

    gl = _gl
    jit = _gluon.jit

__all__ = ["INTERPRET", "async_copy", "gl", "jit", "mma_v2"]
