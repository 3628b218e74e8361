"""A pool's calls that fail part-way through their writes (a failed launch, an interrupt): its commit finished by a
retry or rolled back by abort, a fold ahead that failed after the commit owed, fork and restore giving their slots
back (replayssm/state/commit.py; a sixth misuse review and three reviews of its fixes: each test failed before its
fix)."""

import copy

import pytest
import torch

import replayssm.state.pool as pool_module
import replayssm.state.transfer as transfer_module
from replayssm.state import SlotError
from tests.helpers import pools
from tests.helpers.interrupts import Stop, commit_failing_in, fail_after, fresh, two_steps
from tests.helpers.pools import Weights, device_state, inputs, same, slot_state, slots

WRITES = {"replay": ("ring_commit", "conv_commit"), "recurrent": ("commit_snapshots", "conv_commit")}


def _interrupted_commit(q, backend, part):
    commit_failing_in(q, WRITES[backend][part])


@pytest.mark.parametrize("backend", ["replay", "recurrent"])
@pytest.mark.parametrize("part", [0, 1])
def test_a_commit_that_failed_part_way_finishes_on_retry(backend, part):
    p, w = fresh(backend)
    clean = two_steps(p, w, lambda q: q.commit(slots([0, 1]), slots([2, 1])))

    def interrupted(q):
        _interrupted_commit(q, backend, part)
        books = copy.deepcopy(q.tracker.__dict__)
        dev = device_state(q, scratch=True)
        with pytest.raises(SlotError, match=r"num_accepted=\[2, 1\] was interrupted"):
            q.commit(slots([0, 1]), slots([1, 1]))
        assert same(device_state(q, scratch=True), dev) and q.tracker.__dict__ == books
        q.commit(slots([0, 1]), slots([2, 1]))

    p2, w2 = fresh(backend)
    got = two_steps(p2, w2, interrupted)
    for a, b in zip(clean, got):
        assert same(a, b)


@pytest.mark.parametrize("part", [0, 1])
def test_a_replay_commit_that_failed_part_way_is_rolled_back_by_abort(part):
    """The step aborted after a half-done commit, then run again and committed: what an abort before any commit,
    then the same, gives."""
    x0 = inputs(pools.pool().cfg, [3, 2], torch.Generator().manual_seed(9))

    def run(fail):
        p, w = fresh("replay")
        pools.layers(p, w, [0, 1], x0)
        if fail:
            _interrupted_commit(p, "replay", part)
        assert p.abort(slots([0, 1])) == []
        return two_steps(p, w, lambda q: q.commit(slots([0, 1]), slots([3, 2])))

    for a, b in zip(run(False), run(True)):
        assert same(a, b)


@pytest.mark.parametrize("part", [0, 1])
def test_a_recurrent_commit_that_may_have_written_the_state_loses_its_rows_on_abort(part):
    p, w = fresh("recurrent")
    pools.layers(p, w, [0, 1], inputs(p.cfg, [3, 2], torch.Generator().manual_seed(10)))
    _interrupted_commit(p, "recurrent", part)
    assert p.abort(slots([0, 1])) == [0, 1]
    with pytest.raises(SlotError, match="lost their state"):
        p.committed_state(0, slots([0]))
    p.free(slots([0, 1]))


@pytest.mark.parametrize("before", [True, False])
@pytest.mark.parametrize("retry", [True, False])
def test_a_fold_ahead_that_failed_after_the_commit_is_owed(retry, before, monkeypatch):
    """The commit is whole once the step ends; its fold ahead failing after it is run by the same commit again, or
    left to the next verify (as any flagged row's fold)."""
    monkeypatch.setenv("REPLAYSSM_FOLD_AHEAD", "1")
    g = torch.Generator().manual_seed(11)
    xs = [inputs(pools.pool().cfg, [3, 3], g) for _ in range(8)]

    def run(fail):
        p, w = fresh("replay")
        outs = []
        for i, x in enumerate(xs):
            outs += pools.layers(p, w, [0, 1], x)
            if fail and i == 4:  # a flushing step (L=8, T=3: every few steps)
                commit_failing_in(p, "gdn_fold_ahead", counts=(3, 3), before=before)
                assert p.tracker.step is None
                if retry:
                    p.commit(slots([0, 1]), slots([3, 3]))
            else:
                p.commit(slots([0, 1]), slots([3, 3]))
        return outs, slot_state(p, [0, 1])

    clean, got = run(False), run(True)
    assert same(clean[0], got[0]) and same(clean[1], got[1])


