"""The MTP drafter: exact greedy speculative decoding, and its own KV cache rolled back with the window."""

import importlib.util
import shutil
from pathlib import Path

import pytest
import torch

from replayssm.engine.drafter import DeviceDrafter, HostDrafter
from replayssm.engine.engine import Engine
from replayssm.engine.mtp import MTPDrafter
from replayssm.engine.runner import ModelRunner, RunnerConfig
from replayssm.engine.spec import NgramDrafter
from replayssm.models.loader import load_model
from replayssm.tiny import TINY_MODEL
from tests.helpers.hf_tiny import build
from tests.helpers.mtp_ckpt import add_mtp

ASSET = TINY_MODEL
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture(scope="module", params=["qwen3_5_text", "qwen3_next"])
def mtp_model(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param + "_mtp")
    build(request.param, path, seed=7)
    add_mtp(path, request.param, seed=8)
    return load_model(path, mtp=True)


def _runner(model, backend, window, drafter="mtp", shadow=None, slots=4):
    return ModelRunner(model, RunnerConfig(backend=backend, max_slots=slots, max_len=400, window=window,
                                           shadow_backend=shadow, device_drafter=drafter))  # fmt: skip


def _prompts():
    g = torch.Generator().manual_seed(3)
    return [torch.randint(3, 256, (n,), generator=g).tolist() for n in (1, 9, 17)]


def _generate(runner, drafter, prompts, n_new, arrivals=(0, 3, 8), check_states=False):
    eng = Engine(runner, drafter=drafter)
    for p, a in zip(prompts, arrivals):
        eng.add(p, n_new, arrival=a)
    while eng.step():
        live = [r.slot for r in eng.requests if r.slot is not None]
        if check_states and live:
            assert runner.states_equal(live)
    return eng


def _check_equals_plain(model, prompts, n_new, min_mean=None):
    ref = [r.generated for r in _generate(_runner(model, "replay", 1, drafter=None), "none", prompts, n_new).requests]
    for backend, shadow in (("replay", "recurrent"), ("recurrent", "replay")):
        eng = _generate(_runner(model, backend, 4, shadow=shadow), "mtp", prompts, n_new, check_states=True)
        assert [r.generated for r in eng.requests] == ref, f"{backend}: MTP speculative output differs from greedy"
        acc = [a for r in eng.requests for a in r.accepted]
        if min_mean is not None:
            assert sum(acc) / len(acc) >= min_mean, acc
    return ref


def test_mtp_greedy_equals_plain_random_weights(mtp_model):
    """Random heads draft badly: exercises every rejection path, three requests joining at different steps."""
    _check_equals_plain(mtp_model, _prompts(), 40)


def test_mtp_greedy_equals_plain_embedded_model():
    """The trained head of the embedded model accepts several tokens per step: exercises long catch-ups."""
    model = load_model(ASSET, mtp=True)
    prompts = [list(s.encode()) for s in ("import os\nimport sys\n\n\ndef main(", "class Parser:\n    def ")]
    _check_equals_plain(model, prompts, 48, min_mean=1.8)


def test_drafter_cache_rollback_matches_recompute(mtp_model):
    """Random acceptance and random bonus tokens; after every step the live drafter's cache entries of the
    committed positions and its next drafts equal those of a drafter that prefilled the same tokens."""
    g = torch.Generator().manual_seed(0)
    T = 4
    live = _runner(mtp_model, "replay", T, slots=2)
    seq = torch.randint(3, 256, (11,), generator=g).tolist()
    slot = live.alloc()
    live.prefill(slot, seq[:-1])
    for step in range(14):
        _, window = live.draft_and_verify([slot], torch.tensor([seq[-1]]))
        c = len(seq) - 1  # committed length before the step; seq[-1] is the window's first token
        fresh = _runner(mtp_model, "replay", T, slots=2)
        fs = fresh.alloc()
        fresh.prefill(fs, seq[:-1])
        _, fwin = fresh.draft_and_verify([fs], torch.tensor([seq[-1]]))
        assert torch.equal(window, fwin), f"step {step}: drafts differ from a recomputed drafter"
        k_live, k_fresh = live.drafter.kv.k[0, slot, :c], fresh.drafter.kv.k[0, fs, :c]
        torch.testing.assert_close(k_live, k_fresh, rtol=1e-4, atol=1e-5)  # fp32; batch shapes differ
        torch.testing.assert_close(live.drafter.kv.v[0, slot, :c], fresh.drafter.kv.v[0, fs, :c], rtol=1e-4, atol=1e-5)
        n = int(torch.randint(1, T + 1, (1,), generator=g))
        bonus = int(torch.randint(3, 256, (1,), generator=g))
        live.commit([n])
        seq += window[0, 1:n].tolist() + [bonus]


