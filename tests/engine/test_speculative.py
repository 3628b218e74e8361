"""Speculative decoding on both backends reproduces plain greedy decoding, with bitwise equal states."""

import pytest
import torch

from replayssm.engine.engine import Engine
from replayssm.engine.runner import ModelRunner, RunnerConfig
from replayssm.engine.spec import BenchmarkAcceptance, NgramDrafter, accept_greedy, accept_sampling
from replayssm.models.loader import load_model


class OracleDrafter:
    """Drafts the true greedy continuation, with some tokens deliberately wrong: controlled acceptance."""

    def __init__(self, continuations: dict[tuple, list[int]], error_rate: float, seed: int = 0):
        self.cont, self.err = continuations, error_rate
        self.gen = torch.Generator().manual_seed(seed)

    def propose(self, context, k):
        for prompt, cont in self.cont.items():
            if tuple(context[: len(prompt)]) == prompt:
                done = len(context) - len(prompt)
                out = cont[done : done + k]
                return [t if torch.rand(1, generator=self.gen) > self.err else (t + 1) % 256 for t in out]
        return []


def _prompts(n=3):
    g = torch.Generator().manual_seed(11)
    return [torch.randint(3, 256, (L,), generator=g).tolist() for L in (13, 6, 21)][:n]


def _engine(model, backend, window, drafter, shadow=None):
    cfg = RunnerConfig(backend=backend, max_slots=4, max_len=512, window=window, shadow_backend=shadow)
    return Engine(ModelRunner(model, cfg), drafter=drafter)


def test_speculative_equals_greedy_on_both_backends(tiny_model_dir):
    """200 tokens, three prompts joining at different iterations, drafts right ~75% of the time."""
    model = load_model(tiny_model_dir)
    prompts, arrivals, n_new = _prompts(), [0, 5, 17], 200
    plain = _engine(model, "replay", 1, "none")
    for p, a in zip(prompts, arrivals):
        plain.add(p, n_new, arrival=a)
    ref = {tuple(r.prompt): r.generated for r in plain.run()}
    for backend, shadow in (("replay", "recurrent"), ("recurrent", "replay")):
        eng = _engine(model, backend, 4, OracleDrafter(ref, error_rate=0.25), shadow=shadow)
        for p, a in zip(prompts, arrivals):
            eng.add(p, n_new, arrival=a)
        steps = 0
        while eng.step():
            steps += 1
            live = [r.slot for r in eng.requests if r.slot is not None]
            # the shadow pool got exactly the primary's layer inputs: states must be bitwise equal everywhere
            assert eng.runner.states_equal(live), f"step {steps}"
        for r in eng.requests:
            assert r.generated == ref[tuple(r.prompt)], f"{backend}: speculative output differs from greedy decoding"
        mean = sum(sum(r.accepted) for r in eng.requests) / sum(len(r.accepted) for r in eng.requests)
        assert mean > 2.0 and steps < n_new  # several tokens per step were really accepted


def test_independent_backends_agree_on_the_first_gdn_layer(tiny_model_dir):
    """Run separately, the backends feed later layers outputs that differ by rounding, so only layer 0's
    inputs (embeddings of identical tokens) are identical -- and its committed state is bitwise equal."""
    model = load_model(tiny_model_dir)
    engines = [_engine(model, b, 4, "ngram") for b in ("replay", "recurrent")]
    for eng in engines:
        for p in _prompts():
            eng.add(p, 40)
    while all(eng.step() for eng in engines):
        a, b = engines
        for ra, rb in zip(a.requests, b.requests):
            assert ra.generated == rb.generated
            if ra.slot is not None:
                s = torch.tensor([ra.slot], dtype=torch.int32)
                assert torch.equal(a.runner.pool.committed_state(0, s), b.runner.pool.committed_state(0, s))


def test_preempt_and_resume_continue_identically(tiny_model_dir):
    model = load_model(tiny_model_dir)
    prompts = _prompts(2)
    results = []
    for preempt in (False, True):
        eng = _engine(model, "replay", 4, "ngram")
        reqs = [eng.add(p, 60) for p in prompts]
        for i in range(200):
            if preempt and i == 7:
                eng.preempt(reqs[0])
            if preempt and i == 12:
                eng.resume(reqs[0])
            if not eng.step():
                break
        results.append([r.generated for r in reqs])
    assert results[0] == results[1]


def test_accept_rules():
    assert accept_greedy([5, 6, 7, 8], [5, 6, 9]) == (3, [5, 6, 7])
    assert accept_greedy([1, 2, 3, 4], [2, 2, 3]) == (1, [1])
    assert accept_greedy([4], []) == (1, [4])
    assert NgramDrafter().propose([1, 2, 3, 9, 1, 2], 3) == [3, 9, 1]
    assert NgramDrafter().propose([1, 2, 3], 2) == []
    # sampling with a one-hot target accepts exactly the target's tokens
    probs = torch.zeros(3, 10)
    probs[0, 4] = probs[1, 7] = probs[2, 2] = 1.0
    assert accept_sampling(probs, [4, 7], torch.Generator().manual_seed(0)) == (3, [4, 7, 2])
    assert accept_sampling(probs, [4, 1], torch.Generator().manual_seed(0)) == (2, [4, 7])


def test_sampling_rule_preserves_the_target_distribution():
    """Empirical check of speculative sampling: first emitted token ~ p_0, whatever the draft."""
    p = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(3)
    for _ in range(6000):
        counts[accept_sampling(p, [1], g)[1][0]] += 1
    assert torch.allclose(counts / 6000, p[0], atol=0.03)  # 6000 draws: 3 sigma ~ 0.02


def test_benchmark_acceptance_cannot_be_enabled_by_accident():
    with pytest.raises(ValueError, match="meaningless_outputs=True"):
        BenchmarkAcceptance(3.0, 4)
    b = BenchmarkAcceptance(2.5, 4, meaningless_outputs=True)
    draws = torch.tensor(b.draw(8000), dtype=torch.float32)
    assert set(draws.tolist()) == {1, 2, 3, 4} and abs(draws.mean().item() - 2.5) < 0.04  # sd of the mean ~0.012
    a = b.alpha  # each draft accepted with probability a, until the first rejection
    for n, p in enumerate([1 - a, a * (1 - a), a * a * (1 - a), a**3], start=1):
        assert abs((draws == n).float().mean().item() - p) < 0.02
    assert BenchmarkAcceptance(4.0, 4, meaningless_outputs=True).draw(50) == [4] * 50
    assert BenchmarkAcceptance(1.0, 4, meaningless_outputs=True).draw(50) == [1] * 50
