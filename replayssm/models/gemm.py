"""Which cuBLAS front end the GEMMs of a step use, chosen by the step's row count.

PyTorch's bf16 ``F.linear`` goes through cuBLAS by default; ``torch.backends.cuda.preferred_blas_library`` switches
it to cuBLASLt, whose heuristics choose differently. On an H200 at the Qwen3.5-27B weight shapes, timed one shape
at a time in CUDA graphs (bench/results/2026-12-01e-h200/gemm_probe.log), cuBLASLt is faster from 32 to 64 rows
(the down projection, [5120 x 17408]: 44.9 vs 49.2 us at 32 rows, 45.0 vs 52.1 at 64; the whole step's GEMMs
13.81 vs 14.09 ms and 14.06 vs 14.52 ms), as fast at 1 and 8 rows, and slower at 256 (20.94 vs 20.11 ms). The
choice is made while a step's GEMMs are issued, so a captured CUDA graph keeps it; it changes which kernel
computes a product (summation order), not what is computed.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager

import torch

LT_ROWS = (16, 128)  # rows of a step whose GEMMs go to cuBLASLt (measured at 32 and 64; 8 and 256 stay on cuBLAS)


def _set(backend):
    with warnings.catch_warnings():  # PyTorch calls the switch experimental and warns once per process
        warnings.simplefilter("ignore")
        return torch.backends.cuda.preferred_blas_library(backend)


@contextmanager
def gemm_library(rows: int, device: torch.device):
    """Issue the GEMMs of a ``rows``-row step on ``device`` with the faster cuBLAS front end (module docstring);
    the process-wide setting is restored on exit. A no-op off CUDA and outside ``LT_ROWS``."""
    if device.type != "cuda" or not LT_ROWS[0] <= rows <= LT_ROWS[1]:
        yield
        return
    before = _set(None)
    _set("cublaslt")
    try:
        yield
    finally:
        _set(before)
