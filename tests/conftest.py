"""Test-session setup: the CPU suite runs the Triton kernels in the interpreter, the GPU suite compiles them.

TRITON_INTERPRET must be set before any @triton.jit function is created, i.e. before replayssm.ops
is imported. It is set in ``pytest_configure``, which runs before any test module is imported; no conftest file
imports replayssm.ops at its own import (``tests/helpers/peers.py`` imports replayssm inside its fixture for this
reason; ``replayssm._env`` imports nothing). It is one switch for the whole process, so a run is either the CPU suite
or the GPU suite:

- a run that asks for the GPU suite (a mark expression that selects ``gpu``, or paths all in tests/gpu:
  ``pytest -m gpu tests/gpu``, ``pytest tests/gpu``): compiled kernels on the GPU; any other test it selects is
  skipped there (the CPU tests put the kernels on CPU tensors, which needs the interpreter); on a machine without a
  GPU the ``gpu`` tests are skipped and the others run as in the CPU suite. Paths that mix tests/gpu with other
  folders make a CPU-suite run;
- any other run (plain ``pytest``, the README's command, ``.ci/run``): the CPU suite exactly as CI runs it, on any
  machine. It hides the GPUs (``CUDA_VISIBLE_DEVICES=""``, set before torch looks for one, and inherited by the
  CLI's subprocesses), so the interpreter is on, the ``device`` fixture and the CLI's default device are the CPU,
  and the ``gpu`` tests are skipped with the command that runs them.

A TRITON_INTERPRET set by the caller is kept as it is.

CPU work in the tests is many tiny tensor operations; torch's intra-op threads only add barrier
waits there, and on a shared machine those waits explode (one reference verify took 275 ms with two
threads, 4.5 ms with one). The suite therefore runs torch single-threaded on the CPU.

Hypothesis draws the same examples on every run (``derandomize``): a failure in CI reproduces on a laptop, and a
green run means the same thing twice. ``HYPOTHESIS_PROFILE=explore`` draws fresh ones, for hunting.
"""

import os
from pathlib import Path

import pytest
import torch
from _pytest.mark.expression import Expression
from hypothesis import settings

from replayssm._env import interpreter_requested

settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

torch.set_num_threads(1)
GPU_DIR = Path(__file__).resolve().parent / "gpu"
HAS_CUDA = False  # whether this run is the GPU suite on a machine with a CUDA device: set by pytest_configure
GPU_SUITE = "pytest -m gpu tests/gpu"


def selects_gpu(markexpr: str, args: list[str], cwd: Path) -> bool:
    """Whether a run asks for the GPU suite: a ``-m`` expression that keeps a test marked ``gpu`` alone and drops an
    unmarked one ("gpu", "gpu and not slow"; not "not gpu", "not (gpu or slow)", "gpu or not slow"), or paths that all
    lie in tests/gpu (``pytest tests/gpu``, ``pytest tests/gpu/test_soak.py::test_x``)."""
    if markexpr:
        expr = Expression.compile(markexpr)
        if expr.evaluate(lambda name, **_: name == "gpu") and not expr.evaluate(lambda name, **_: False):
            return True
    paths = [(cwd / a.split("::")[0]).resolve() for a in args]
    return bool(paths) and all(p == GPU_DIR or GPU_DIR in p.parents for p in paths)


def pytest_configure(config):
    global HAS_CUDA
    config.gpu_run = selects_gpu(config.getoption("markexpr", ""), config.args, config.invocation_params.dir)
    if config.gpu_run:
        HAS_CUDA = torch.cuda.is_available()
        if HAS_CUDA and interpreter_requested():
            warning = "TRITON_INTERPRET is set: the GPU suite's kernels run in Triton's interpreter, not compiled"
            config.issue_config_time_warning(pytest.PytestConfigWarning(warning), 2)
    else:  # the CPU suite sees no GPU, as on CI; its subprocesses (the CLI's) inherit this
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if not HAS_CUDA:
        os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.hookimpl(trylast=True)  # after tests/gpu/conftest.py marks its tests and after -m deselects
def pytest_collection_modifyitems(config, items):
    if not config.gpu_run:
        skip_gpu = f"this run is the CPU suite (no GPU, Triton's interpreter, as on CI); the GPU suite: {GPU_SUITE}"
    elif not HAS_CUDA:
        skip_gpu = "needs a CUDA GPU, and this machine has none"
    else:
        skip_gpu = None
    skip_cpu = f"a CPU-suite test (CPU tensors, Triton's interpreter): not in the GPU suite's run ({GPU_SUITE})"
    for item in items:
        is_gpu = "gpu" in item.keywords
        if is_gpu and skip_gpu:
            item.add_marker(pytest.mark.skip(reason=skip_gpu))
        elif not is_gpu and HAS_CUDA:
            item.add_marker(pytest.mark.skip(reason=skip_cpu))


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same global RNG state, so what a test draws without a generator of its own does
    not depend on which tests ran before it (a -k subset, another order)."""
    torch.manual_seed(0)


@pytest.fixture
def device():
    """Where the kernels under test run: the CPU (interpreter) in the CPU suite, the GPU where a run sees one."""
    return torch.device("cuda" if HAS_CUDA else "cpu")
