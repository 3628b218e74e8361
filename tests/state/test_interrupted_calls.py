"""Calls that fail part-way through their writes (a failed launch, an interrupt): a sixth misuse review.

A pool's commit, a lockstep pair's call and a fork or restore each write more than one thing. Failing between two
of those writes must leave something a retry finishes exactly as one call would have, and nothing leaks: each test
here failed before its fix (the commit was applied twice on retry, the pair stayed apart, the new slots leaked).
"""

import copy

import pytest
import torch

import replayssm.state.commit as commit_module
import replayssm.state.pool as pool_module
import replayssm.state.transfer as transfer_module
from replayssm.state import SlotError
from replayssm.state.lockstep import LockstepPool
from tests.helpers import pools
from tests.helpers.pools import Weights, device_state, inputs, same, slot_state, slots


class _Stop(BaseException):  # like KeyboardInterrupt: not an Exception, so nothing catches it on the way
    pass


def _fail_after(module, name: str, *, before: bool = False):
    """Make ``module.name`` run, then raise ``_Stop`` (``before``: raise without running); returns the undo."""
    op = getattr(module, name)

    def run(*a, **kw):
        if not before:
            op(*a, **kw)
        raise _Stop(f"after {name} wrote")

    setattr(module, name, run)
    return lambda: setattr(module, name, op)


def _steps(p, w, first_commit):
    """Two steps over slots 0 and 1: the first committed by ``first_commit(p)``, the second plainly (so a wrong
    cursor or conv state after the first shows in the second's outputs and states)."""
    g = torch.Generator().manual_seed(3)
    pools.layers(p, w, [0, 1], inputs(p.cfg, [3, 2], g))
    first_commit(p)
    out = pools.step(p, w, [0, 1], inputs(p.cfg, [3, 3], g), [3, 1])
    return out, slot_state(p, [0, 1]), device_state(p)


def _fresh(backend):
    p = pools.pool(backend)
    p.alloc(2)
    return p, Weights(p.cfg, 5)


WRITES = {"replay": ("ring_commit", "conv_commit"), "recurrent": ("commit_snapshots", "conv_commit")}


def _commit_failing_in(p, name: str, rows=(0, 1), counts=(2, 1), *, before: bool = False) -> None:
    """``p.commit(rows, counts)`` with ``commit_module.name`` failing after (or ``before``) it ran."""
    undo = _fail_after(commit_module, name, before=before)
    try:
        with pytest.raises(_Stop):
            p.commit(slots(rows), slots(counts))
    finally:
        undo()


def _interrupted_commit(q, backend, part):
    _commit_failing_in(q, WRITES[backend][part])


@pytest.mark.parametrize("backend", ["replay", "recurrent"])
@pytest.mark.parametrize("part", [0, 1])
def test_a_commit_that_failed_part_way_finishes_on_retry(backend, part):
    p, w = _fresh(backend)
    clean = _steps(p, w, lambda q: q.commit(slots([0, 1]), slots([2, 1])))

    def interrupted(q):
        _interrupted_commit(q, backend, part)
        books = copy.deepcopy(q.tracker.__dict__)
        dev = device_state(q, scratch=True)
        with pytest.raises(SlotError, match=r"num_accepted=\[2, 1\] was interrupted"):
            q.commit(slots([0, 1]), slots([1, 1]))
        assert same(device_state(q, scratch=True), dev) and q.tracker.__dict__ == books
        q.commit(slots([0, 1]), slots([2, 1]))

    p2, w2 = _fresh(backend)
    got = _steps(p2, w2, interrupted)
    for a, b in zip(clean, got):
        assert same(a, b)


@pytest.mark.parametrize("part", [0, 1])
def test_a_replay_commit_that_failed_part_way_is_rolled_back_by_abort(part):
    """The step aborted after a half-done commit, then run again and committed: what an abort before any commit,
    then the same, gives."""
    x0 = inputs(pools.pool().cfg, [3, 2], torch.Generator().manual_seed(9))

    def run(fail):
        p, w = _fresh("replay")
        pools.layers(p, w, [0, 1], x0)
        if fail:
            _interrupted_commit(p, "replay", part)
        assert p.abort(slots([0, 1])) == []
        return _steps(p, w, lambda q: q.commit(slots([0, 1]), slots([3, 2])))

    for a, b in zip(run(False), run(True)):
        assert same(a, b)


