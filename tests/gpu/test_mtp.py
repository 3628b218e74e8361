"""GPU: MTP drafting captured in the runner's CUDA graph with the verify gives the eager engine's tokens."""

import pytest
import torch

from replayssm.engine.engine import Engine
from replayssm.engine.runner import ModelRunner, RunnerConfig
from replayssm.models.loader import load_model
from replayssm.tiny import TINY_MODEL


def _run(model, graphs, backend):
    runner = ModelRunner(model, RunnerConfig(backend=backend, max_slots=3, max_len=300, window=4,
                                             cuda_graphs=graphs, device_drafter="mtp"))  # fmt: skip
    eng = Engine(runner, drafter="mtp")
    prompts = [list(s.encode()) for s in ("import os\n", "class A:\n    def ", "    for i in range(")]
    for p, a in zip(prompts, (0, 2, 5)):
        eng.add(p, 64, arrival=a)
    eng.run()
    assert runner.use_graphs == graphs
    return [r.generated for r in eng.requests], [a for r in eng.requests for a in r.accepted]


@pytest.mark.parametrize("backend", ["replay", "recurrent"])
def test_mtp_drafting_in_cuda_graphs_equals_eager(backend):
    model = load_model(TINY_MODEL, mtp=True, device="cuda", dtype=torch.float32)
    eager, acc_eager = _run(model, False, backend)
    graphed, acc_graphed = _run(model, True, backend)
    assert graphed == eager and acc_graphed == acc_eager
    assert sum(acc_graphed) / len(acc_graphed) > 1.5  # the trained head drafts real tokens
