"""Issue 11 at the pool: a refused call changes nothing, a failed step can be retried or aborted, and no
slot ever receives another slot's state (each test failed before the fix it names)."""

from dataclasses import replace

import pytest
import torch

from replayssm.state import GDNStatePool, PoolConfig, SlotError
from tests.helpers import pools
from tests.helpers.pools import Weights, device_state, inputs, same, slots

BACKENDS = ["replay", "recurrent"]


def _twins(backend, **kw):
    """Two identical pools with the same slots: one gets the misuse, the other only the correct calls."""
    a, b = pools.pool(backend, **kw), pools.pool(backend, **kw)
    w = Weights(a.cfg, seed=1)
    for p in (a, b):
        p.alloc(3)
    return a, b, w


def _history(ps, w, gen_seed=2, steps=2):
    """A few identical committed steps on slots 0..2 of every pool in ``ps`` (distinct states per slot)."""
    g = torch.Generator().manual_seed(gen_seed)
    for _ in range(steps):
        x = inputs(ps[0].cfg, [3, 2, 1], g)
        for p in ps:
            pools.step(p, w, [0, 1, 2], x, [2, 1, 1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_commit_must_name_the_rows_of_the_step_exactly(backend):
    """Finding 1: commit in another order, a subset, or a second batch before the commit handed one slot
    another slot's conv state (and SSM state on the recurrent backend). Now refused, nothing written."""
    p, twin, w = _twins(backend)
    _history([p, twin], w)
    g = torch.Generator().manual_seed(5)
    x, other = inputs(p.cfg, [3, 2], g), inputs(p.cfg, [3], g)
    for q in (p, twin):
        pools.layers(q, w, [0, 1], x)
    before = device_state(p, scratch=True)
    misuse = [
        lambda: p.commit(slots([1, 0]), slots([2, 1])),  # another order
        lambda: p.commit(slots([0]), slots([2])),  # a subset
        lambda: p.commit(slots([0, 1, -1]), slots([2, 1, 1])),  # an extra padding row
        lambda: pools.conv(p, w, 0, [2], other),  # a second batch while the first is in flight
        lambda: pools.ssm(p, w, 0, [2], other),
        lambda: pools.conv(p, w, 1, [1, 0], x),  # the same rows in another order
        lambda: p.abort(slots([1, 0])),
    ]
    for call in misuse:
        with pytest.raises(SlotError):
            call()
        assert same(before, device_state(p, scratch=True))
    for q in (p, twin):
        q.commit(slots([0, 1]), slots([3, 1]))
    assert same(device_state(p), device_state(twin))
    assert same(pools.slot_state(p, [0, 1, 2]), pools.slot_state(twin, [0, 1, 2]))


def _to_flush(ps, w):
    """Commit 3 tokens on slot 0: write_pos 3 + 2 * window 3 > L = 8, so its next verify folds."""
    g = torch.Generator().manual_seed(3)
    x = inputs(ps[0].cfg, [3], g)
    for p in ps:
        pools.step(p, w, [0], x, [3])
    assert all(int(p.cursors.flush[0]) == 1 for p in ps)


@pytest.mark.parametrize("failing_layer", [0, 1])
def test_bad_scale_on_a_flushing_slot_changes_nothing_and_a_retry_folds_once(failing_layer):
    """Finding 2: a non-float ``scale`` noticed after the flush fold folded the history a second time on retry
    (reference path) or left the slot pending for ever (Triton path). Now refused before anything moves."""
    p, twin, w = _twins("replay")
    _to_flush([p, twin], w)
    x = inputs(p.cfg, [2], torch.Generator().manual_seed(4))
    for layer in range(p.cfg.num_layers):
        for q in (p, twin):
            pools.conv(q, w, layer, [0], x)
        if layer == failing_layer:
            before = device_state(p)
            for bad in (torch.tensor(0.25), "0.25", float("nan"), -1.0):
                with pytest.raises((TypeError, ValueError), match="scale"):
                    pools.ssm(p, w, layer, [0], x, scale=bad)
                assert same(before, device_state(p))
            if layer == 0:  # nothing of the step ran a verify yet: the slot is as idle as it was
                with pytest.raises(SlotError, match="have not run verify of layers"):
                    p.commit(slots([0]), slots([1]))
        for q in (p, twin):
            pools.ssm(q, w, layer, [0], x)
    for q in (p, twin):
        q.commit(slots([0]), slots([2]))
    assert same(device_state(p), device_state(twin))
    assert same(pools.slot_state(p, [0]), pools.slot_state(twin, [0]))


class _FailAfterWriting:
    """Wraps a pool op: on call number ``at`` it runs the op, then raises (a failure after the op wrote)."""

    def __init__(self, op, at: int):
        self.op, self.at, self.calls = op, at, 0

    def __call__(self, *a, **kw):
        self.calls += 1
        out = self.op(*a, **kw)
        if self.calls == self.at:
            raise RuntimeError("injected failure after the op wrote")
        return out


def test_failure_after_a_flush_fold_then_retry_or_abort_is_exact(monkeypatch):
    """Finding 2, the internal-failure half: a verify that fails after folding layer 1's history. A retry does
    not fold again (the fold markers say it is done); an abort leaves the committed state exactly as it was."""
    import replayssm.state.pool as pool_module

    ps = [pools.pool("replay") for _ in range(3)]  # retry, abort, reference
    w = Weights(ps[0].cfg, seed=1)
    for p in ps:
        p.alloc(2)
    _to_flush(ps, w)
    committed = pools.slot_state(ps[1], [0, 1])
    x = inputs(ps[0].cfg, [3, 1], torch.Generator().manual_seed(6))
    for p in ps[:2]:
        monkeypatch.setattr(pool_module, "gdn_replay_verify", _FailAfterWriting(pool_module.gdn_replay_verify, at=2))
        pools.layers(p, w, [0, 1], x, which=[0])
        pools.conv(p, w, 1, [0, 1], x)
        with pytest.raises(RuntimeError, match="injected"):
            pools.ssm(p, w, 1, [0, 1], x)
        monkeypatch.undo()
        with pytest.raises(SlotError, match="not committed yet"):
            p.free(slots([0]))
    retry, aborted, ref = ps
    pools.ssm(retry, w, 1, [0, 1], x)
    pools.layers(ref, w, [0, 1], x)
    for p in (retry, ref):
        p.commit(slots([0, 1]), slots([2, 1]))
    assert same(pools.slot_state(retry, [0, 1]), pools.slot_state(ref, [0, 1]))
    aborted.abort(slots([0, 1]))
    assert same(pools.slot_state(aborted, [0, 1]), committed)
    # and the aborted pool goes on bitwise like the reference from the same committed state
    twin = pools.pool("replay")
    twin.alloc(2)
    _to_flush([twin], w)
    y = inputs(ps[0].cfg, [2, 3], torch.Generator().manual_seed(7))
    for p in (aborted, twin):
        pools.step(p, w, [0, 1], y, [2, 3])
    assert same(pools.slot_state(aborted, [0, 1]), pools.slot_state(twin, [0, 1]))


def test_aborted_in_place_decode_leaves_its_slots_only_to_free(monkeypatch):
    """The recurrent backend's decode writes the state in place: after a failure half-way through the layers
    the rows' states are lost, and the pool says so instead of serving a half-advanced state."""
    import replayssm.state.pool as pool_module

    p = pools.pool("recurrent")
    w = Weights(p.cfg, seed=1)
    p.alloc(3)
    x = inputs(p.cfg, [1, 1], torch.Generator().manual_seed(8))
    monkeypatch.setattr(pool_module, "gdn_recurrent", _FailAfterWriting(pool_module.gdn_recurrent, at=2))
    pools.layers(p, w, [0, 1], x, decode=True, which=[0])
    pools.conv(p, w, 1, [0, 1], x)
    with pytest.raises(RuntimeError, match="injected"):
        pools.ssm(p, w, 1, [0, 1], x, decode=True)
    monkeypatch.undo()
    p.abort(slots([0, 1]))
    for call in (lambda: p.committed_state(0, slots([0])), lambda: p.offload(slots([1])),
                 lambda: pools.layers(p, w, [0], inputs(p.cfg, [1], torch.Generator()), decode=True)):  # fmt: skip
        with pytest.raises(SlotError, match="lost their state"):
            call()
    untouched = pools.slot_state(p, [2])
    p.free(slots([0, 1]))
    assert p.num_free == 3 and same(pools.slot_state(p, [2]), untouched)
    assert p.alloc(2).tolist() == [1, 0]  # freed slots come back clean


@pytest.mark.parametrize("backend", BACKENDS)
def test_parked_slots_check_their_tensors(backend):
    """Finding 6: restore broadcast a ParkedSlots whose tensors had the wrong shape. Now it cannot be built."""
    p, _, w = _twins(backend)
    _history([p], w)
    parked = p.offload(slots([1]))
    bad = {
        "checkpoint": lambda t: t[:, :, :1],  # broadcastable over HV
        "conv_state": lambda t: t.to(torch.float16),
    }
    for field, change in bad.items():
        with pytest.raises(ValueError, match=f"ParkedSlots.{field} must be"):
            replace(parked, **{field: change(getattr(parked, field))})
    if backend == "replay":
        ring, cur = parked.ring, parked.cursors
        for name, t in (("ring_k", ring["ring_k"][:, :, :, :1]), ("ring_g", ring["ring_g"].double())):
            with pytest.raises(ValueError, match=f"ring\\['{name}'\\] must be"):
                replace(parked, ring={**ring, name: t})
        with pytest.raises(ValueError, match="must be a dict of"):
            replace(parked, ring={k: v for k, v in ring.items() if k != "ring_u"})
        with pytest.raises(ValueError, match="cursors\\['base'\\] must be"):
            replace(parked, cursors={**cur, "base": cur["base"].long()})
        L = p.cfg.ring_len
        with pytest.raises(ValueError, match="not a ring state"):
            replace(parked, cursors={**cur, "write_pos": torch.tensor([L], dtype=torch.int32)})
    else:
        with pytest.raises(ValueError, match="carry no ring"):
            replace(parked, ring={})
    new = p.restore(parked)  # the real one still restores, bit for bit
    assert same(pools.slot_state(p, new.tolist()), pools.slot_state(p, [1]))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(dtype=torch.int32), "PoolConfig.dtype must be one of"),
        (dict(dtype="bf16"), "PoolConfig.dtype must be one of"),
        (dict(u_dtype=torch.int8), "PoolConfig.u_dtype must be None or one of"),
        (dict(conv_channels=0), "PoolConfig.conv_channels must be a positive int"),
        (dict(max_batch=0), "PoolConfig.max_batch must be a positive int"),
        (dict(num_slots=True), "PoolConfig.num_slots must be a positive int"),
        (dict(K=16.0), "PoolConfig.K must be a positive int"),
        (dict(ring_len=12), "PoolConfig.ring_len=12 is not a power of two: it must be a power of two"),
        (
            dict(window=5, ring_len=8),
            "PoolConfig.ring_len=8 is below 2 \\* window: it must be a power of two from 2 \\* window = 10 to 65536",
        ),
        (dict(device="gpu0"), "PoolConfig.device 'gpu0' is not a device"),
        (dict(validate="yes"), "PoolConfig.validate must be a bool"),
        (dict(impl="fast"), "PoolConfig.impl must be one of"),
        (dict(backend=None), "PoolConfig.backend must be one of"),
    ],
)
def test_pool_config_checks_every_field(change, message):
    """Finding 9 (first half): an integer dtype and conv_channels=0 were accepted."""
    base = dict(num_slots=2, num_layers=1, H=1, HV=2, K=16, V=16)
    with pytest.raises((ValueError, TypeError), match=message):
        PoolConfig(**{**base, **change})


