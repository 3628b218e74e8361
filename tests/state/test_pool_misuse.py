"""Misuse of a pool raises a clear, typed error and changes nothing."""

import pytest
import torch

from replayssm.state import GDNStatePool, PoolConfig, PoolExhaustedError, SlotError

H, HV, K, V = 1, 2, 16, 16


def _pool(backend="replay", **kw):
    cfg = dict(num_slots=3, num_layers=2, H=H, HV=HV, K=K, V=V, window=2, ring_len=8, backend=backend,
               dtype=torch.float32)  # fmt: skip
    cfg.update(kw)
    return GDNStatePool(PoolConfig(**cfg))


def _step_inputs(n_rows, T=2, gen=None):
    N = n_rows * T
    g = gen or torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    cu = torch.arange(0, N + 1, T, dtype=torch.int32)
    return dict(q=r(N, H, K), k=r(N, H, K), v=r(N, HV, V), a=r(N, HV), b=r(N, HV)), cu


def _raw(pool):
    parts = [pool.checkpoint, pool.conv_state]
    if pool.cfg.backend == "replay":
        c = pool.cursors
        parts += [pool.ring_layers.k, pool.ring_layers.u, c.write_pos, c.base, c.flush, c.pending]
    return [t.clone().nan_to_num() for t in parts]


def _unchanged(pool, before):
    return all(torch.equal(a, b) for a, b in zip(before, _raw(pool)))


def _verify_all_layers(pool, slots, x, cu, layers=None):
    """conv_update + verify of ``layers`` (default all): what one step runs per layer."""
    w = dict(A_log=torch.zeros(HV) - 1, dt_bias=torch.zeros(HV))
    C = pool.cfg.channels
    conv_x = torch.randn(cu[-1].item(), C, generator=torch.Generator().manual_seed(1))
    for layer in layers if layers is not None else range(pool.cfg.num_layers):
        pool.conv_update(layer, conv_x, weight=torch.ones(C, 4), bias=None, slots=slots, cu_seqlens=cu)
        pool.verify(layer, *x.values(), slots=slots, cu_seqlens=cu, **w)


@pytest.mark.parametrize("backend", ["replay", "recurrent"])
def test_misuse_raises_and_changes_nothing(backend):
    pool = _pool(backend)
    slots = pool.alloc(2)
    x, cu = _step_inputs(2)
    before = _raw(pool)
    free_slot = torch.tensor([2], dtype=torch.int32)
    with pytest.raises(SlotError, match=r"slots \[2\] are not allocated"):
        _verify_all_layers(pool, free_slot, *_step_inputs(1))
    with pytest.raises(SlotError, match="no verified step"):
        pool.commit(slots, torch.ones(2, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"layer must be an int in \[0, 2\)"):
        _verify_all_layers(pool, slots, x, cu, layers=[2])
    assert _unchanged(pool, before)

    _verify_all_layers(pool, slots, x, cu, layers=[0])
    with pytest.raises(SlotError, match=r"have not run verify of layers \[1\]"):
        pool.commit(slots, torch.ones(2, dtype=torch.int32))  # a commit that would skip a layer
    with pytest.raises(SlotError, match="already ran conv_update of layer 0"):
        _verify_all_layers(pool, slots, x, cu, layers=[0])
    _verify_all_layers(pool, slots, x, cu, layers=[1])
    mid = _raw(pool)
    for bad in ([0, 1], [1, 3]):
        with pytest.raises(SlotError, match=r"num_accepted=\d for slot \d is outside \[1, 2\]"):
            pool.commit(slots, torch.tensor(bad, dtype=torch.int32))
    for what, fn in [("committed_state", lambda: pool.committed_state(0, slots)), ("flush", lambda: pool.flush(slots)),
                     ("offload", lambda: pool.offload(slots)), ("fork", lambda: pool.fork(slots)),
                     ("free", lambda: pool.free(slots))]:  # fmt: skip
        with pytest.raises(SlotError, match=f"{what}: slots .* not committed yet"):
            fn()
    assert _unchanged(pool, mid)
    pool.commit(slots, torch.tensor([2, 1], dtype=torch.int32))

    pool.free(slots[:1])
    with pytest.raises(SlotError, match="not allocated"):
        pool.free(slots[:1])  # double free
    with pytest.raises(PoolExhaustedError, match="asked for 3 slots, 2 of 3 are free"):
        pool.alloc(3)
    with pytest.raises(TypeError, match="slots must be a 1-D int32 tensor"):
        pool.free(slots.long())


def test_restore_from_other_geometry_refused():
    src = _pool("replay")
    s = src.alloc(1)
    snap = src.offload(s)
    for other in (_pool("replay", ring_len=16), _pool("replay", HV=4), _pool("recurrent")):
        before = _raw(other)
        with pytest.raises(ValueError, match="parked slots come from a pool of another layout"):
            other.restore(snap)
        assert _unchanged(other, before) and other.num_free == 3
    with pytest.raises(TypeError, match="parked must be a ParkedSlots"):
        src.restore({"state": None})


def test_config_errors():
    with pytest.raises(ValueError, match="backend must be one of"):
        PoolConfig(num_slots=1, num_layers=1, H=1, HV=1, K=16, V=16, backend="fast")
    with pytest.raises(ValueError, match="power of two"):
        PoolConfig(num_slots=1, num_layers=1, H=1, HV=1, K=16, V=16, ring_len=12)
    with pytest.raises(ValueError, match="HV=3 must be a multiple of H=2"):
        PoolConfig(num_slots=1, num_layers=1, H=2, HV=3, K=16, V=16)
    with pytest.raises(ValueError, match="num_slots must be a positive int"):
        PoolConfig(num_slots=0, num_layers=1, H=1, HV=1, K=16, V=16)


def test_write_prefill_checks():
    pool = _pool()
    s = pool.alloc(1)
    with pytest.raises(ValueError, match=r"state must be a torch.float32 tensor of shape \(1, 2, 16, 16\)"):
        pool.write_prefill(0, s, torch.zeros(1, 2, 16, 8), torch.zeros(1, 3, pool.cfg.channels))
    with pytest.raises(TypeError, match=r"state must be a torch.float32 tensor"):  # a wrong dtype is a TypeError
        pool.write_prefill(0, s, torch.zeros(1, 2, 16, 16, dtype=torch.float64), torch.zeros(1, 3, pool.cfg.channels))
    x, cu = _step_inputs(1)
    _verify_all_layers(pool, s, x, cu)
    pool.commit(s, torch.ones(1, dtype=torch.int32))
    with pytest.raises(ValueError, match="unfolded ring history; flush"):
        pool.write_prefill(0, s, torch.zeros(1, 2, 16, 16), torch.zeros(1, 3, pool.cfg.channels))
    pool.flush(s)
    pool.write_prefill(0, s, torch.ones(1, 2, 16, 16), torch.zeros(1, 3, pool.cfg.channels))
    assert torch.equal(pool.committed_state(0, s), torch.ones(1, 2, 16, 16))


def test_memory_report_categories():
    rep = _pool("replay").memory_report()
    rec = _pool("recurrent").memory_report()
    assert rep["snapshots"] == 0 and rep["rings"] > 0
    assert rec["rings"] == 0 and rec["snapshots"] == 2 * 3 * 2 * HV * V * K * 4  # layers*rows*T*state
    assert rep["checkpoints"] == rec["checkpoints"] == 2 * 3 * HV * V * K * 4
    assert rep["total"] == sum(v for k_, v in rep.items() if k_ != "total")
