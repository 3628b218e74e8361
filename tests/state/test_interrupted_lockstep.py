"""A lockstep pair's call interrupted between its pools: finished by the same call, refused otherwise, dropped by
abort where it can be (replayssm/state/lockstep.py; each test failed before its fix)."""

import pytest
import torch

from replayssm.state import SlotError
from replayssm.state.lockstep import LockstepPool
from tests.helpers import pools
from tests.helpers.interrupts import Stop
from tests.helpers.pools import Weights, inputs, slots


def _pair(**kw):
    a, b = pools.pool("replay", **kw), pools.pool("recurrent", **kw)
    return LockstepPool(a, b), a, b


def _interrupt_shadow(lp, method):
    """The shadow's ``method`` raises ``Stop`` before it writes, once."""
    real = getattr(lp.shadow, method)

    def stop(*a, **kw):
        setattr(lp.shadow, method, real)
        raise Stop(f"between the pools' {method}")

    setattr(lp.shadow, method, stop)


def _pair_with_commit_interrupted():
    """A lockstep pair whose commit of a step over slots [0, 1] ran on the primary only."""
    lp, a, b = _pair()
    lp.alloc(2)
    w = Weights(a.cfg, 6)
    pools.layers(lp, w, [0, 1], inputs(a.cfg, [3, 2], torch.Generator().manual_seed(4)))
    _interrupt_shadow(lp, "commit")
    with pytest.raises(Stop):
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


@pytest.mark.parametrize("method", ["alloc", "free", "fork"])
def test_lockstep_slot_calls_interrupted_between_the_pools_finish_on_retry(method):
    lp, a, b = _pair()
    lp.alloc(2)
    call = {"alloc": lambda: lp.alloc(1), "free": lambda: lp.free(slots([1])), "fork": lambda: lp.fork(slots([0]))}
    _interrupt_shadow(lp, method)
    with pytest.raises(Stop):
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
    with pytest.raises(Stop):
        pools.ssm(lp, w, 0, [0, 1], x)
    lp.abort(slots([0, 1]))
    assert a.tracker.step is None and b.tracker.step is None
    pools.step(lp, w, [0, 1], x, [3, 2])
    assert lp.states_equal(slots([0, 1]))


def test_an_interrupted_lockstep_call_with_nan_inputs_resumes():
    lp, a, b = _pair()
    s = lp.alloc(1)
    state = torch.full((1, 2, 16, 16), float("nan"))
    conv = torch.zeros(1, 3, 64)
    _interrupt_shadow(lp, "_write_prefill")
    with pytest.raises(Stop):
        lp.write_prefill(0, s, state, conv)
    lp.write_prefill(0, s, state.clone(), conv.clone())  # equal values, NaN included
    assert torch.isnan(b.checkpoint[0, 0]).all()
