"""Test-session setup: on a machine without a GPU the Triton kernels run in the interpreter.

TRITON_INTERPRET must be set before any @triton.jit function is created, i.e. before replayssm.ops
is imported; conftest.py is imported first, so it is set here.

CPU work in the tests is many tiny tensor operations; torch's intra-op threads only add barrier
waits there, and on a shared machine those waits explode (one reference verify took 275 ms with two
threads, 4.5 ms with one). The suite therefore runs torch single-threaded on the CPU.

Hypothesis draws the same examples on every run (``derandomize``): a failure in CI reproduces on a laptop, and a
green run means the same thing twice. ``HYPOTHESIS_PROFILE=explore`` draws fresh ones, for hunting.
"""

import os

import pytest
import torch
from hypothesis import settings

settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU, and this machine has none (on a GPU machine: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same global RNG state, so what a test draws without a generator of its own does
    not depend on which tests ran before it (a -k subset, another order)."""
    torch.manual_seed(0)


@pytest.fixture
def device():
    """Where the kernels under test run: the GPU when there is one, else the CPU (interpreter)."""
    return torch.device("cuda" if HAS_CUDA else "cpu")