def test_ring_length_follows_the_window():
    """Finding 7 (pool half): a window >= 9 was refused because L stayed 16 unless set by hand."""
    base = dict(num_slots=2, num_layers=1, H=1, HV=2, K=16, V=16)
    assert [PoolConfig(**base, window=T).ring_len for T in (1, 4, 8, 9, 16, 17)] == [16, 16, 16, 32, 32, 64]
    assert PoolConfig(**base, window=9) == PoolConfig(**base, window=9, ring_len=32)
    assert GDNStatePool(PoolConfig(**base, window=9)).rings[0].L == 32


@pytest.mark.parametrize("backend", BACKENDS)
def test_windows_longer_than_the_pool_window_are_refused_before_writing(backend):
    """Finding 9 (second half): conv_update with a window longer than the pool's wrote scratch, then failed."""
    p, _, w = _twins(backend)
    x = inputs(p.cfg, [p.cfg.window + 1, 1], torch.Generator().manual_seed(9))
    before = device_state(p, scratch=True)
    for call in (lambda: pools.conv(p, w, 0, [0, 1], x), lambda: pools.ssm(p, w, 0, [0, 1], x)):
        with pytest.raises(ValueError, match=r"every live row needs 1..3 tokens \(PoolConfig.window=3\)"):
            call()
        assert same(before, device_state(p, scratch=True))
    bad_cu = dict(x, cu=x["cu"].long())
    with pytest.raises(TypeError, match="cu_seqlens must have dtype"):
        pools.conv(p, w, 0, [0, 1], bad_cu)
    assert same(before, device_state(p, scratch=True)) and p.tracker.step is None