@pytest.mark.parametrize("part", [0, 1])
def test_a_recurrent_commit_that_may_have_written_the_state_loses_its_rows_on_abort(part):
    p, w = _fresh("recurrent")
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
        p, w = _fresh("replay")
        outs = []
        for i, x in enumerate(xs):
            outs += pools.layers(p, w, [0, 1], x)
            if fail and i == 4:  # a flushing step (L=8, T=3: every few steps)
                _commit_failing_in(p, "gdn_fold_ahead", counts=(3, 3), before=before)
                assert p.tracker.step is None
                if retry:
                    p.commit(slots([0, 1]), slots([3, 3]))
            else:
                p.commit(slots([0, 1]), slots([3, 3]))
        return outs, slot_state(p, [0, 1])

    clean, got = run(False), run(True)
    assert same(clean[0], got[0]) and same(clean[1], got[1])


def _pair(**kw):
    a, b = pools.pool("replay", **kw), pools.pool("recurrent", **kw)
    return LockstepPool(a, b), a, b


def _interrupt_shadow(lp, method):
    """The shadow's ``method`` raises ``_Stop`` before it writes, once."""
    real = getattr(lp.shadow, method)

    def stop(*a, **kw):
        setattr(lp.shadow, method, real)
        raise _Stop(f"between the pools' {method}")

    setattr(lp.shadow, method, stop)


def _pair_with_commit_interrupted():
    """A lockstep pair whose commit of a step over slots [0, 1] ran on the primary only."""
    lp, a, b = _pair()
    lp.alloc(2)
    w = Weights(a.cfg, 6)
    pools.layers(lp, w, [0, 1], inputs(a.cfg, [3, 2], torch.Generator().manual_seed(4)))
    _interrupt_shadow(lp, "commit")
    with pytest.raises(_Stop):
        lp.commit(slots([0, 1]), slots([2, 1]))
    return lp, a, b, w


def test_a_lockstep_commit_interrupted_between_the_pools_finishes_on_retry_and_refuses_anything_else():
    lp, a, b, w = _pair_with_commit_interrupted()
    assert a.tracker.step is None and b.tracker.step is not None  # apart
    for call in (lambda: lp.alloc(1), lambda: lp.commit(slots([0, 1]), slots([1, 1]))):
        with pytest.raises(RuntimeError, match="interrupted commit ran on 1 of the 2 lockstep pools"):
            call()
    lp.commit(slots([0, 1]), slots([2, 1]))
    assert a.tracker.step is None and b.tracker.step is None and lp.states_equal(slots([0, 1]))
    pools.step(lp, w, [0, 1], inputs(a.cfg, [2, 3], torch.Generator().manual_seed(5)), [2, 3])
    assert lp.states_equal(slots([0, 1]))


@pytest.mark.parametrize("method", ["alloc", "free", "fork"])
def test_lockstep_slot_calls_interrupted_between_the_pools_finish_on_retry(method):
    lp, a, b = _pair()
    lp.alloc(2)
    call = {"alloc": lambda: lp.alloc(1), "free": lambda: lp.free(slots([1])), "fork": lambda: lp.fork(slots([0]))}
    _interrupt_shadow(lp, method)
    with pytest.raises(_Stop):
        call[method]()
    assert a.tracker.live != b.tracker.live
    got = call[method]()
    assert a.tracker.live == b.tracker.live and a.tracker._free == b.tracker._free
    if method != "free":
        assert got.tolist() == [2]


def test_a_lockstep_verify_interrupted_between_the_pools_is_dropped_by_abort():
    lp, a, b = _pair()
    lp.alloc(2)
    w = Weights(a.cfg, 7)
    x = inputs(a.cfg, [3, 2], torch.Generator().manual_seed(6))
    pools.conv(lp, w, 0, [0, 1], x)
    _interrupt_shadow(lp, "verify")
    with pytest.raises(_Stop):
        pools.ssm(lp, w, 0, [0, 1], x)
    lp.abort(slots([0, 1]))
    assert a.tracker.step is None and b.tracker.step is None
    pools.step(lp, w, [0, 1], x, [3, 2])
    assert lp.states_equal(slots([0, 1]))


