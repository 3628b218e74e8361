"""A sixth misuse review, the pool's inputs: views of its own buffers, tensors that require grad, ``impl``, errors
that name the argument at fault, ``max_batch`` (each test failed before its fix)."""

import pytest
import torch

import replayssm.ops.conv as conv_module
from replayssm.state import SlotError
from tests.helpers import pools
from tests.helpers.pools import Weights, device_state, inputs, same, slot_state, slots


@pytest.mark.parametrize("backend", ["replay", "recurrent"])
def test_write_prefill_from_a_view_of_the_pool_s_own_state_writes_what_a_copy_would(backend):
    """Slot 0's state and conv state, as views of the pool's buffers, written into slot 1: torch refused the
    overlapping conv copy after the checkpoint had been written."""
    p, ref = pools.pool(backend), pools.pool(backend)
    for q in (p, ref):
        q.alloc(2)
        g = torch.Generator().manual_seed(1)
        q.write_prefill(0, slots([0]), torch.randn(1, 2, 16, 16, generator=g), torch.randn(1, 3, 64, generator=g))
    p.write_prefill(0, slots([1]), p.checkpoint[0, :1], p.conv_state[0, :1])
    ref.write_prefill(0, slots([1]), ref.checkpoint[0, :1].clone(), ref.conv_state[0, :1].clone())
    assert same(device_state(p), device_state(ref))
    assert same(slot_state(p, [1]), slot_state(p, [0]))


@pytest.mark.parametrize("backend", ["replay", "recurrent"])
def test_the_pool_keeps_values_not_a_caller_s_autograd_graph(backend):
    p = pools.pool(backend)
    p.alloc(1)
    state = torch.randn(1, 2, 16, 16, requires_grad=True)
    conv = torch.randn(1, 3, 64, requires_grad=True)
    p.write_prefill(0, slots([0]), state * 2, conv * 2)
    parked = p.offload(slots([0]))
    p.free(slots([0]))
    parked.checkpoint.requires_grad_(True)
    p.restore(parked)
    for t in (p.checkpoint, p.conv_state):
        assert not t.requires_grad and t.grad_fn is None
    assert torch.equal(p.committed_state(0, slots([0])), (state * 2).detach())


def test_a_conv_input_that_overlaps_the_scratch_is_refused_before_anything_is_written():
    p = pools.pool("replay")
    p.alloc(2)
    w = Weights(p.cfg, 2)
    x = inputs(p.cfg, [3, 2], torch.Generator().manual_seed(2))
    alias = dict(x, x=p.conv_scratch[0, 0, :5])  # [5, C] rows of the scratch the call writes
    before = device_state(p, scratch=True)
    with pytest.raises(ValueError, match="^scratch must not overlap x in memory"):
        pools.conv(p, w, 0, [0, 1], alias)
    assert same(device_state(p, scratch=True), before) and p.tracker.step is None


@pytest.mark.parametrize("impl", ["reference", "triton"])
def test_the_pool_s_conv_update_runs_the_impl_its_config_names(impl, monkeypatch):
    monkeypatch.setenv("REPLAYSSM_IMPL", "reference" if impl == "triton" else "triton")  # the other one
    ran = []
    for name in ("conv_update_triton", "_update_reference"):
        real = getattr(conv_module, name)
        monkeypatch.setattr(conv_module, name, lambda *a, _r=real, _n=name, **kw: ran.append(_n) or _r(*a, **kw))
    p = pools.pool("replay", impl=impl)
    p.alloc(2)
    pools.conv(p, Weights(p.cfg, 3), 0, [0, 1], inputs(p.cfg, [1, 2], torch.Generator().manual_seed(3)))
    assert ran == ["conv_update_triton" if impl == "triton" else "_update_reference"]


