"""Issue 11 at the raw ops. Finding 3: a retried ``gdn_replay_verify`` on a flushing slot, or a
``gdn_exact_fold(out=...)`` between the verify and ``ring_commit``, folded the slot's history a second time.
The fold markers (``Ring.folded``, per-slot ``epoch``) make every later fold of the same uncommitted step a
no-op without reading anything back. Finding 6 (ops half): a ``Ring`` built on cursors of another slot count
was accepted and the kernels read cursors out of bounds."""

import pytest
import torch

from replayssm.ops import Ring, RingCursors, gdn_exact_fold, gdn_replay_verify, ring_commit
from replayssm.ops.verify_launch import pack_in_keys
from tests.helpers.chain import call
from tests.helpers.gdn64 import rel_err
from tests.helpers.inputs import make_gdn_inputs, random_state, slot_tensor

S, H, HV, K, V, T, L = 3, 1, 2, 16, 16, 2, 4


def _flushing(impl, T=T, L=L, V=V):
    """A checkpoint and a ring whose slot 1 must fold its history at the next verify (slot 0 idle)."""
    gen = torch.Generator().manual_seed(3)
    checkpoint = random_state(S, HV, V, K, gen=gen)
    ring = Ring.allocate(S, H, HV, K, V, L=L, window=T, dtype=torch.float32)
    slots = slot_tensor([1])
    while not int(ring.cursors.flush[1]):
        x = make_gdn_inputs([T], H, HV, K, V, gen=gen)
        call(gdn_replay_verify, x, checkpoint=checkpoint, ring=ring, slots=slots, impl=impl)
        ring_commit(ring, slots, torch.tensor([T], dtype=torch.int32), impl=impl)
    return checkpoint, ring, slots, make_gdn_inputs([T], H, HV, K, V, gen=gen)


def _committed(checkpoint, ring, impl):
    V = ring.v.shape[3]
    out = torch.full((S, HV, V, K), float("nan"))
    return gdn_exact_fold(checkpoint, ring, slot_tensor(list(range(S))), out=out, impl=impl)


def _once(impl, accepted, **shape):
    """Outputs and committed states of a single verify + commit of the flushing step."""
    checkpoint, ring, slots, x = _flushing(impl, **shape)
    o = call(gdn_replay_verify, x, checkpoint=checkpoint, ring=ring, slots=slots, impl=impl)
    ring_commit(ring, slots, torch.tensor([accepted], dtype=torch.int32), impl=impl)
    return o, _committed(checkpoint, ring, impl)


@pytest.mark.parametrize("impl", ["reference", "triton"])
@pytest.mark.parametrize("accepted", [1, T])
def test_a_retried_verify_on_a_flushing_slot_folds_once(impl, accepted):
    o_ref, committed_ref = _once(impl, accepted)
    checkpoint, ring, slots, x = _flushing(impl)
    before = checkpoint.clone()
    call(gdn_replay_verify, x, checkpoint=checkpoint, ring=ring, slots=slots, impl=impl)
    assert not torch.equal(checkpoint[1], before[1]) and torch.equal(checkpoint[0], before[0])  # slot 1 folded
    folded = checkpoint.clone()
    o = call(gdn_replay_verify, x, checkpoint=checkpoint, ring=ring, slots=slots, impl=impl)  # the retry
    assert torch.equal(checkpoint, folded)  # the retry did not fold again
    ring_commit(ring, slots, torch.tensor([accepted], dtype=torch.int32), impl=impl)
    assert torch.equal(o, o_ref)
    assert torch.equal(_committed(checkpoint, ring, impl), committed_ref)


@pytest.mark.parametrize("impl", ["reference", "triton"])
def test_a_retry_on_the_tensor_core_path_folds_once_and_gives_the_same_outputs(impl):
    """T=4 and 32-row heads: the window dots on tensor cores, a program folding two blocks of the pinned tile."""
    shape = dict(T=4, L=8, V=32)
    o_ref, committed_ref = _once(impl, 3, **shape)
    checkpoint, ring, slots, x = _flushing(impl, **shape)
    call(gdn_replay_verify, x, checkpoint=checkpoint, ring=ring, slots=slots, impl=impl)
    folded = checkpoint.clone()
    o = call(gdn_replay_verify, x, checkpoint=checkpoint, ring=ring, slots=slots, impl=impl)  # the retry
    assert torch.equal(checkpoint, folded)
    ring_commit(ring, slots, torch.tensor([3], dtype=torch.int32), impl=impl)
    assert torch.equal(o, o_ref)
    assert torch.equal(_committed(checkpoint, ring, impl), committed_ref)


