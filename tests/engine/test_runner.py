"""The runner's step protocol: one step in flight, committed once, pool and KV cache together."""

from dataclasses import replace

import pytest
import torch

from replayssm.engine.runner import ModelRunner, RunnerConfig, pool_config
from replayssm.models.loader import load_model
from replayssm.state import GDNStatePool


def test_step_commit_protocol(tiny_model_dir):
    model = load_model(tiny_model_dir)
    runner = ModelRunner(model, RunnerConfig(max_slots=2, max_len=64, window=3))
    with pytest.raises(RuntimeError, match="no step to commit"):
        runner.commit([1])
    slot = runner.alloc()
    runner.prefill(slot, [5, 6, 7])
    logits = runner.step([slot], torch.tensor([[8, 9, 10]]))
    assert logits.shape == (1, 3, model.config.vocab_size)
    with pytest.raises(RuntimeError, match="not committed yet"):
        runner.step([slot], torch.tensor([[8, 9, 10]]))
    with pytest.raises(ValueError, match="num_accepted has 2 entries for a step of 1 rows"):
        runner.commit([1, 1])
    runner.commit([2])
    assert int(runner.kv.lens[slot]) == 3 + 2  # the KV cache moved with the GDN state
    assert int(runner.pool.cursors.write_pos[slot]) == 2


def test_pool_is_configured_not_swapped(tiny_model_dir):
    model = load_model(tiny_model_dir)
    cfg = RunnerConfig(max_slots=2, max_len=64)
    pool = GDNStatePool(pool_config(model, cfg))
    assert ModelRunner(model, cfg, pool=pool).pool is pool
    with pytest.raises(ValueError, match="pool must be built for pool_config"):
        ModelRunner(model, replace(cfg, window=2), pool=pool)


class ConstantDrafter:
    """A device drafter stand-in: drafts token 7 everywhere; records what the runner's step hands it."""

    def __init__(self, window):
        self.window, self.calls = window, []

    def prefill(self, slot, ids, hidden):
        self.calls.append(("prefill", slot, ids.shape[0], hidden.shape[0]))

    def propose(self, step, last):
        self.calls.append(("propose", step.T))
        return torch.full((last.shape[0], self.window - 1), 7, dtype=torch.long, device=last.device)

    def observe(self, step, window, hidden):
        self.calls.append(("observe", tuple(window.shape), hidden.shape[0]))

    def commit(self, slots, num_accepted):
        self.calls.append(("commit", num_accepted.tolist()))


def test_step_and_commit_is_step_accept_commit(tiny_model_dir):
    """The fused device step (forward, greedy acceptance, commit) gives what step() + host acceptance +
    commit() gives, and leaves the same state; a device drafter's hooks run inside it."""
    from replayssm.engine.spec import accept_greedy

    model = load_model(tiny_model_dir)
    runners = [ModelRunner(model, RunnerConfig(max_slots=3, max_len=64, window=4)) for _ in range(2)]
    for r in runners:
        for s, p in enumerate(([5, 6, 7], [9, 10], [3, 4, 5, 6])):
            assert r.alloc() == s
            r.prefill(s, p)
    tokens = torch.tensor([[8, 9, 10, 11], [11, 12, 13, 14], [7, 8, 9, 10]])
    logits = runners[0].step([0, 1, 2], tokens)
    ref = [accept_greedy(logits[i].argmax(-1).tolist(), tokens[i, 1 : 1 + nd].tolist()) for i, nd in
           enumerate((3, 1, 0))]  # fmt: skip
    runners[0].commit([n for n, _ in ref])
    n, produced = runners[1].step_and_commit([0, 1, 2], tokens, [3, 1, 0])
    assert (n, produced) == ([k for k, _ in ref], [t for _, t in ref])
    s = torch.tensor([0, 1, 2], dtype=torch.int32)
    assert torch.equal(runners[0].kv.lens, runners[1].kv.lens)
    for layer in range(runners[0].pool.cfg.num_layers):
        assert torch.equal(runners[0].pool.committed_state(layer, s), runners[1].pool.committed_state(layer, s))
    drafter = ConstantDrafter(4)
    runners[1].drafter = drafter
    n, produced = runners[1].step_and_commit([2, 0], torch.tensor([[1], [2]]), None, device_drafts=True)
    kinds = [c[0] for c in drafter.calls]
    assert kinds == ["propose", "observe", "commit"] and drafter.calls[1][1] == (2, 4)
    assert drafter.calls[2][1] == n and all(t[:-1] == [7] * (k - 1) for t, k in zip(produced, n))