@pytest.mark.parametrize("backend", ["replay", "recurrent"])
@pytest.mark.parametrize("what", ["fork", "restore"])
def test_a_fork_or_restore_that_fails_while_copying_leaks_no_slot_and_a_retry_gets_the_same_ids(backend, what):
    p, w = _fresh(backend)
    pools.step(p, w, [0, 1], inputs(p.cfg, [3, 2], torch.Generator().manual_seed(8)), [2, 2])
    parked = p.offload(slots([1]))
    call = (lambda: p.fork(slots([0]))) if what == "fork" else (lambda: p.restore(parked))
    free, books = p.num_free, copy.deepcopy(p.tracker.__dict__)
    undo = _fail_after(transfer_module, "_scatter")
    try:
        with pytest.raises(_Stop):
            call()
    finally:
        undo()
    assert p.num_free == free and p.tracker.__dict__ == books
    new = call()
    assert new.tolist() == [2]
    src = [0] if what == "fork" else [1]
    assert same(slot_state(p, [2]), slot_state(p, src))


def test_the_runner_s_commit_interrupted_between_the_gdn_state_and_the_kv_cache_finishes_on_retry():
    from replayssm.engine.llm import LLM
    from replayssm.tiny import TINY_MODEL

    def run(interrupt):
        llm = LLM(TINY_MODEL, backend="replay", window=2, drafter="ngram", device="cpu", dtype=torch.float32,
                  max_slots=2, max_len=64, cuda_graphs=False)  # fmt: skip
        r = llm.runner
        slot = r.alloc()
        r.prefill(slot, [1, 2, 3, 4])
        r.step([slot], torch.tensor([[5, 6]]))
        if interrupt:
            real = r.kv.commit

            def stop(*a, **kw):
                real(*a, **kw)  # the lengths moved, then the interrupt
                raise _Stop

            r.kv.commit = stop
            with pytest.raises(_Stop):
                r.commit([2])
            r.kv.commit = real
            with pytest.raises(RuntimeError, match="interrupted"):
                r.abort()
            with pytest.raises(ValueError, match=r"num_accepted: a commit with \[2\] was interrupted"):
                r.commit([1])
        r.commit([2])
        logits = r.step([slot], torch.tensor([[7, 8]]))
        r.commit([1])
        return r.kv_len(slot), logits, [r.pool.committed_state(i, slots([slot])) for i in range(r.pool.cfg.num_layers)]

    clean, got = run(False), run(True)
    assert clean[0] == got[0] == 4 + 2 + 1
    assert torch.equal(clean[1], got[1]) and same(clean[2], got[2])


def _tiny_runner(cuda_graphs=False):
    from replayssm.engine.llm import LLM
    from replayssm.tiny import TINY_MODEL

    llm = LLM(TINY_MODEL, backend="replay", window=2, drafter="ngram", device="cpu", dtype=torch.float32,
              max_slots=2, max_len=64, cuda_graphs=cuda_graphs)  # fmt: skip
    r = llm.runner
    slot = r.alloc()
    r.prefill(slot, [1, 2, 3, 4])
    return r, slot


def _gdn_state(r, slot):
    return [r.pool.committed_state(i, slots([slot])) for i in range(r.pool.cfg.num_layers)]


def test_the_runner_rolls_back_a_commit_whose_gdn_part_failed():
    def run(fail):
        r, slot = _tiny_runner()
        r.step([slot], torch.tensor([[5, 6]]))
        if fail:
            undo = _fail_after(commit_module, "conv_commit")
            try:
                with pytest.raises(_Stop):
                    r.commit([2])
            finally:
                undo()
        r.abort()
        logits = r.step([slot], torch.tensor([[7, 8]]))
        r.commit([1])
        return r.kv_len(slot), logits, _gdn_state(r, slot)

    clean, got = run(False), run(True)
    assert clean[0] == got[0] == 4 + 1
    assert torch.equal(clean[1], got[1]) and same(clean[2], got[2])


