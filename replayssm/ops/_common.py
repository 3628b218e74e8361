"""Dispatch between the Triton/Gluon kernels and their PyTorch references, and launch sizing."""

from __future__ import annotations

import os

import torch

IMPLS = ("auto", "triton", "reference")


def use_triton(impl: str, *tensors: torch.Tensor) -> bool:
    """Resolve the ``impl`` keyword: "auto" runs the kernels on CUDA tensors and the reference on CPU.

    ``REPLAYSSM_IMPL=triton`` in the environment makes "auto" pick the kernels on CPU too (with
    ``TRITON_INTERPRET=1``), which is how the CPU test-suite exercises them.
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if impl == "auto":
        if all(t.is_cuda for t in tensors):
            return True
        return os.environ.get("REPLAYSSM_IMPL", "") == "triton"
    return impl == "triton"


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of ``device`` (132 on an H200); 1 on the CPU (interpreter)."""
    if device.type != "cuda":
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


def rows_per_program(V: int, programs_per_row: int, device: torch.device, tile: int) -> int:
    """How many of a head's V rows one program handles: all of them when the batch fills the GPU,
    fewer (down to one tile) when ``programs_per_row`` (batch x heads) is too small to give every SM a
    few programs. Row placement never changes a row's arithmetic (``_pinned``), only speed."""
    rows = V
    while rows > tile and programs_per_row * (V // rows) < 4 * sm_count(device):
        rows //= 2
    return rows