@pytest.mark.parametrize("finish", ["retry", "abort"])
def test_a_padding_row_does_not_save_or_put_back_slot_0_s_cursors(finish):
    """A step over [1, -1] whose commit failed, then slot 0 (idle) flushed, then the commit retried or aborted: the
    padding row had saved slot 0's cursors and put them back over the flush (a review of c4f408d)."""

    def run(fail):
        p, w = fresh("replay")
        g = torch.Generator().manual_seed(3)
        outs = pools.step(p, w, [0, 1], inputs(p.cfg, [3, 3], g), [1, 2])
        x = inputs(p.cfg, [3, 1], g)
        pools.layers(p, w, [1, -1], x)
        if fail:
            commit_failing_in(p, "ring_commit", (1, -1), (2, 1))
        p.flush(slots([0]))
        if finish == "retry":
            p.commit(slots([1, -1]), slots([2, 1]))
        else:
            p.abort(slots([1, -1]))
            outs += pools.step(p, w, [1, -1], x, [2, 1])
        for _ in range(4):
            outs += pools.step(p, w, [0, 1], inputs(p.cfg, [3, 3], g), [3, 3])
        return outs, slot_state(p, [0, 1])

    clean, got = run(False), run(True)
    assert same(clean[0], got[0]) and same(clean[1], got[1])


def _owing_pool(monkeypatch):
    """A replay pool whose commit of slots [0, 1] took its step and then failed to fold ahead."""
    monkeypatch.setenv("REPLAYSSM_FOLD_AHEAD", "1")
    p, w = fresh("replay")
    pools.layers(p, w, [0, 1], inputs(p.cfg, [3, 3], torch.Generator().manual_seed(13)))
    commit_failing_in(p, "gdn_fold_ahead", counts=(3, 3), before=True)
    assert p.step_in_flight() is False
    return p


def test_abort_after_a_commit_that_took_the_step_returns_its_rows_lost(monkeypatch):
    p = _owing_pool(monkeypatch)
    assert p.abort(slots([0, 1])) == [0, 1]
    with pytest.raises(SlotError, match="lost their state"):
        p.committed_state(0, slots([0]))
    p.free(slots([0, 1]))


@pytest.mark.parametrize("then", ["free", "alloc", "failed step"])
def test_an_owed_fold_does_not_let_a_later_commit_without_a_step_pass(then, monkeypatch):
    p = _owing_pool(monkeypatch)
    if then == "free":
        p.free(slots([0, 1]))
        p.alloc(2)
    elif then == "alloc":
        p.alloc(1)
    else:
        w = Weights(p.cfg, 5)
        x = inputs(p.cfg, [2, 2], torch.Generator().manual_seed(14))
        pools.conv(p, w, 0, [0, 1], x)
        undo = fail_after(pool_module, "gdn_replay_verify")
        try:
            with pytest.raises(Stop):
                pools.ssm(p, w, 0, [0, 1], x)
        finally:
            undo()
        p.abort(slots([0, 1]))
    with pytest.raises(SlotError, match="no verified step"):
        p.commit(slots([0, 1]), slots([3, 3]))


@pytest.mark.parametrize("backend", ["replay", "recurrent"])
@pytest.mark.parametrize("what", ["fork", "restore"])
def test_a_fork_or_restore_that_fails_while_copying_leaks_no_slot_and_a_retry_gets_the_same_ids(backend, what):
    p, w = fresh(backend)
    pools.step(p, w, [0, 1], inputs(p.cfg, [3, 2], torch.Generator().manual_seed(8)), [2, 2])
    parked = p.offload(slots([1]))
    call = (lambda: p.fork(slots([0]))) if what == "fork" else (lambda: p.restore(parked))
    free, books = p.num_free, copy.deepcopy(p.tracker.__dict__)
    undo = fail_after(transfer_module, "_scatter")
    try:
        with pytest.raises(Stop):
            call()
    finally:
        undo()
    assert p.num_free == free and p.tracker.__dict__ == books
    new = call()
    assert new.tolist() == [2]
    src = [0] if what == "fork" else [1]
    assert same(slot_state(p, [2]), slot_state(p, src))


@pytest.mark.parametrize("backend", ["replay", "recurrent"])
def test_step_calls_keep_no_autograd_graph(backend):
    p, w = fresh(backend)
    x = {k: (v.requires_grad_(True) if v.is_floating_point() else v)
         for k, v in inputs(p.cfg, [3, 2], torch.Generator().manual_seed(12)).items()}  # fmt: skip
    outs = pools.step(p, w, [0, 1], x, [2, 2])
    for t in [*device_state(p, scratch=True), *outs]:
        assert t.grad_fn is None and not t.requires_grad
    for t in (p.checkpoint, p.conv_state, p.conv_scratch):
        assert t.grad_fn is None
