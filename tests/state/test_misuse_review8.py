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


def test_a_step_that_ran_no_verify_is_aborted_without_a_fold(monkeypatch):
    """A bf16 replay pool with the kernels in Triton's interpreter (the CPU suite's setup): conv_update ran, the
    verify was refused (the interpreter takes no bf16 ring), and then abort raised the same refusal from its fold
    ahead on every attempt, and free refused the slots of the step in flight: they were stuck. A step whose
    verify never ran has folded nothing, so abort now folds nothing either."""
    monkeypatch.setenv("REPLAYSSM_IMPL", "triton")
    p = pools.pool("replay", dtype=torch.bfloat16)
    p.alloc(2)
    w = Weights(p.cfg, 3)
    x = {k: (v.bfloat16() if v.is_floating_point() else v) for k, v in inputs(p.cfg, [2, 1], torch.Generator()
                                                                                .manual_seed(2)).items()}  # fmt: skip
    w.layers = [{k: v.bfloat16() for k, v in lw.items()} for lw in w.layers]
    dev = device_state(p)
    pools.conv(p, w, 0, [0, 1], x)
    with pytest.raises(TypeError, match="Triton's CPU interpreter"):
        pools.ssm(p, w, 0, [0, 1], x)
    assert p.abort(slots([0, 1])) == [] and not p.step_in_flight()
    assert same(device_state(p), dev)
    p.free(slots([0, 1]))


def test_an_abort_after_conv_only_leaves_what_a_first_attempt_finds():
    """The same skip with the references (fp32): the retried step's outputs and states are the first attempt's."""
    g = torch.Generator().manual_seed(7)
    x = inputs(pools.pool().cfg, [3, 2], g)

    def run(abort_first):
        p = pools.pool("replay")
        p.alloc(2)
        w = Weights(p.cfg, 4)
        pools.step(p, w, [0, 1], x, [3, 2])  # history in the ring, so a later verify may fold
        if abort_first:
            pools.conv(p, w, 0, [0, 1], x)
            assert p.abort(slots([0, 1])) == []
        return pools.step(p, w, [0, 1], x, [2, 2]), device_state(p)

    (o1, d1), (o2, d2) = run(False), run(True)
    assert same(o1, o2) and same(d1, d2)


def test_numpy_integers_are_taken_where_ints_are_asked_for():
    """NumPy integers were refused by the state layer (PoolConfig, alloc, layer indices, Ring.allocate) while the
    engine's configs and the ops' counts took them."""
    import numpy as np

    from replayssm.ops import Ring
    from replayssm.state import GDNStatePool, PoolConfig

    np_cfg = PoolConfig(num_slots=np.int64(4), num_layers=np.int32(2), H=1, HV=2, K=np.int64(16), V=16,
                        window=np.int64(3), ring_len=np.int64(8), dtype=torch.float32)  # fmt: skip
    assert np_cfg == pools.pool().cfg and type(np_cfg.num_slots) is int and type(np_cfg.ring_len) is int
    p = GDNStatePool(np_cfg)
    got = p.alloc(np.int64(2))
    assert got.tolist() == [0, 1]
    w = Weights(p.cfg, 1)
    x = inputs(p.cfg, [2], torch.Generator().manual_seed(1))
    st = torch.randn(1, 2, 16, 16)
    p.write_prefill(np.int64(0), slots([0]), st, torch.zeros(1, p.cfg.conv_kernel - 1, p.cfg.channels))
    assert torch.equal(p.committed_state(np.int64(0), slots([0])), st)
    pools.step(p, w, [0], x, [2])
    ring = Ring.allocate(np.int64(2), 1, np.int64(2), 16, 16, L=np.int64(8), window=np.int64(3), dtype=torch.float32)
    assert ring.k.shape == (2, 1, 8, 16) and type(ring.cursors.L) is int
    for bad in (True, 2.0):
        with pytest.raises(ValueError, match="must be a positive int"):
            p.alloc(bad)


def _flushing_pool():
    """A replay pool whose slot 0 will fold in its next verify."""
    p = pools.pool("replay")
    p.alloc(1)
    w = Weights(p.cfg, 4)
    g = torch.Generator().manual_seed(3)
    while not int(p.cursors.flush[0]):
        pools.step(p, w, [0], inputs(p.cfg, [3], g), [3])
    return p, w


@pytest.mark.parametrize("move", ["offload", "fork"])
def test_an_abort_after_a_first_layer_verify_failed_while_writing_still_folds(monkeypatch, move):
    """A review of the skip above: a verify that raised after it wrote (a failed launch) in the step's first layer
    is recorded as a failure, not in the step's verified layers; the skip then left that layer folded and the others
    not, with the cursors still flushing, and offload/restore or fork (which carry no fold markers) folded the
    history twice: silently other states. Such a step is folded in every layer by abort, as before."""
    import replayssm.state.pool as pool_module

    clean, _ = _flushing_pool()
    p, w = _flushing_pool()
    real = pool_module.gdn_replay_verify

    def fails_after_writing(*a, **kw):
        real(*a, **kw)
        raise RuntimeError("a launch that failed after it wrote")

    x = inputs(p.cfg, [3], torch.Generator().manual_seed(9))
    pools.conv(p, w, 0, [0], x)
    monkeypatch.setattr(pool_module, "gdn_replay_verify", fails_after_writing)
    with pytest.raises(RuntimeError, match="failed after it wrote"):
        pools.ssm(p, w, 0, [0], x)
    monkeypatch.setattr(pool_module, "gdn_replay_verify", real)
    assert p.abort(slots([0])) == [] and int(p.cursors.pending[0]) == 0
    moved = [q.restore(q.offload(slots([0]))) if move == "offload" else q.fork(slots([0])) for q in (clean, p)]
    for layer in range(p.cfg.num_layers):
        assert torch.equal(p.committed_state(layer, moved[1]), clean.committed_state(layer, moved[0]))
