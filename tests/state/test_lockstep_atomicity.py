"""A fifth misuse review, at the stateful layers: a refused call on a lockstep pair, a restore or a prefill write
leaves every pool as it was (each test failed before its fix)."""

import copy
import dataclasses

import pytest
import torch

from replayssm.state.kv import KVCache
from replayssm.state.lockstep import LockstepPool
from tests.helpers import pools
from tests.helpers.pools import Weights, device_state, inputs, same, slots


def _pair(primary="recurrent", shadow="replay", **kw):
    a, b = pools.pool(primary, **kw), pools.pool(shadow, **kw)
    lp = LockstepPool(a, b)
    lp.alloc(2)
    return lp, a, b, Weights(a.cfg, 1)


def _books(p):
    return device_state(p), copy.deepcopy(p.tracker.__dict__)


def test_a_lockstep_prefill_write_that_one_backend_refuses_writes_neither():
    """The replay pool refuses a slot with ring history, the recurrent primary took it and had written its
    checkpoint and conv state before the shadow refused."""
    lp, a, b, w = _pair()
    pools.step(lp, w, [0], inputs(a.cfg, [3], torch.Generator().manual_seed(0)), [2])
    before = [_books(p) for p in (a, b)]
    c = a.cfg
    with pytest.raises(ValueError, match="unfolded ring history"):
        lp.write_prefill(0, slots([0]), torch.ones(1, c.HV, c.V, c.K), torch.zeros(1, c.conv_kernel - 1, c.channels))
    for p, (dev, books) in zip((a, b), before):
        assert same(device_state(p), dev) and p.tracker.__dict__ == books


def test_activations_of_another_dtype_are_refused_by_both_backends_before_anything_moves():
    """fp16 activations on fp32 pools: the recurrent pool decoded them in place, the replay pool refused."""
    lp, a, b, w = _pair(window=1)
    x = inputs(a.cfg, [1, 1], torch.Generator().manual_seed(1))
    half = {k: (v.half() if k in ("q", "k", "v", "a", "b") else v) for k, v in x.items()}
    before = [_books(p) for p in (a, b)]
    pools.conv(lp, w, 0, [0, 1], x)
    with pytest.raises(TypeError, match="activations are torch.float32"):
        pools.ssm(lp, w, 0, [0, 1], half, decode=True)
    for p in (a, b):  # a single recurrent pool refuses them too
        with pytest.raises(TypeError, match="activations are torch.float32"):
            pools.ssm(p, w, 0, [0, 1], half, decode=True)
    lp.abort(slots([0, 1]))
    for p, (dev, _) in zip((a, b), before):
        assert same(device_state(p), dev)


def test_a_verify_that_a_window_1_recurrent_pool_cannot_take_is_refused_before_the_primary_verifies():
    lp, a, b, w = _pair("replay", "recurrent", window=1)
    x = inputs(a.cfg, [1, 1], torch.Generator().manual_seed(2))
    before = [_books(p) for p in (a, b)]
    assert a.verifies and not b.verifies and not lp.verifies
    with pytest.raises(ValueError, match="can only decode"):
        pools.ssm(lp, w, 0, [0, 1], x)
    for p, (dev, books) in zip((a, b), before):
        assert same(device_state(p), dev) and p.tracker.__dict__ == books


def test_lockstep_pools_of_another_impl_are_refused():
    """The kernels and the references refuse different inputs (bf16 in the interpreter, CPU tensors without it)."""
    with pytest.raises(ValueError, match="impl 'auto' vs 'reference'"):
        LockstepPool(pools.pool("replay"), pools.pool("recurrent", impl="reference"))


@pytest.mark.parametrize("backend", ["replay", "recurrent"])
def test_a_restore_whose_tensors_hold_no_data_allocates_nothing(backend):
    """A parked checkpoint moved to the meta device passed the checks, took a slot, then failed to copy: the slot
    leaked (gone from the free list, its epoch moved)."""
    p = pools.pool(backend)
    w = Weights(p.cfg, 1)
    p.alloc(3)
    pools.step(p, w, [0, 1, 2], inputs(p.cfg, [3, 2, 1], torch.Generator().manual_seed(3)), [2, 1, 1])
    parked = p.offload(slots([1]))
    with pytest.raises(ValueError, match="meta device"):  # refused when built ...
        dataclasses.replace(parked, checkpoint=parked.checkpoint.to("meta"))
    object.__setattr__(parked, "conv_state", parked.conv_state.to("meta"))  # ... and when changed afterwards
    dev, books = _books(p)
    with pytest.raises(ValueError, match="meta device"):
        p.restore(parked)
    assert same(device_state(p), dev) and p.tracker.__dict__ == books and p.num_free == 1


def test_a_prefill_write_of_a_tensor_that_cannot_be_copied_writes_nothing():
    """conv_state on the meta device: the checkpoint of layer 0 was written before the conv state's copy failed."""
    p = pools.pool("recurrent")
    s = p.alloc(1)
    c = p.cfg
    dev = device_state(p)
    with pytest.raises(ValueError, match="meta device"):
        p.write_prefill(0, s, torch.ones(1, c.HV, c.V, c.K), torch.zeros(1, c.conv_kernel - 1, c.channels,
                                                                          device="meta"))  # fmt: skip
    assert same(device_state(p), dev)


def test_kv_rows_that_hold_no_data_are_refused_before_any_page_is_reserved():
    kv = KVCache(1, 3, 128, 1, 16, dtype=torch.float32, device="cpu", num_pages=4)
    kv.reserve([0], [20])
    data = kv.gather(torch.tensor([0], dtype=torch.int32))
    data["k"] = data["k"].to("meta")
    table, free = kv.block_table.clone(), list(kv._free)
    with pytest.raises(ValueError, match="meta device"):
        kv.scatter(torch.tensor([1], dtype=torch.int32), data)
    assert torch.equal(kv.block_table, table) and kv._free == free
