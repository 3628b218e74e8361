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