def test_conv_errors_name_the_argument_at_fault():
    p = pools.pool("replay")
    p.alloc(2)
    w = Weights(p.cfg, 4)
    x = inputs(p.cfg, [1, 2], torch.Generator().manual_seed(4))
    wide = torch.randn(64, 5)
    with pytest.raises(ValueError, match=r"weight must have shape \(64, 4\): conv_state keeps 3 tokens"):
        p.conv_update(0, x["x"], weight=wide, bias=None, slots=slots([0, 1]), cu_seqlens=x["cu"])
    with pytest.raises(TypeError, match="x is torch.float16; conv_state is torch.float32"):
        p.conv_update(0, x["x"].half(), weight=w.layers[0]["weight"], bias=None, slots=slots([0, 1]),
                      cu_seqlens=x["cu"])  # fmt: skip


def test_fork_of_no_slots_and_decode_without_a_query_name_their_argument():
    p = pools.pool("replay", window=1)
    p.alloc(2)
    with pytest.raises(ValueError, match="slots must name at least one slot to fork"):
        p.fork(slots([]))
    w = Weights(p.cfg, 5).layers[0]
    x = inputs(p.cfg, [1, 1], torch.Generator().manual_seed(5))
    with pytest.raises(TypeError, match="q must be a torch.Tensor, got NoneType"):
        p.decode(0, None, x["k"], x["v"], x["a"], x["b"], A_log=w["A_log"], dt_bias=w["dt_bias"], slots=slots([0, 1]))


def test_max_batch_bounds_a_step_s_rows_not_the_calls_outside_a_step():
    p = pools.pool("replay", num_slots=8, max_batch=2)
    s = p.alloc(4)
    state = torch.randn(4, 2, 16, 16, generator=torch.Generator().manual_seed(6))
    p.write_prefill(0, s, state, torch.zeros(4, 3, 64))
    p.flush(s)
    assert torch.equal(p.committed_state(0, s), state)
    assert p.offload(s).num_slots == 4
    forked = p.fork(s)
    assert forked.tolist() == [4, 5, 6, 7] and torch.equal(p.committed_state(0, forked), state)
    x = inputs(p.cfg, [1, 1, 1], torch.Generator().manual_seed(7))
    with pytest.raises(ValueError, match="more than PoolConfig.max_batch=2"):
        pools.conv(p, Weights(p.cfg, 8), 0, [0, 1, 2], x)
    p.free(forked)
    assert p.num_free == 4
    with pytest.raises(SlotError):
        p.free(forked)


def test_a_slot_in_a_step_begun_by_conv_update_alone_is_named_so():
    """The message said "a verified step" where only conv_update had run (a fresh-eyes API trial)."""
    p = pools.pool("replay")
    p.alloc(1)
    w = Weights(p.cfg, 3)
    pools.conv(p, w, 0, [0], inputs(p.cfg, [2], torch.Generator().manual_seed(3)))
    with pytest.raises(SlotError, match=r"slots \[0\] are in a step that is not committed yet \(begun by a conv_upd"):
        p.committed_state(0, slots([0]))


@pytest.mark.parametrize(("ring_len", "why"), [(6, "is not a power of two"), (4, "is below 2 \\* window"),
                                               (1 << 31, "is too long")])  # fmt: skip
def test_a_bad_ring_len_says_which_rule_it_breaks(ring_len, why):
    """2**31 was accepted, then refused by the cursors' own check with a message naming neither (int32 overflow)."""
    with pytest.raises(ValueError, match=f"ring_len={ring_len} {why}: it must be a power of two from 2 \\* window = 6 "
                                         "to 65536"):  # fmt: skip
        pools.pool("replay", ring_len=ring_len)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a CUDA device")
def test_a_cuda_pool_on_a_machine_without_one_is_a_config_error():
    """torch's bare "AssertionError: Torch not compiled with CUDA enabled" came from allocating the buffers."""
    with pytest.raises(ValueError, match="PoolConfig.device 'cuda': this machine has 0 CUDA devices"):
        pools.pool("replay", device="cuda")
