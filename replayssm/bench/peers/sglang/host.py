"""The platform queries (and two fla helpers) SGLang's kernel files import from the rest of SGLang, answered here.

SGLang's kernel files pick launch parameters from a few questions about the machine (is this CUDA,
which SM, does it support PDL and TF32). The rest of SGLang cannot be imported here (it pulls in
the whole server), so the loader binds exactly these names (``releases.Release.bound``) to the
functions below, which give SGLang's answers for the same machine: on an H200 ``is_cuda`` True,
``get_device_sm`` 90, ``is_sm90_supported`` True (CUDA >= 12.3), ``is_arch_support_pdl`` True,
``is_tf32_supported`` True, no ROCm; on a machine without a GPU every query is False / 0, as SGLang's.
fla's ``exp`` and ``input_guard`` are given the same way. Each docstring names what it stands for.
"""

from __future__ import annotations

import contextlib
import functools
import os

import torch
import triton
import triton.language as tl
import triton.language.extra.libdevice as tldevice

from ...._env import interpreter_requested


def is_hip() -> bool:
    """``sglang.srt.utils.is_hip``: a ROCm build of torch."""
    return torch.version.hip is not None


def is_cuda() -> bool:
    """``sglang.srt.utils.is_cuda``: a CUDA build of torch with a visible GPU."""
    return torch.cuda.is_available() and torch.version.cuda is not None


def get_device_sm() -> int:
    """``sglang.srt.utils.get_device_sm``: compute capability of the current GPU as major*10+minor, else 0."""
    if not torch.cuda.is_available():
        return 0
    major, minor = torch.cuda.get_device_capability()
    return major * 10 + minor


def is_sm90_supported() -> bool:
    """``sglang.srt.utils.is_sm90_supported``: an SM 9.x GPU and CUDA >= 12.3."""
    if not is_cuda():
        return False
    cuda = tuple(int(x) for x in torch.version.cuda.split(".")[:2])
    return get_device_sm() // 10 == 9 and cuda >= (12, 3)


def is_gfx95_supported() -> bool:
    """``sglang.srt.utils.is_gfx95_supported``: an AMD gfx95 GPU (False on every non-ROCm build)."""
    if not is_hip() or not torch.cuda.is_available():
        return False
    return "gfx95" in torch.cuda.get_device_properties(0).gcnArchName


def is_arch_support_pdl() -> bool:
    """``sglang.kernels.jit.utils.is_arch_support_pdl``: programmatic dependent launch, i.e. an NVIDIA
    GPU of SM >= 9 (False on ROCm and when no GPU is visible, where SGLang's probe fails to arch 0)."""
    return not is_hip() and torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9


def get_device_core_count(device_id: int = 0) -> int:
    """``sglang.srt.utils.common.get_device_core_count``: streaming multiprocessors of the GPU, else 0."""
    if not torch.cuda.is_available():
        return 0
    return torch.cuda.get_device_properties(device_id).multi_processor_count


def tf32_supported() -> bool:
    """The value of ``sglang.kernels.ops.attention.fla.utils.is_tf32_supported`` (a module constant):
    an NVIDIA GPU of SM >= 8."""
    return not is_hip() and torch.cuda.is_available() and torch.cuda.get_device_capability(0)[0] >= 8


def fla_exp():
    """The value of ``sglang.kernels.ops.attention.fla.op.exp``: ``tl.exp``, or libdevice's ``fast_expf``
    when ``FLA_USE_FAST_OPS=1`` (SGLang reads the same variable). The Triton interpreter only patches
    builtins it finds through ``tl`` itself, so in the interpreter (``TRITON_INTERPRET``, read as Triton
    reads it) the alias is a jit function calling ``tl.exp`` (the same operation; SGLang's own alias fails
    in the interpreter)."""
    if interpreter_requested():
        return _interpreted_exp
    if os.environ.get("FLA_USE_FAST_OPS", "0") == "1":
        return tldevice.fast_expf
    return tl.exp


@triton.jit
def _interpreted_exp(x):
    return tl.exp(x)


def input_guard(fn):
    """``sglang.kernels.ops.attention.fla.utils.input_guard``: call ``fn`` with its tensor arguments made
    contiguous, under the device of its first tensor argument. (Decorates fla's autograd functions,
    which no peer calls.)"""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        args = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in args]
        kwargs = {k: v.contiguous() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        first = next((t for t in [*args, *kwargs.values()] if isinstance(t, torch.Tensor)), None)
        ctx = torch.cuda.device(first.device.index) if first is not None and first.is_cuda else contextlib.nullcontext()
        with ctx:
            return fn(*args, **kwargs)

    return wrapper


_FUNCTIONS = {
    f.__name__: f
    for f in (
        is_hip,
        is_cuda,
        get_device_sm,
        is_sm90_supported,
        is_gfx95_supported,
        is_arch_support_pdl,
        get_device_core_count,
        input_guard,
    )
}
_VALUES = {"is_tf32_supported": tf32_supported, "exp": fla_exp}


def binding(name: str):
    """The object an SGLang file receives for ``from sglang... import <name>`` (a function, or a
    constant computed now); KeyError for a name this module does not answer."""
    if name in _FUNCTIONS:
        return _FUNCTIONS[name]
    return _VALUES[name]()


def names() -> frozenset[str]:
    return frozenset(_FUNCTIONS) | frozenset(_VALUES)
