"""A third misuse review of the state layer (2026-12-04): what it found, each refused before anything is written, or
made harmless. Each test failed before its fix."""

import pytest
import torch

from replayssm.ops import GDNShape, Ring, RingCursors
from replayssm.state import PoolConfig
from replayssm.state.kv import KVCache
from replayssm.state.lockstep import LockstepPool
from tests.helpers import pools
from tests.helpers.pools import Weights, device_state, inputs, same, slots


@pytest.mark.parametrize("backend", ["replay", "recurrent"])
def test_a_padding_rows_accepted_count_is_never_read(backend):
    """Finding 1: a padding row's out-of-range count broke the commit half-way (the conv reference read it after the
    cursors had moved), and the retry then committed twice: NaN state. Padding counts are now ignored everywhere."""
    p, twin = pools.pool(backend), pools.pool(backend)
    w = Weights(p.cfg, seed=1)
    g = torch.Generator().manual_seed(3)
    for q in (p, twin):
        q.alloc(2)
    for step in range(3):
        x = inputs(p.cfg, [3, 1], g)
        for q, pad in ((p, 9 + step), (twin, 1)):
            pools.layers(q, w, [0, -1], x)
            q.commit(slots([0, -1]), slots([2, pad]))
    assert same(device_state(p), device_state(twin))
    assert bool(torch.isfinite(p.committed_state(0, slots([0]))).all())


def test_lockstep_pools_that_would_refuse_differently_are_refused_up_front():
    """Finding 2: a shadow that refused what the primary accepted left the primary advanced. Pools that accept
    different calls (dtype, conv geometry, batch rows, validation) are refused when the lockstep pool is built, as
    is one pool passed twice."""
    a = pools.pool("replay")
    for kw, what in (
        (dict(max_batch=1), "max_batch 4 vs 1"),
        (dict(dtype=torch.float16), "dtype"),
        (dict(conv_kernel=3), "conv_kernel 4 vs 3"),
        (dict(validate=False), "validate"),
        (dict(num_slots=5), "num_slots"),
    ):
        with pytest.raises(ValueError, match=f"pool 1 differs from the primary in .*{what}"):
            LockstepPool(a, pools.pool("recurrent", **kw))
    with pytest.raises(ValueError, match="distinct pool objects"):
        LockstepPool(a, a)
    ok = LockstepPool(a, pools.pool("recurrent"), pools.pool("replay", ring_len=16))  # another L keeps the calls
    assert ok.alloc(2).tolist() == [0, 1]


def test_kv_reserve_refuses_padding_ids_duplicates_and_ragged_lists():
    """Finding 3: ``reserve([-1], ...)`` wrote into the sink row's neighbour and handed the sink out as a live page;
    a slot named twice got pages twice; lists of different lengths were cut by ``zip``."""
    kv = KVCache(1, 3, 128, 1, 16, dtype=torch.float32, device="cpu", num_pages=4)
    kv.reserve([0], [64])
    table, free = kv.block_table.clone(), list(kv._free)
    for ids, lens, match in (
        ([-1], [64], r"holds -1: KV slot ids are ints in \[0, 3\)"),
        ([3], [1], "holds 3"),
        ([1, 1], [64, 64], "names a slot twice"),
        ([1, 2], [64], "one length per slot"),
        ([1], [129], "past max_len"),
        ([1], [-1], "lengths must be an int >= 0"),
        ([True], [1], "holds True"),
    ):
        with pytest.raises(ValueError, match=match):
            kv.reserve(ids, lens)
        assert torch.equal(kv.block_table, table) and kv._free == free
    with pytest.raises(ValueError, match="names a slot twice"):
        kv.release([0, 0])
    assert KVCache(0, 3, 128, 1, 16, dtype=torch.float32, device="cpu").nbytes == 0  # a model without attention
    for kw, match in (
        (dict(max_len=0), "max_len must be an int >= 1, got 0"),
        (dict(page_size=64.0), "page_size must be an int >= 1"),
        (dict(num_pages=0), "num_pages"),
    ):
        with pytest.raises(ValueError, match=match):
            KVCache(
                **(dict(num_layers=1, num_slots=3, max_len=128, num_kv_heads=1, head_dim=16) | kw),
                dtype=torch.float32,
                device="cpu",
            )


def test_parked_slots_changed_after_construction_are_checked_again_on_restore():
    """Finding 8: the dicts of a ParkedSlots are mutable; restore trusted what construction had checked."""
    p = pools.pool("replay")
    w = Weights(p.cfg, seed=1)
    p.alloc(2)
    pools.step(p, w, [0, 1], inputs(p.cfg, [3, 2], torch.Generator().manual_seed(1)), [2, 2])
    for key, value, match in (
        ("ring_k", lambda t: t[:, :, :, :1], r"ring\['ring_k'\] must be"),
        ("write_pos", lambda t: t + 100, "not a ring state"),
    ):
        parked = p.offload(slots([1]))
        where = parked.ring if key.startswith("ring") else parked.cursors
        where[key] = value(where[key])
        before = device_state(p)
        with pytest.raises(ValueError, match=match):
            p.restore(parked)
        assert same(before, device_state(p)) and p.num_free == 2


def test_head_dims_and_cursors_are_checked_on_construction():
    """Finding 10: K=24 or V=8 built a pool (and a memory report) and failed only at the first verify; negative
    cursors built; a bool passed for a head count."""
    for build in (
        lambda: PoolConfig(num_slots=1, num_layers=1, H=1, HV=1, K=24, V=16),
        lambda: PoolConfig(num_slots=1, num_layers=1, H=1, HV=1, K=16, V=8),
        lambda: Ring.allocate(1, 1, 1, 8, 16, L=8, window=2),
        lambda: GDNShape(1, 1, 16, 48),
    ):
        with pytest.raises(ValueError, match="must be a power of two >= 16"):
            build()
    with pytest.raises(ValueError, match="GDNShape.H must be a positive int, got True"):
        GDNShape(True, 1, 16, 16)
    c = RingCursors.allocate(2, L=8, window=2)
    for name, val in (("write_pos", -1), ("base", 8), ("flush", 2), ("pending", 3)):
        bad = {n: getattr(c, n).clone() for n in ("write_pos", "base", "flush", "pending", "epoch")}
        bad[name][1] = val
        with pytest.raises(ValueError, match=f"RingCursors.{name} must hold values in"):
            RingCursors(**bad, L=8, window=2)
    ring = Ring.allocate(1, 1, 2, 16, 32, L=8, window=2, dtype=torch.float32)  # printing it dumped every buffer
    assert repr(ring) == "Ring(slots=1, H=1, HV=2, K=16, V=32, L=8, window=2, dtype=torch.float32, device=cpu)"
    assert repr(ring.cursors) == "RingCursors(slots=1, L=8, window=2, device=cpu)"
