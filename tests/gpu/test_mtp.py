"""GPU: MTP drafting captured in the runner's CUDA graph with the verify gives the eager engine's tokens."""

import pytest
import torch

from replayssm.engine.draft_head import FP8Head, quantize_rows
from replayssm.engine.engine import Engine
from replayssm.engine.runner import ModelRunner, RunnerConfig
from replayssm.models.loader import load_model
from replayssm.tiny import TINY_MODEL


def _run(model, graphs, backend, head="auto", vocab=None):
    runner = ModelRunner(model, RunnerConfig(backend=backend, max_slots=3, max_len=300, window=4,
                                             cuda_graphs=graphs, device_drafter="mtp", draft_head=head,
                                             draft_vocab=vocab))  # fmt: skip
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


def test_fp8_draft_head_on_the_gpu():
    """The fp8 head's tensor-core path (vocab and hidden padded to 16) picks the argmax of its own quantised
    product, up to near ties from the accumulation order; drafting with it keeps the trained head's acceptance
    and, as any drafts do, the greedy output."""
    g = torch.Generator(device="cuda").manual_seed(0)
    lm = torch.nn.Linear(1000, 4099, bias=False, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        lm.weight.copy_(torch.randn(4099, 1000, generator=g, device="cuda"))
    h = torch.randn(37, 1000, generator=g, device="cuda").bfloat16()
    head = FP8Head(lm)
    h8, sh = quantize_rows(h)
    w = head.w8[:4099, :1000].float() * head.w_scale[0, :4099, None]
    want = ((h8.float() * sh[:, None]) @ w.T).argmax(-1)
    assert (head(h) == want).float().mean() >= 0.97
    model = load_model(TINY_MODEL, mtp=True, device="cuda", dtype=torch.bfloat16)
    runs = {k: _run(model, True, "replay", head=k) for k in ("model", "fp8")}
    means = {k: sum(a) / len(a) for k, (_, a) in runs.items()}
    assert means["fp8"] >= 0.9 * means["model"], means


@pytest.mark.parametrize("head", ["model", "fp8"])
def test_draft_vocab_in_cuda_graphs(head):
    """A draft vocabulary (here the 48 lowest byte ids: no letters) maps its picks back to token ids inside the
    captured step: graphs give the eager engine's tokens and acceptance, the output is plain decoding's, and
    the restriction costs acceptance (it is real)."""
    model = load_model(TINY_MODEL, mtp=True, device="cuda", dtype=torch.float32)
    eager, acc_eager = _run(model, False, "replay", head, vocab=48)
    graphed, acc_graphed = _run(model, True, "replay", head, vocab=48)
    assert graphed == eager and acc_graphed == acc_eager
    full, acc_full = _run(model, True, "replay", head)
    assert graphed == full  # the greedy output does not depend on the drafts
    assert sum(acc_graphed) / len(acc_graphed) < sum(acc_full) / len(acc_full)