def test_a_fold_ahead_that_fails_leaves_the_step_committed_and_its_folds_to_the_next_verify(monkeypatch):
    """A commit folds ahead last (``REPLAYSSM_FOLD_AHEAD=1``): if that fails, the step is committed all the same
    (cursors, conv state, the tracker idle: another commit is refused, not applied; the same one again would only
    run the fold it owes, tests/state/test_interrupted_commit.py), the rows keep their flush flags, and the next step
    folds them in its verify: committed states bitwise those of a pool that never failed."""
    import replayssm.state.commit as pool_module

    monkeypatch.setenv("REPLAYSSM_FOLD_AHEAD", "1")
    failing, ref = pools.pool("replay"), pools.pool("replay")
    w = Weights(failing.cfg, seed=1)
    for p in (failing, ref):
        p.alloc(2)
    g = torch.Generator().manual_seed(3)
    x = inputs(failing.cfg, [3, 1], g)
    for p in (failing, ref):
        pools.layers(p, w, [0, 1], x)

    def fail(*a, **kw):
        raise RuntimeError("injected failure of the fold ahead")

    monkeypatch.setattr(pool_module, "gdn_fold_ahead", fail)
    with pytest.raises(RuntimeError, match="injected"):
        failing.commit(slots([0, 1]), slots([3, 1]))
    monkeypatch.undo()
    monkeypatch.setenv("REPLAYSSM_FOLD_AHEAD", "1")
    ref.commit(slots([0, 1]), slots([3, 1]))
    assert int(failing.cursors.flush[0]) == 1 and int(ref.cursors.flush[0]) == 0  # slot 0: 3 + 2 * 3 > 8
    assert same(pools.slot_state(failing, [0, 1]), pools.slot_state(ref, [0, 1]))  # the same committed state
    with pytest.raises(SlotError, match="no verified step"):
        failing.commit(slots([0, 1]), slots([2, 1]))
    y = inputs(failing.cfg, [2, 3], torch.Generator().manual_seed(4))
    for p in (failing, ref):
        pools.step(p, w, [0, 1], y, [2, 2])
    assert same(pools.slot_state(failing, [0, 1]), pools.slot_state(ref, [0, 1]))


