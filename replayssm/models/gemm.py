"""Which cuBLAS front end the GEMMs of a step use, chosen by the step's row count.

PyTorch's bf16 ``F.linear`` goes through cuBLAS by default; ``torch.backends.cuda.preferred_blas_library`` switches
it to cuBLASLt, whose heuristics choose differently. On an H200 at the Qwen3.5-27B weight shapes, timed one shape
at a time in CUDA graphs (bench/results/2026-12-01e-h200/gemm_probe*.log), the whole step's GEMMs take with
cuBLASLt / cuBLAS: 13.68 / 13.88 ms at 16 rows, 13.81 / 14.09 at 32, 14.06 / 14.52 at 64, 13.94 / 14.27 at 96 and
13.77 / 14.35 at 128 (mostly the down projection, [5120 x 17408]: 48.0 vs 55.8 us at 128 rows); the same at 1 and 8
rows; 20.94 / 20.11 at 256. End to end (27B, one call) that was 0.3-0.5 ms less per step at 32-128 rows and no
change elsewhere. The switch covers the decoder layers (``HybridLM.hidden``), not the LM head: at its shape
cuBLASLt gains nothing (633.3 vs 632.6 us at 64 rows) and loses at 128 rows (647.9 vs 638.6). The choice is made
while a step's GEMMs are issued, so a captured CUDA graph keeps it; it changes which kernel computes a product
(summation order), not what is computed.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager

import torch

LT_ROWS = (16, 128)  # rows of a step whose GEMMs go to cuBLASLt (module docstring)
_switched = False


def _set(backend):
    """Set (or with None, read) the preferred library. The first switch of a process makes PyTorch's C++ side print
    an "experimental feature" warning straight to file descriptor 2, once; that one call runs with fd 2 pointed at
    the null device (process-wide for that instant). Where fd 2 cannot be redirected (closed, no null device) the
    switch runs unmuted."""
    global _switched
    if backend is None or _switched:
        return torch.backends.cuda.preferred_blas_library(backend)
    _switched = True
    if sys.stderr is not None:
        sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        return torch.backends.cuda.preferred_blas_library(backend)
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        os.close(saved)
        return torch.backends.cuda.preferred_blas_library(backend)
    try:
        os.dup2(null, 2)
        return torch.backends.cuda.preferred_blas_library(backend)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


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