@pytest.mark.parametrize("where", ["gdn", "kv"])
def test_a_fused_step_whose_commit_failed_leaves_the_runner_usable(where):
    """step_and_commit's commit fails inside the step, in the GDN state's part or the KV lengths': the step is rolled
    back (the first left the slot refused by every later call, the second the GDN state a step ahead of the KV
    cache), and the same step again gives a clean run's tokens and state."""
    from replayssm.engine.accept import Greedy

    def run(fail):
        r, slot = _tiny_runner()
        if fail:
            undo = _fail_after(commit_module, "conv_commit") if where == "gdn" else _fail_after(r.kv, "commit")
            try:
                with pytest.raises(_Stop):
                    r.step_and_commit([slot], torch.tensor([[5, 6]]), [1], Greedy())
            finally:
                undo()
        got = r.step_and_commit([slot], torch.tensor([[5, 6]]), [1], Greedy())
        return got, r.kv_len(slot), _gdn_state(r, slot)

    clean, got = run(False), run(True)
    assert clean[:2] == got[:2] and same(clean[2], got[2])


def test_an_interrupted_lockstep_call_with_nan_inputs_resumes():
    lp, a, b = _pair()
    s = lp.alloc(1)
    state = torch.full((1, 2, 16, 16), float("nan"))
    conv = torch.zeros(1, 3, 64)
    _interrupt_shadow(lp, "_write_prefill")
    with pytest.raises(_Stop):
        lp.write_prefill(0, s, state, conv)
    lp.write_prefill(0, s, state.clone(), conv.clone())  # equal values, NaN included
    assert torch.isnan(b.checkpoint[0, 0]).all()


@pytest.mark.parametrize("backend", ["replay", "recurrent"])
def test_step_calls_keep_no_autograd_graph(backend):
    p, w = _fresh(backend)
    x = {k: (v.requires_grad_(True) if v.is_floating_point() else v)
         for k, v in inputs(p.cfg, [3, 2], torch.Generator().manual_seed(12)).items()}  # fmt: skip
    outs = pools.step(p, w, [0, 1], x, [2, 2])
    for t in [*device_state(p, scratch=True), *outs]:
        assert t.grad_fn is None and not t.requires_grad
    for t in (p.checkpoint, p.conv_state, p.conv_scratch):
        assert t.grad_fn is None


@pytest.mark.parametrize("finish", ["retry", "abort"])
def test_a_padding_row_does_not_save_or_put_back_slot_0_s_cursors(finish):
    """A step over [1, -1] whose commit failed, then slot 0 (idle) flushed, then the commit retried or aborted: the
    padding row had saved slot 0's cursors and put them back over the flush (a review of c4f408d)."""

    def run(fail):
        p, w = _fresh("replay")
        g = torch.Generator().manual_seed(3)
        outs = pools.step(p, w, [0, 1], inputs(p.cfg, [3, 3], g), [1, 2])
        x = inputs(p.cfg, [3, 1], g)
        pools.layers(p, w, [1, -1], x)
        if fail:
            _commit_failing_in(p, "ring_commit", (1, -1), (2, 1))
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
    p, w = _fresh("replay")
    pools.layers(p, w, [0, 1], inputs(p.cfg, [3, 3], torch.Generator().manual_seed(13)))
    _commit_failing_in(p, "gdn_fold_ahead", counts=(3, 3), before=True)
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
        undo = _fail_after(pool_module, "gdn_replay_verify")
        try:
            with pytest.raises(_Stop):
                pools.ssm(p, w, 0, [0, 1], x)
        finally:
            undo()
        p.abort(slots([0, 1]))
    with pytest.raises(SlotError, match="no verified step"):
        p.commit(slots([0, 1]), slots([3, 3]))


def test_the_runner_finishes_a_commit_whose_fold_ahead_failed_and_refuses_to_abort_it(monkeypatch):
    monkeypatch.setenv("REPLAYSSM_FOLD_AHEAD", "1")

    def run(fail):
        r, slot = _tiny_runner()
        r.step([slot], torch.tensor([[5, 6]]))
        if fail:
            undo = _fail_after(commit_module, "gdn_fold_ahead", before=True)
            try:
                with pytest.raises(_Stop):
                    r.commit([2])
            finally:
                undo()
            with pytest.raises(RuntimeError, match="after the GDN state took the step"):
                r.abort()
        r.commit([2])
        logits = r.step([slot], torch.tensor([[7, 8]]))
        r.commit([1])
        return r.kv_len(slot), logits, _gdn_state(r, slot)

    clean, got = run(False), run(True)
    assert clean[0] == got[0] and torch.equal(clean[1], got[1]) and same(clean[2], got[2])