def test_parked_cursors_of_window_one_may_carry_an_early_flush():
    """A window-1 ring may flush before it is full (the fold phase, ops/cursors.py): parked slots with such a flag
    restore; a flag on an empty history, or a wider window's flag before capacity, is not a ring state."""
    p = pools.pool(window=1)
    p.alloc(2)
    parked = p.offload(slots([1]))
    cur = parked.cursors
    early = {**cur, "write_pos": torch.tensor([2], dtype=torch.int32), "flush": torch.tensor([1], dtype=torch.int32)}
    new = p.restore(replace(parked, cursors=early))
    assert int(p.cursors.flush[new[0]]) == 1 and int(p.cursors.write_pos[new[0]]) == 2
    empty = {**cur, "write_pos": torch.tensor([0], dtype=torch.int32), "flush": torch.tensor([1], dtype=torch.int32)}
    with pytest.raises(ValueError, match="not a ring state"):
        replace(parked, cursors=empty)
    wide_pool = pools.pool(window=3)
    wide_pool.alloc(2)
    wide = wide_pool.offload(slots([1]))
    with pytest.raises(ValueError, match="not a ring state"):
        replace(wide, cursors={**wide.cursors, "write_pos": torch.tensor([2], dtype=torch.int32),
                               "flush": torch.tensor([1], dtype=torch.int32)})  # fmt: skip
