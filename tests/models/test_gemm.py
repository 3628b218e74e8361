"""gemm_library: which steps switch the cuBLAS front end (the switch itself is tested on the GPU)."""

import torch

from replayssm.models.gemm import LT_ROWS, gemm_library


def test_no_switch_off_cuda_or_outside_the_rows():
    before = torch.backends.cuda.preferred_blas_library()
    for rows, dev in ((32, "cpu"), (LT_ROWS[0] - 1, "cuda"), (LT_ROWS[1] + 1, "cuda"), (256, "cuda")):
        with gemm_library(rows, torch.device(dev)):  # a CPU-only build could not switch: it must not try
            assert torch.backends.cuda.preferred_blas_library() == before
    assert torch.backends.cuda.preferred_blas_library() == before


def test_first_switch_survives_an_unusable_stderr(monkeypatch):
    """Finding of the 2026-12-01 review: with fd 2 closed (or no null device) the first switch must still switch,
    unmuted, and leak no descriptor."""
    from replayssm.models import gemm

    calls = []
    monkeypatch.setattr(torch.backends.cuda, "preferred_blas_library", lambda b=None: calls.append(b) or "before")
    for broken in ("dup", "open"):
        monkeypatch.setattr(gemm, "_switched", False)

        def fail(*a, **k):
            raise OSError(9, "Bad file descriptor")

        with monkeypatch.context() as m:
            m.setattr(gemm.os, broken, fail)
            gemm._set("cublaslt")
        assert calls[-1] == "cublaslt" and gemm._switched
    monkeypatch.setattr(gemm, "_switched", False)
    gemm._set("cublaslt")  # the muted path, with a working fd 2
    assert calls[-1] == "cublaslt"
