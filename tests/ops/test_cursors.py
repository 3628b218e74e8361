import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from replayssm.ops import RingCursors, ring_commit, ring_mark_folded, ring_reset
from replayssm.ops.cursors import ring_commit_reference


def _cursors(S, L, T, seed):
    g = torch.Generator().manual_seed(seed)
    c = RingCursors.allocate(S, L=L, window=T)
    c.write_pos.copy_(torch.randint(0, L - T + 1, (S,), generator=g))
    c.base.copy_(torch.randint(0, L, (S,), generator=g))
    c.flush.copy_((c.write_pos + 2 * T > L).int())
    c.pending.copy_(torch.randint(1, T + 1, (S,), generator=g))
    return c


@pytest.mark.parametrize("L,T", [(8, 4), (16, 4), (16, 1)])
def test_commit_kernel_matches_reference(L, T):
    c = _cursors(6, L, T, seed=L + T)
    slots = torch.tensor([4, -1, 0, 5, 2], dtype=torch.int32)
    n = torch.tensor([int(c.pending[s]) if s >= 0 else 1 for s in slots.tolist()], dtype=torch.int32)
    a, b = c.clone(), c.clone()
    ring_commit(a, slots, n, impl="triton")
    ring_commit(b, slots, n, impl="reference")
    for name in ("write_pos", "base", "flush", "pending"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert torch.equal(a.write_pos[[1, 3]], c.write_pos[[1, 3]])  # slots outside the batch untouched
    assert (a.pending[[4, 0, 5, 2]] == 0).all()


def test_commit_semantics():
    c = RingCursors.allocate(2, L=16, window=4)
    c.write_pos[0], c.base[0], c.flush[0], c.pending[0] = 9, 14, 1, 4  # this step folded 9 records
    c.write_pos[1], c.base[1], c.flush[1], c.pending[1] = 3, 5, 0, 4
    ring_commit(c, torch.tensor([0, 1], dtype=torch.int32), torch.tensor([2, 4], dtype=torch.int32))
    assert c.base.tolist() == [(14 + 9) % 16, 5]
    assert c.write_pos.tolist() == [2, 7]
    assert c.flush.tolist() == [0, 0]  # 2 + 8 <= 16 and 7 + 8 <= 16
    c.pending[:] = 4
    ring_commit(c, torch.tensor([1], dtype=torch.int32), torch.tensor([2], dtype=torch.int32))
    assert c.write_pos[1] == 9 and c.flush[1] == 1  # 9 + 8 > 16: fold at the next verify


@pytest.mark.parametrize("impl", ["triton", "reference"])
def test_mark_folded_and_reset(impl):
    c = _cursors(4, 16, 4, seed=1)
    before = c.clone()
    ring_mark_folded(c, torch.tensor([2, -1], dtype=torch.int32), impl=impl)
    assert c.base[2] == (before.base[2] + before.write_pos[2]) % 16
    assert c.write_pos[2] == c.flush[2] == c.pending[2] == 0
    ring_reset(c, torch.tensor([0], dtype=torch.int32), impl=impl)
    assert c.base[0] == c.write_pos[0] == c.flush[0] == c.pending[0] == 0
    assert torch.equal(c.write_pos[[1, 3]], before.write_pos[[1, 3]])


@settings(max_examples=60, deadline=None)
@given(L=st.sampled_from([4, 8, 16, 32]), T=st.integers(1, 8), data=st.data())
def test_protocol_invariants(L, T, data):
    """Under any acceptance sequence the next window always fits: write_pos + T <= L at every verify."""
    assume(2 * T <= L)  # the ring geometry the protocol requires
    c = RingCursors.allocate(1, L=L, window=T)
    slot = torch.tensor([0], dtype=torch.int32)
    committed = 0  # records committed since the last fold, by the protocol's own bookkeeping
    for _ in range(40):
        wp, fl = int(c.write_pos[0]), int(c.flush[0])
        assert wp + T <= L
        assert wp == committed
        n = data.draw(st.integers(1, T))
        c.pending[0] = T
        ring_commit_reference(c, slot, torch.tensor([n], dtype=torch.int32))
        committed = n if fl else committed + n
        assert int(c.flush[0]) == int(committed + 2 * T > L)
