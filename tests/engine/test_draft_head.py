"""The drafter's LM head: the model's, or an fp8 copy (engine/draft_head.py). Drafts never change what is
emitted: greedy speculative output with fp8 drafts equals plain decode."""

import pytest
import torch

from replayssm.engine.draft_head import FP8Head, ModelHead, draft_head, quantize_rows
from replayssm.engine.engine import Engine
from replayssm.engine.runner import ModelRunner, RunnerConfig
from replayssm.models.loader import load_model
from replayssm.tiny import TINY_MODEL


def test_quantize_rows_round_trip():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 96, generator=g) * torch.logspace(-3, 2, 64)[:, None]
    q, scale = quantize_rows(x)
    assert q.dtype == torch.float8_e4m3fn and scale.shape == (64,)
    back = q.float() * scale[:, None]
    assert (back - x).abs().max(1).values.le(x.abs().amax(1) * 2**-4).all()  # e4m3: 3 mantissa bits
    assert back.abs().amax(1).sub(x.abs().amax(1)).abs().le(x.abs().amax(1) * 1e-6).all()  # row max exact


def test_fp8_head_picks_the_argmax_of_its_quantised_product():
    g = torch.Generator().manual_seed(1)
    lm = torch.nn.Linear(64, 512, bias=False)
    with torch.no_grad():
        lm.weight.copy_(torch.randn(512, 64, generator=g))
    h = torch.randn(40, 64, generator=g)
    head = FP8Head(lm)
    h8, sh = quantize_rows(h)
    want = ((h8.float() * sh[:, None]) @ (head.w8.float() * head.w_scale.T).T).argmax(-1)
    assert torch.equal(head(h), want)
    agree = (head(h) == ModelHead(lm)(h)).float().mean()
    assert agree >= 0.8, agree  # random logits have near ties; the trained model agrees far more (GPU test)
    assert head.extra_bytes == 512 * 64 + 512 * 4


def test_draft_head_choice():
    lm = torch.nn.Linear(32, 48, bias=False)
    assert isinstance(draft_head(lm, "auto"), ModelHead)  # the CPU: no fp8 tensor cores
    assert isinstance(draft_head(lm, "model"), ModelHead)
    assert isinstance(draft_head(lm, "fp8"), FP8Head)  # the CPU reference of the fp8 path
    with pytest.raises(ValueError, match="draft_head must be 'auto', 'model' or 'fp8', got 'int8'"):
        draft_head(lm, "int8")


def test_fp8_drafts_keep_greedy_output_exact():
    model = load_model(TINY_MODEL, mtp=True)
    prompts = [list(s.encode()) for s in ("import os\nimport sys\n\n\ndef main(", "class Parser:\n    def ")]
    out, acc = {}, {}
    for head in ("model", "fp8"):
        rc = RunnerConfig(backend="replay", max_slots=2, max_len=200, window=4, device_drafter="mtp", draft_head=head)
        runner = ModelRunner(model, rc)
        assert runner.drafter.head.kind == head
        eng = Engine(runner, drafter="mtp")
        for p in prompts:
            eng.add(p, 40)
        eng.run()
        out[head] = [r.generated for r in eng.requests]
        a = [x for r in eng.requests for x in r.accepted]
        acc[head] = sum(a) / len(a)
    rc = RunnerConfig(backend="replay", max_slots=2, max_len=200, window=1)
    plain = Engine(ModelRunner(model, rc), drafter="none")
    for p in prompts:
        plain.add(p, 40)
    plain.run()
    assert out["fp8"] == out["model"] == [r.generated for r in plain.requests]
    assert acc["fp8"] >= 0.9 * acc["model"], acc
