"""``LLM(shadow_backend=...)``: generate checks the two pools after every step (the researcher's trial found that it
never did, and that the slots were gone by the time a caller could)."""

import pytest
import torch

from replayssm.engine.llm import LLM


def _prompts():
    g = torch.Generator().manual_seed(2)
    return [torch.randint(3, 256, (n,), generator=g).tolist() for n in (9, 5)]


def test_generate_compares_the_pools_after_every_step(tiny_model_dir):
    llm = LLM(tiny_model_dir, window=3, drafter="ngram", max_slots=2, max_len=96, shadow_backend="recurrent")
    out = llm.generate(_prompts(), max_new_tokens=8)
    plain = LLM(tiny_model_dir, window=3, drafter="ngram", max_slots=2, max_len=96).generate(_prompts(), 8)
    assert [o.token_ids for o in out] == [o.token_ids for o in plain]
    assert llm.lockstep_checks == max(o.steps for o in out) > 1  # the two start together: one check per step
    seen = []
    real = llm.runner.states_equal
    llm.runner.states_equal = lambda slots: seen.append(list(slots)) or real(slots)
    one = llm.generate([_prompts()[0]], max_new_tokens=2, arrivals=[3])  # ends in its first step, joins late
    assert one[0].steps == 1 and llm.lockstep_checks == 1 and len(seen) == 1  # the step that ends it, compared


def test_a_difference_raises_and_gives_every_slot_back(tiny_model_dir, monkeypatch):
    llm = LLM(tiny_model_dir, window=3, drafter="ngram", max_slots=2, max_len=96, shadow_backend="recurrent")
    calls = []

    def differs(slots):
        calls.append(list(slots))
        return len(calls) < 3  # the third step's check finds a difference

    monkeypatch.setattr(llm.runner, "states_equal", differs)
    with pytest.raises(RuntimeError, match="lockstep check failed at engine iteration 3"):
        llm.generate(_prompts(), max_new_tokens=8)
    assert llm.lockstep_checks == 2 and len(calls) == 3 and llm.runner.pool.num_free == 2