def test_preempt_resume_with_mtp(mtp_model):
    prompts = _prompts()[1:]
    runs = []
    for preempt in (False, True):
        eng = Engine(_runner(mtp_model, "replay", 4), drafter="mtp")
        reqs = [eng.add(p, 30) for p in prompts]
        for i in range(100):
            if preempt and i == 4:
                eng.preempt(reqs[0])
                eng.add(prompts[1], 40)  # another request takes the slot meanwhile
            if preempt and i == 9:
                eng.resume(reqs[0])
            if not eng.step():
                break
        runs.append([r.generated for r in reqs])
    assert runs[0] == runs[1]


def test_drafter_protocol_and_errors(mtp_model):
    runner = _runner(mtp_model, "replay", 4)
    assert isinstance(runner.drafter, MTPDrafter) and isinstance(runner.drafter, DeviceDrafter)
    assert isinstance(NgramDrafter(), HostDrafter)
    assert Engine(runner, drafter="auto").on_device
    plain = _runner(mtp_model, "replay", 4, drafter=None)
    assert not Engine(plain, drafter="auto").on_device
    with pytest.raises(ValueError, match="RunnerConfig\\(device_drafter='mtp'\\)"):
        Engine(plain, drafter="mtp")
    with pytest.raises(ValueError, match="device drafter"):
        plain.draft_and_verify([0], torch.tensor([1]))
    with pytest.raises(TypeError, match="propose"):
        Engine(plain, drafter=object())
    with pytest.raises(ValueError, match="window of at least 2"):
        _runner(mtp_model, "replay", 1)
    with pytest.raises(ValueError, match="device_drafter must be"):
        _runner(mtp_model, "replay", 4, drafter="eagle")


def test_training_forward_matches_the_drafter(mtp_model):
    """scripts/tiny_mtp.py trains the head with a sequence-parallel unrolled forward; its draft chain must be
    the drafter's (same tokens, same attention pattern), or training would optimise something else."""
    spec = importlib.util.spec_from_file_location("tiny_mtp", SCRIPTS / "tiny_mtp.py")
    tiny_mtp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny_mtp)
    T, P = 4, 12
    runner = _runner(mtp_model, "recurrent", T, slots=1)
    ids = torch.randint(3, 256, (P + 1,), generator=torch.Generator().manual_seed(5))
    slot = runner.alloc()
    runner.prefill(slot, ids[:P].tolist())
    _, window = runner.draft_and_verify([slot], ids[P:])
    seq = torch.cat([ids[:P], window[0]])  # the prompt, then the drafter's own chain
    hidden = tiny_mtp.main_hidden(mtp_model, seq[None])
    with torch.no_grad():
        logits = tiny_mtp.unrolled_logits(mtp_model.mtp, mtp_model.model.embed_tokens, mtp_model.lm_head, hidden,
                                          seq[None], T - 1)  # fmt: skip
    assert [int(x[0, P - 1].argmax()) for x in logits] == window[0, 1:].tolist()


def test_cli_generate_drafter(tmp_path, capsys):
    from replayssm.cli import main

    assert main(["generate", "--model", str(ASSET), "--prompt", "def f(", "--drafter", "mtp", "--device", "cpu",
                 "--max-new-tokens", "12", "--max-len", "64"]) == 0  # fmt: skip
    assert "drafter mtp;" in capsys.readouterr().err
    build("qwen3_5_text", tmp_path, seed=2)  # no MTP tensors
    shutil.copy(ASSET / "tokenizer.json", tmp_path)
    capsys.readouterr()  # drop what saving the checkpoint printed
    assert main(["generate", "--model", str(tmp_path), "--prompt", "x", "--drafter", "mtp", "--device", "cpu"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip() and "loading" not in ln]  # no progress bar
    assert len(err) == 1 and "--drafter mtp:" in err[0] and "no mtp.* tensors" in err[0], err


def test_sampling_with_mtp_drafts(mtp_model):
    """Sampling: the drafts are argmax tokens (a one-hot draft distribution), so accept_sampling applies as is."""
    eng = Engine(_runner(mtp_model, "replay", 4), drafter="mtp", temperature=0.8, seed=1)
    reqs = [eng.add(p, 20) for p in _prompts()]
    eng.run()
    assert all(len(r.generated) == 20 and all(1 <= a <= 4 for a in r.accepted) for r in reqs)
