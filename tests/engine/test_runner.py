"""The runner's step protocol: one step in flight, committed once, pool and KV cache together."""

from dataclasses import replace

import pytest
import torch

from replayssm.engine.accept import Greedy, Prescribed, Sampling
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


def _bad_steps(slots, other):
    ok = dict(slots=slots, tokens=torch.tensor([[8, 9, 10], [1, 2, 3]]), num_drafts=[2, 2], rule=Greedy())
    return [
        (dict(slots=[slots[0], slots[0]]), "2 distinct ints"),
        (dict(slots=[slots[0], other]), rf"slots \[{other}\] are not allocated"),
        (dict(slots=slots[:1]), "one slot per row of tokens"),
        (dict(tokens=torch.tensor([[8, 9, 256], [1, 2, 3]])), r"\[256\] are outside the vocabulary"),
        (dict(tokens=torch.tensor([[8.0, 9, 10], [1, 2, 3]])), "must be integers"),
        (dict(tokens=torch.ones(2, 4, dtype=torch.long)), "verifies 1..3"),
        (dict(num_drafts=[2, 3]), r"num_drafts \[3\] are outside \[0, 2\]"),
        (dict(num_drafts=[2]), "num_drafts has 1 entries for a step of 2 rows"),
        (dict(rule="greedy"), "rule must be"),
        (dict(rule=Prescribed()), "prescribed must be a list of 2 ints"),
        (dict(rule=Prescribed(), prescribed=[1, 4]), r"prescribed \[4\] are outside \[1, 3\]"),
        (dict(rule=Sampling(0.5), temperature=0.5), "uniforms must be a"),
        (dict(rule=Sampling(0.5), temperature=0.5, uniforms=torch.full((2, 6), 2.0)), r"values in \[0, 1\)"),
        (dict(rule=Sampling(0.5), temperature=0.5, uniforms=torch.ones(2, 6)), r"values in \[0, 1\)"),  # drew V-1
        (
            dict(rule=Sampling(0.5), uniforms=torch.rand(2, 6)),
            "must be >= 1e-05 and equal Sampling.temperature "
            r"\(0.5\): pass temperature=0.5",
        ),
        (dict(rule=Sampling(0.5)), "uniforms must be a"),  # (named the defaulted temperature before: a review)
        (dict(uniforms=torch.rand(2, 6)), "read by the Sampling rule only"),
        (dict(device_drafts=True, tokens=torch.ones(2, 1, dtype=torch.long), num_drafts=None), "device drafter"),
    ], ok


def test_step_and_commit_checks_everything_on_the_host_first(tiny_model_dir):
    """Issue 11: every argument of the engine's step is checked before KV pages are reserved or the (captured)
    step runs; a refused step leaves the GDN state, the KV cache and the runner's books as they were."""
    runner = ModelRunner(load_model(tiny_model_dir), RunnerConfig(max_slots=3, max_len=64, window=3, kv_tokens=128,
                                                                  page_size=16))  # fmt: skip
    slots = [runner.alloc(), runner.alloc()]
    runner.prefill(slots, [[5, 6, 7], [9, 10, 11]])
    s = torch.tensor(slots, dtype=torch.int32)
    state = [runner.pool.committed_state(i, s) for i in range(runner.pool.cfg.num_layers)]
    books = (runner.kv.lens.clone(), [list(p) for p in runner.kv._pages], list(runner._lens), dict(runner._graphs))
    bad, ok = _bad_steps(slots, other=2)
    for change, message in bad:
        kw = dict(ok, **change)
        with pytest.raises((ValueError, TypeError), match=message):
            runner.step_and_commit(kw.pop("slots"), kw.pop("tokens"), kw.pop("num_drafts"), kw.pop("rule"), **kw)
        assert torch.equal(books[0], runner.kv.lens) and books[1:] == ([list(p) for p in runner.kv._pages],
                                                                       runner._lens, runner._graphs)  # fmt: skip
    for i, st in enumerate(state):
        assert torch.equal(st, runner.pool.committed_state(i, s))
    n, _ = runner.step_and_commit(slots, ok["tokens"], ok["num_drafts"])  # and the good one runs
    assert runner.kv_len(slots[0]) == 3 + n[0]
