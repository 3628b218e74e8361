"""gemm_library: which steps switch the cuBLAS front end (the switch itself is tested on the GPU)."""

import torch

from replayssm.models.gemm import LT_ROWS, gemm_library


def test_no_switch_off_cuda_or_outside_the_rows():
    before = torch.backends.cuda.preferred_blas_library()
    for rows, dev in ((32, "cpu"), (LT_ROWS[0] - 1, "cuda"), (LT_ROWS[1] + 1, "cuda"), (256, "cuda")):
        with gemm_library(rows, torch.device(dev)):  # a CPU-only build could not switch: it must not try
            assert torch.backends.cuda.preferred_blas_library() == before
    assert torch.backends.cuda.preferred_blas_library() == before
