"""An eighth misuse review (2026-12-05, twenty-eighth session): a strided ``slots`` view passed to a pool's commit,
abort or flush. Its ids were valid, so the calls got past their own checks, noted the commit as begun (recurrent:
its state as written), and only then did a kernel refuse the stride: a retry with other counts was refused, a
recurrent abort tore slots whose state was never touched, a lockstep pair ran the call on one pool only. Each test
failed before its fix (``GDNStatePool._ids`` refuses a strided view first)."""

import copy

import pytest
import torch

from replayssm.state.lockstep import LockstepPool
from tests.helpers import pools
from tests.helpers.pools import Weights, device_state, inputs, same, slots


def strided(ids):
    """``ids`` as a 1-D int32 view with stride 2 (valid values, not contiguous)."""
    return torch.tensor([x for i in ids for x in (i, -7)], dtype=torch.int32)[::2]


@pytest.mark.parametrize("backend", ["replay", "recurrent"])
def test_a_commit_with_strided_slots_is_refused_before_it_notes_anything(backend):
    p = pools.pool(backend)
    p.alloc(2)
    w = Weights(p.cfg, 5)
    pools.layers(p, w, [0, 1], inputs(p.cfg, [3, 2], torch.Generator().manual_seed(1)))
    books, dev = copy.deepcopy(p.tracker.__dict__), device_state(p, scratch=True)
    with pytest.raises(ValueError, match=r"slots must be contiguous \(shape \(2,\), stride \(2,\)\)"):
        p.commit(strided([0, 1]), slots([2, 1]))
    assert p.tracker.__dict__ == books and same(device_state(p, scratch=True), dev)
    if backend == "recurrent":
        assert p.abort(slots([0, 1])) == []  # nothing torn: the state was never written
        pools.layers(p, w, [0, 1], inputs(p.cfg, [3, 2], torch.Generator().manual_seed(1)))
    p.commit(slots([0, 1]), slots([3, 1]))  # other counts than the refused call's: a first attempt's


@pytest.mark.parametrize("call", ["abort", "flush"])
def test_a_lockstep_call_with_strided_slots_is_refused_by_both_pools_alike(call):
    a, b = pools.pool("recurrent"), pools.pool("replay")
    lp = LockstepPool(a, b)
    lp.alloc(2)
    w = Weights(a.cfg, 6)
    if call == "abort":
        pools.layers(lp, w, [0, 1], inputs(a.cfg, [3, 2], torch.Generator().manual_seed(4)))
    before = [copy.deepcopy(q.tracker.__dict__) for q in (a, b)]
    with pytest.raises(ValueError, match="slots must be contiguous"):
        getattr(lp, call)(strided([0, 1]))
    assert [q.tracker.__dict__ for q in (a, b)] == before
    lp.free(slots([1])) if call == "flush" else lp.commit(slots([0, 1]), slots([2, 2]))  # nothing left half-done
