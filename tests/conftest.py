"""Test-session setup: the CPU suite runs the Triton kernels in the interpreter, the GPU suite compiles them.

TRITON_INTERPRET must be set before any @triton.jit function is created, i.e. before replayssm.ops
is imported; conftest.py is imported first, so it is set here. It is one switch for the whole process, so a run is
either the CPU suite or the GPU suite:

- no CUDA device: the CPU suite (interpreter on), the ``gpu`` tests skipped;
- a CUDA device and a run that asks for the GPU suite (a mark expression that selects ``gpu``, or paths all in
  tests/gpu: ``pytest -m gpu tests/gpu``, ``pytest tests/gpu``): the GPU suite, compiled
  kernels; the tests that take the ``device`` fixture count as GPU tests in this run (``pytest -m gpu`` over the
  whole tree runs them on the GPU), anything else it selects is skipped, since the CPU tests put the kernels on CPU
  tensors;
- a CUDA device and any other run (plain ``pytest``, the README's command): the CPU suite exactly as CI runs it,
  interpreter on and the ``device`` fixture on the CPU, the ``gpu`` tests skipped with the command that runs them.

A TRITON_INTERPRET set by the caller is kept as it is.

CPU work in the tests is many tiny tensor operations; torch's intra-op threads only add barrier
waits there, and on a shared machine those waits explode (one reference verify took 275 ms with two
threads, 4.5 ms with one). The suite therefore runs torch single-threaded on the CPU.

Hypothesis draws the same examples on every run (``derandomize``): a failure in CI reproduces on a laptop, and a
green run means the same thing twice. ``HYPOTHESIS_PROFILE=explore`` draws fresh ones, for hunting.
"""

import os
import re
from pathlib import Path

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
INTERPRETED = not HAS_CUDA  # set for the run by pytest_configure


GPU_DIR = Path(__file__).parent / "gpu"


def selects_gpu(markexpr: str, args: list[str], cwd: Path) -> bool:
    """Whether a run asks for the GPU suite: a ``-m`` expression that selects ``gpu`` ("gpu", "gpu and not slow";
    not "not gpu"), or paths that all lie in tests/gpu (``pytest tests/gpu``, ``pytest tests/gpu/test_soak.py``)."""
    if re.search(r"(?<!not )\bgpu\b", markexpr or ""):
        return True
    paths = [(cwd / a.split("::")[0]).resolve() for a in args]
    return bool(paths) and all(p == GPU_DIR or GPU_DIR in p.parents for p in paths)


def pytest_configure(config):
    global INTERPRETED
    gpu_run = selects_gpu(config.getoption("markexpr", ""), config.args, config.invocation_params.dir)
    if HAS_CUDA and not gpu_run:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def pytest_itemcollected(item):
    """In the GPU suite's run a test that takes the ``device`` fixture is a GPU test too: it runs on the GPU there."""
    if HAS_CUDA and not INTERPRETED and "device" in getattr(item, "fixturenames", ()):
        item.add_marker(pytest.mark.gpu)


@pytest.hookimpl(trylast=True)  # after tests/gpu/conftest.py marks its tests and after -m deselects
def pytest_collection_modifyitems(config, items):
    if not HAS_CUDA:
        gpu_reason = "needs a CUDA GPU, and this machine has none (on a GPU machine: pytest -m gpu tests/gpu)"
    elif INTERPRETED:
        gpu_reason = "this run is the CPU suite (the interpreter, as in CI); the GPU suite: pytest -m gpu tests/gpu"
    else:
        gpu_reason = None
    cpu_reason = "a CPU-suite test (Triton's interpreter), and this is the GPU suite's run: run it without -m gpu"
    for item in items:
        is_gpu = "gpu" in item.keywords
        if is_gpu and gpu_reason:
            item.add_marker(pytest.mark.skip(reason=gpu_reason))
        elif not is_gpu and gpu_reason is None:
            item.add_marker(pytest.mark.skip(reason=cpu_reason))


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same global RNG state, so what a test draws without a generator of its own does
    not depend on which tests ran before it (a -k subset, another order)."""
    torch.manual_seed(0)


@pytest.fixture
def device():
    """Where the kernels under test run: the GPU in the GPU suite's run, else the CPU (interpreter)."""
    return torch.device("cuda" if HAS_CUDA and not INTERPRETED else "cpu")