def test_a_fused_step_whose_fold_ahead_failed_loses_its_rows(monkeypatch):
    """The GDN state took the step (its lengths were put back) and the engine gets an exception, not its tokens: the
    rows are lost (the engine gives their requests up) rather than left a step ahead of what the engine knows."""
    from replayssm.engine.accept import Greedy

    monkeypatch.setenv("REPLAYSSM_FOLD_AHEAD", "1")
    r, slot = _tiny_runner()
    undo = _fail_after(commit_module, "gdn_fold_ahead", before=True)
    try:
        with pytest.raises(_Stop):
            r.step_and_commit([slot], torch.tensor([[5, 6]]), [1], Greedy())
    finally:
        undo()
    assert slot in r.lost


def test_a_lockstep_commit_interrupted_between_the_pools_is_aborted_with_its_rows_lost():
    """The primary took the step, the shadow did not: abort can drop it from the shadow only, so the rows are lost in
    both (it used to be refused, which left a runner's failed step with no way out)."""
    lp, a, b, w = _pair_with_commit_interrupted()
    assert lp.abort(slots([0, 1])) == [0, 1]
    assert lp.step_in_flight() is False
    with pytest.raises(SlotError, match="lost their state"):
        lp.committed_state(0, slots([0]))
    lp.free(slots([0, 1]))
    assert sorted(lp.alloc(2).tolist()) == [0, 1]


def test_a_fused_step_failing_after_its_commit_loses_its_rows(monkeypatch):
    """Anything failing after the commit ran (here: building the step's result): the GDN state took the step, so the
    rows are lost; the lengths were not put back under a committed state (a review of da8b57d)."""
    import replayssm.engine.runner as runner_module
    from replayssm.engine.accept import Greedy

    r, slot = _tiny_runner()

    def stop(*a, **kw):
        raise _Stop("after the commit")

    monkeypatch.setattr(runner_module, "PendingStep", stop)
    with pytest.raises(_Stop):
        r.step_and_commit([slot], torch.tensor([[5, 6]]), [1], Greedy())
    assert slot in r.lost


@pytest.mark.parametrize("where", ["gdn", "kv"])
def test_a_fused_step_with_the_mtp_drafter_rolls_back_to_a_clean_run(where):
    """What the drafter's commit wrote comes back with the lengths (``commit_counters``: its cache's lengths and its
    accepted counts, from which ``propose`` catches up: a review of da8b57d), and later steps give a clean run's
    tokens and state. (Its drafts may differ: the failed step's observed window is not rolled back,
    ``ModelRunner.abort``.)"""
    from replayssm.engine.accept import Greedy, Prescribed
    from replayssm.engine.config import RunnerConfig
    from replayssm.engine.runner import ModelRunner
    from replayssm.models.loader import load_model
    from replayssm.tiny import TINY_MODEL

    model = load_model(TINY_MODEL, mtp="auto", dtype=torch.float32, device="cpu")

    def run(fail):
        r = ModelRunner(model, RunnerConfig(max_slots=2, max_len=64, window=3, device_drafter="mtp"))
        slot = r.alloc()
        r.prefill(slot, [1, 2, 3, 4])
        last = torch.tensor([[5]])
        before = [r.drafter.kv.lens.clone(), r.drafter.num_accepted.clone()]
        if fail:
            undo = _fail_after(commit_module, "conv_commit") if where == "gdn" else _fail_after(r.kv, "commit")
            try:
                with pytest.raises(_Stop):  # (3 accepted: the drafter's count moves, 1 -> 3)
                    r.step_and_commit([slot], last, None, Prescribed(), prescribed=[3], device_drafts=True)
            finally:
                undo()
            assert same([r.drafter.kv.lens, r.drafter.num_accepted], before)
        out = []
        for _ in range(4):
            n, produced = r.step_and_commit([slot], last, None, Greedy(), device_drafts=True)
            out.append((n, produced))
            last = torch.tensor([[produced[0][-1]]])
        return out, _gdn_state(r, slot)

    clean, got = run(False), run(True)
    assert clean[0] == got[0] and same(clean[1], got[1])
