"""The drafter's LM head: the model's, or an fp8 copy (engine/draft_head.py). Drafts never change what is
emitted: greedy speculative output with fp8 drafts equals plain decode."""

import pytest
import torch

from replayssm.engine.draft_head import FP8Head, ModelHead, draft_head, draft_ids, quantize_rows
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


PROMPTS = [list(s.encode()) for s in ("import os\nimport sys\n\n\ndef main(", "class Parser:\n    def ")]


def _generate(model, **cfg):
    """Greedy outputs of PROMPTS (40 tokens each) and the mean accepted length, with RunnerConfig(**cfg); window
    1 is plain decoding, otherwise the MTP drafter drafts. Returns (outputs, mean accepted, runner)."""
    rc = RunnerConfig(backend="replay", max_slots=2, max_len=200, **cfg)
    runner = ModelRunner(model, rc)
    eng = Engine(runner, drafter="none" if rc.window == 1 else "mtp")
    for p in PROMPTS:
        eng.add(p, 40)
    eng.run()
    a = [x for r in eng.requests for x in r.accepted]
    return [r.generated for r in eng.requests], sum(a) / len(a), runner


def test_fp8_drafts_keep_greedy_output_exact():
    model = load_model(TINY_MODEL, mtp=True)
    out, acc = {}, {}
    for head in ("model", "fp8"):
        out[head], acc[head], runner = _generate(model, window=4, device_drafter="mtp", draft_head=head)
        assert runner.drafter.head.kind == head
    assert out["fp8"] == out["model"] == _generate(model, window=1)[0]
    assert acc["fp8"] >= 0.9 * acc["model"], acc


def test_draft_ids():
    assert draft_ids(None, 259) is None
    assert draft_ids(259, 259) is None and draft_ids(10**6, 259) is None  # N >= the vocabulary: all of it
    assert torch.equal(draft_ids(5, 259), torch.arange(5))
    assert torch.equal(draft_ids([7, 3, 200], 259), torch.tensor([7, 3, 200]))
    assert torch.equal(draft_ids(torch.tensor([4, 2], dtype=torch.int32), 259), torch.tensor([4, 2]))
    for bad, err, msg in [(0, ValueError, ">= 1"), (-3, ValueError, ">= 1"), ([], ValueError, "non-empty"),
                          ([1, 1], ValueError, "repeated"), ([3, 259], ValueError, r"outside \[0, 259\)"),
                          ([-1], ValueError, "negative token ids: min -1"), ([1.5], ValueError, "ints"),
                              (True, TypeError, "None, an int"),
                          ("abc", TypeError, "None, an int")]:  # fmt: skip
        with pytest.raises(err, match=msg):
            draft_ids(bad, 259)


@pytest.mark.parametrize("kind", ["model", "fp8"])
def test_draft_vocab_picks_the_argmax_over_its_tokens(kind):
    """With a draft vocabulary the head returns token ids of that vocabulary: the argmax of the restricted
    product (the fp8 head: of its quantised restricted product), mapped back to ids."""
    g = torch.Generator().manual_seed(2)
    lm = torch.nn.Linear(64, 512, bias=False)
    with torch.no_grad():
        lm.weight.copy_(torch.randn(512, 64, generator=g))
    h = torch.randn(40, 64, generator=g)
    ids = torch.randperm(512, generator=g)[:100]
    head = draft_head(lm, kind, ids.tolist())
    assert head.vocab == 100 and head.kind == kind
    got = head(h)
    if kind == "model":
        want = ids[(h @ lm.weight.detach()[ids].T).argmax(-1)]
    else:
        h8, sh = quantize_rows(h)
        w8, sw = quantize_rows(lm.weight.detach()[ids])
        want = ids[((h8.float() * sh[:, None]) @ (w8.float() * sw[:, None]).T).argmax(-1)]
    assert torch.equal(got, want)
    assert torch.isin(got, ids).all()
    full = draft_head(lm, kind)(h)
    inside = torch.isin(full, ids)  # where the whole vocabulary's pick is a draft token, it is the same pick
    assert inside.any() and torch.equal(got[inside], full[inside])
    assert head.extra_bytes > 0


@pytest.mark.parametrize("vocab", [128, 48])
def test_draft_vocab_keeps_greedy_output_exact(vocab):
    """The embedded model's tokens are bytes: 128 keeps ASCII (all of Python source, so acceptance stays), 48
    keeps no letters (most drafts are wrong); the greedy output is plain decoding's either way."""
    model = load_model(TINY_MODEL, mtp=True)
    out, acc = {}, {}
    for dv in (None, vocab):
        out[dv], acc[dv], _ = _generate(model, window=4, device_drafter="mtp", draft_vocab=dv)
    assert out[vocab] == out[None] == _generate(model, window=1)[0]
    if vocab == 128:
        assert acc[vocab] == acc[None], acc  # no ASCII draft is lost
    else:
        assert acc[vocab] < acc[None], acc  # the restriction is real


def test_draft_vocab_in_the_runner_config():
    assert RunnerConfig(draft_vocab=torch.tensor([5, 1])).draft_vocab == (5, 1)
    assert RunnerConfig(draft_vocab=[5, 1]).draft_vocab == (5, 1)
    with pytest.raises(ValueError, match="draft_vocab=0: must be >= 1"):
        RunnerConfig(draft_vocab=0)
    with pytest.raises(ValueError, match="repeated"):  # caught before any model is loaded
        RunnerConfig(draft_vocab=[3, 3])
    with pytest.raises(TypeError, match="a sequence of token ids, got 'abc'"):
        RunnerConfig(draft_vocab="abc")
    with pytest.raises(ValueError, match="1-d sequence of ints"):
        RunnerConfig(draft_vocab=[1, 2.0])
