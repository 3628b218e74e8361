"""Acceptance on the device against the host rules of engine.spec, and the sampling distribution guarantee."""

import torch

from replayssm.engine.accept import (
    Greedy,
    Prescribed,
    accept_device,
    accept_greedy_device,
    accept_sampling_device,
    sample_inverse_cdf,
)
from replayssm.engine.spec import accept_greedy, accept_sampling


def test_greedy_matches_the_host_rule_row_by_row():
    g = torch.Generator().manual_seed(0)
    B, T, V = 64, 5, 7  # a small vocab: drafts match often
    logits = torch.randn(B, T, V, generator=g).bfloat16()
    argmax = logits.argmax(-1)
    window = torch.randint(0, V, (B, T), generator=g)
    window[:, 1:] = torch.where(torch.rand(B, T - 1, generator=g) < 0.6, argmax[:, :-1], window[:, 1:])
    num_drafts = torch.randint(0, T, (B,), generator=g)
    n, tokens = accept_greedy_device(logits, window, num_drafts)
    assert n.dtype == torch.int32
    for b in range(B):
        ref_n, ref_tokens = accept_greedy(argmax[b].tolist(), window[b, 1 : 1 + num_drafts[b]].tolist())
        assert int(n[b]) == ref_n and tokens[b, :ref_n].tolist() == ref_tokens
    assert len(set(n.tolist())) > 2  # the cases really vary


def test_sampling_with_one_hot_targets_is_deterministic():
    """The host rule's fixed cases: a one-hot target accepts exactly its own tokens."""
    probs = torch.zeros(2, 3, 10)
    probs[:, 0, 4] = probs[:, 1, 7] = probs[:, 2, 2] = 1.0
    logits = torch.where(probs > 0, 0.0, -1e9)
    window = torch.tensor([[1, 4, 7], [1, 4, 1]])
    u = torch.rand(2, 6, generator=torch.Generator().manual_seed(0))
    n, tokens = accept_sampling_device(logits, window, torch.tensor([2, 2]), u, torch.ones(2))
    assert n.tolist() == [3, 2] and tokens[0].tolist() == [4, 7, 2] and tokens[1, :2].tolist() == [4, 7]
    gen = torch.Generator().manual_seed(0)
    assert accept_sampling(probs[0], [4, 7], gen) == (3, [4, 7, 2])


def test_sampling_preserves_the_target_distribution():
    """Many independent rows in one call: the first emitted token ~ p_0, and after an accepted first draft the
    second ~ p_1 (the target conditioned on that prefix); with no real draft the bonus ~ p_0 too. 40,000 rows:
    a frequency's standard deviation is at most 0.0025, the bound is 4 of them."""
    R, V, T = 40000, 5, 3
    g = torch.Generator().manual_seed(1)
    p = torch.tensor([[0.1, 0.4, 0.3, 0.15, 0.05], [0.3, 0.05, 0.05, 0.4, 0.2], [0.2, 0.2, 0.2, 0.2, 0.2]])
    temperature = 0.7
    logits = (p.log() * temperature).expand(R, T, V)
    window = torch.tensor([0, 1, 3]).expand(R, T)  # drafts 1 then 3
    for nd in (2, 0):
        n, tokens = accept_sampling_device(logits, window, torch.full((R,), nd), torch.rand(R, 2 * T, generator=g),
                                           torch.full((R,), temperature))  # fmt: skip
        first = torch.bincount(tokens[:, 0], minlength=V) / R
        assert (first - p[0]).abs().max() < 0.01, (nd, first)
        if nd == 2:
            took = tokens[:, 0] == 1
            assert torch.equal(took, n >= 2)  # the first draft is emitted exactly when accepted
            second = torch.bincount(tokens[took, 1], minlength=V) / took.sum()
            assert (second - p[1]).abs().max() < 0.02, second
            assert abs(took.float().mean() - p[0, 1]) < 0.01  # accepted with probability p_0(d_0)
        else:
            assert (n == 1).all()


def test_inverse_cdf_never_draws_a_zero_mass_token():
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.0]]).expand(1000, 5)
    u = torch.rand(1000, generator=torch.Generator().manual_seed(2))
    u[:2] = torch.tensor([0.0, 1.0 - 2**-24])
    draws = sample_inverse_cdf(probs, u)
    assert set(draws.tolist()) == {1, 3}


def test_prescribed_counts_pass_through():
    logits = torch.randn(3, 4, 9)
    n, tokens = accept_device(Prescribed(), logits, torch.zeros(3, 4, dtype=torch.long), torch.full((3,), 3),
                              uniforms=torch.zeros(3, 8), temperature=torch.ones(3),
                              prescribed=torch.tensor([1, 4, 2]))  # fmt: skip
    assert n.tolist() == [1, 4, 2] and torch.equal(tokens, logits.argmax(-1))
    window = torch.cat([torch.zeros(3, 1, dtype=torch.long), logits.argmax(-1)[:, :-1]], 1)  # every draft right
    n, _ = accept_device(Greedy(), logits, window, torch.full((3,), 3), uniforms=torch.zeros(3, 8),
                         temperature=torch.ones(3), prescribed=torch.ones(3))  # fmt: skip
    assert n.tolist() == [4, 4, 4]
