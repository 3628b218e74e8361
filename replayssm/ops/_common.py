"""Dispatch between the Triton/Gluon kernels and their PyTorch references, and launch sizing."""

from __future__ import annotations

import os

import torch

IMPLS = ("auto", "triton", "reference")
ENV_IMPLS = ("", "auto", "triton")  # REPLAYSSM_IMPL: unset and "auto" leave "auto" as it is


def use_triton(impl: str, *tensors: torch.Tensor) -> bool:
    """Resolve the ``impl`` keyword: "auto" runs the kernels on CUDA tensors and the reference on CPU.

    ``REPLAYSSM_IMPL=triton`` in the environment makes "auto" pick the kernels on CPU too (with
    ``TRITON_INTERPRET=1``), which is how the CPU test-suite exercises them.
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if impl == "auto":
        env = os.environ.get("REPLAYSSM_IMPL", "")
        if env not in ENV_IMPLS:
            raise ValueError(f"REPLAYSSM_IMPL must be unset or one of {ENV_IMPLS[1:]} (triton: the kernels on CPU "
                             f"tensors too, in Triton's interpreter), got {env!r}")  # fmt: skip
        if all(t.is_cuda for t in tensors):
            return True
        use = env == "triton"
    else:
        use = impl == "triton"
    if use and not all(t.is_cuda for t in tensors):
        from ._gluon import INTERPRET

        if not INTERPRET:  # (Triton's own error: "0 active drivers ([]). There should only be one.")
            raise ValueError("the Triton kernels run on CUDA tensors, or on CPU tensors in Triton's interpreter: "
                             "set TRITON_INTERPRET=1 before replayssm is imported, or use the references (impl="
                             "'reference', or REPLAYSSM_IMPL unset)")  # fmt: skip
    return use