def test_a_retry_of_the_staged_decode_with_its_buffers_in_the_keys_rows_folds_once(monkeypatch):
    """Plain decode staged, where the main kernel keeps its stream's buffers in the rows of a folding row's history
    keys and the fold's gates in their last row (``verify_launch.pack_in_keys``): a fold of L - 1 records (every row
    but the last), then the retry that finds the head folded; outputs and committed states equal to a single attempt
    and close to the reference's."""
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", "0")
    shape = dict(T=1, L=8, V=16)
    assert pack_in_keys(shape["L"], K, 1, 2, shape["V"], 4)  # fp32 values, whole 16-row heads
    o_ref, committed_ref = _once("reference", 1, **shape)
    o_one, committed_one = _once("triton", 1, **shape)
    checkpoint, ring, slots, x = _flushing("triton", **shape)
    assert int(ring.cursors.write_pos[1]) == shape["L"] - 1
    call(gdn_replay_verify, x, checkpoint=checkpoint, ring=ring, slots=slots, impl="triton")
    folded = checkpoint.clone()
    o = call(gdn_replay_verify, x, checkpoint=checkpoint, ring=ring, slots=slots, impl="triton")  # the retry
    assert torch.equal(checkpoint, folded)
    ring_commit(ring, slots, torch.tensor([1], dtype=torch.int32), impl="triton")
    assert torch.equal(o, o_one)
    assert torch.equal(_committed(checkpoint, ring, "triton"), committed_one)
    assert rel_err(o, o_ref) < 1e-5 and rel_err(committed_one, committed_ref) < 1e-5


@pytest.mark.parametrize("impl", ["reference", "triton"])
def test_a_fold_between_verify_and_commit_does_not_fold_again(impl):
    o_ref, committed_ref = _once(impl, T)
    checkpoint, ring, slots, x = _flushing(impl)
    o = call(gdn_replay_verify, x, checkpoint=checkpoint, ring=ring, slots=slots, impl=impl)
    folded = checkpoint.clone()
    out = torch.full((1, HV, V, K), float("nan"))
    gdn_exact_fold(checkpoint, ring, slots, out=out, impl=impl)
    assert torch.equal(out[0], folded[1])  # the history the verify folded is not folded on top of it
    gdn_exact_fold(checkpoint, ring, slots, empty_history=False, impl=impl)  # in place: a no-op too
    assert torch.equal(checkpoint, folded)
    ring_commit(ring, slots, torch.tensor([T], dtype=torch.int32), impl=impl)
    assert torch.equal(o, o_ref)
    assert torch.equal(_committed(checkpoint, ring, impl), committed_ref)


def test_a_ring_on_cursors_of_another_slot_count_cannot_be_built():
    ring = Ring.allocate(S, H, HV, K, V, L=L, window=T, dtype=torch.float32)
    for n in (S - 1, S + 1):
        cursors = RingCursors.allocate(n, L=L, window=T)
        with pytest.raises(ValueError, match=rf"Ring.k must have shape \({n}, {H}, {L}, {K}\) for {n} slots"):
            Ring(ring.k, ring.v, ring.g, ring.beta, ring.u, ring.folded, cursors)
    other_len = RingCursors.allocate(S, L=2 * L, window=T)
    with pytest.raises(ValueError, match="for 3 slots and L=8"):
        Ring(ring.k, ring.v, ring.g, ring.beta, ring.u, ring.folded, other_len)
    with pytest.raises(TypeError, match="Ring.cursors must be RingCursors"):
        Ring(ring.k, ring.v, ring.g, ring.beta, ring.u, ring.folded, ring.cursors.write_pos)


def test_the_in_place_fold_kernel_writes_the_committed_state_and_its_reference_markers():
    """``gdn_exact_fold`` without ``out`` (what ``GDNStatePool.flush`` runs) had no CPU test: its kernel's in-place
    store could have written anything (a test-quality audit). Its checkpoint rows are bitwise the ``out=`` path's
    committed states (the same kernel), close to the reference fold's, and its fold markers and cursors are the
    reference's exactly; the slots it does not name keep their checkpoint."""
    from tests.helpers.chain import Chain

    c = Chain(4, 1, 2, 16, 16, T=2, L=8, dtype=torch.float32, device="cpu", impl="triton", seed=3)
    g = torch.Generator().manual_seed(2)
    for _ in range(3):
        lens = torch.randint(1, 3, (4,), generator=g).tolist()
        c.verify([0, 1, 2, 3], lens)
        c.commit([int(torch.randint(1, n + 1, (1,), generator=g)) for n in lens])
    slots = slot_tensor([2, -1, 0])
    want = c.committed_replay([2, 0])  # the out= path, tested against the reference elsewhere
    got = {}
    for impl in ("triton", "reference"):
        checkpoint, ring = c.checkpoint.clone(), c.ring.clone()
        gdn_exact_fold(checkpoint, ring, slots, impl=impl)
        got[impl] = checkpoint, ring
    (ck, ring), (ck_ref, ring_ref) = got["triton"], got["reference"]
    assert torch.equal(ck[[2, 0]], want) and not torch.equal(ck[[2, 0]], c.checkpoint[[2, 0]])
    assert torch.equal(ck[[1, 3]], c.checkpoint[[1, 3]])
    assert rel_err(ck, ck_ref) < 1e-5
    assert torch.equal(ring.folded, ring_ref.folded)
    for name in ("write_pos", "base", "flush", "pending", "epoch"):
        assert torch.equal(getattr(ring.cursors, name), getattr(ring_ref.cursors, name)), name
