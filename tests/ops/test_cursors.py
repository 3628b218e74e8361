import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from replayssm.ops import RingCursors, fold_phase_pays, ring_commit, ring_mark_folded, ring_reset
from replayssm.ops.cursors import ring_commit_reference
from replayssm.ops.verify_launch import ONE_LAUNCH_PER_SM, one_launch

FIELDS = ("write_pos", "base", "flush", "pending", "epoch")


def _cursors(S, L, T, seed):
    g = torch.Generator().manual_seed(seed)
    c = RingCursors.allocate(S, L=L, window=T)
    c.write_pos.copy_(torch.randint(0, L - T + 1, (S,), generator=g))
    c.base.copy_(torch.randint(0, L, (S,), generator=g))
    c.flush.copy_((c.write_pos + 2 * T > L).int())
    c.pending.copy_(torch.randint(1, T + 1, (S,), generator=g))
    c.epoch.copy_(torch.randint(0, 1000, (S,), generator=g))
    return c


@pytest.mark.parametrize("L,T", [(8, 4), (16, 4), (16, 1)])
def test_commit_kernel_matches_reference(L, T):
    c = _cursors(6, L, T, seed=L + T)
    slots = torch.tensor([4, -1, 0, 5, 2], dtype=torch.int32)
    n = torch.tensor([int(c.pending[s]) if s >= 0 else 1 for s in slots.tolist()], dtype=torch.int32)
    a, b = c.clone(), c.clone()
    ring_commit(a, slots, n, impl="triton")
    ring_commit(b, slots, n, impl="reference")
    for name in FIELDS:
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert torch.equal(a.write_pos[[1, 3]], c.write_pos[[1, 3]])  # slots outside the batch untouched
    assert (a.pending[[4, 0, 5, 2]] == 0).all()


@pytest.mark.parametrize("op", [ring_mark_folded, ring_reset])
def test_mark_folded_and_reset_kernels_match_their_references(op):
    """Every field of every slot, ``epoch`` included (a reset that kept the epoch would leave old fold markers
    valid), with a padding row and slots outside the batch (a test-quality audit found no such comparison)."""
    c = _cursors(6, 16, 4, seed=7)
    c.pending.zero_()  # committed: both ops refuse a slot with a verified window in flight
    slots = torch.tensor([4, -1, 0, 5], dtype=torch.int32)
    a, b = c.clone(), c.clone()
    op(a, slots, impl="triton")
    op(b, slots, impl="reference")
    for name in FIELDS:
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert not torch.equal(a.base, c.base) and torch.equal(a.base[[1, 2, 3]], c.base[[1, 2, 3]])
    if op is ring_reset:
        assert torch.equal(a.epoch[[4, 0, 5]], c.epoch[[4, 0, 5]] + 1)


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
    with pytest.raises(ValueError, match=r"slots \[2\] have a verified window not committed yet"):
        ring_mark_folded(c, torch.tensor([2, -1], dtype=torch.int32), impl=impl)  # it would drop that window
    for name in ("write_pos", "base", "flush", "pending", "epoch"):
        assert torch.equal(getattr(c, name), getattr(before, name))
    c.pending[2] = 0  # committed
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
    s = data.draw(st.integers(0, 5))
    fold_phase = data.draw(st.booleans())
    c = RingCursors.allocate(s + 1, L=L, window=T)
    c.epoch[s] = data.draw(st.integers(0, 1000))
    slot = torch.tensor([s], dtype=torch.int32)
    committed = 0  # records committed since the last fold, by the protocol's own bookkeeping
    for _ in range(40):
        wp, fl = int(c.write_pos[s]), int(c.flush[s])
        assert wp + T <= L
        assert wp == committed
        n = data.draw(st.integers(1, T))
        c.pending[s] = T
        epoch = int(c.epoch[s]) + 1
        ring_commit_reference(c, slot, torch.tensor([n], dtype=torch.int32), fold_phase=fold_phase)
        committed = n if fl else committed + n
        phase = fold_phase and T == 1 and (epoch + s) % (L - 1) == 0  # window 1: the row's fold phase
        assert int(c.flush[s]) == int(committed + 2 * T > L or phase)
        assert int(c.epoch[s]) == epoch


@pytest.mark.parametrize("impl", ["triton", "reference"])
@pytest.mark.parametrize("L", [4, 16, 32])
def test_window_one_rows_fold_in_their_own_phase(impl, L):
    """Rows of window 1 that start together fold in different steps (one step in L - 1 each, from their first fold
    on), and never hold more than L - 1 records: the fold phase of ops/cursors.py."""
    S = 3 * (L - 1)
    c = RingCursors.allocate(S, L=L, window=1)
    slots = torch.randperm(S, generator=torch.Generator().manual_seed(L)).to(torch.int32)
    ones = torch.ones(S, dtype=torch.int32)
    folds = []  # per step: the slots that fold at that step's verify
    for _ in range(3 * (L - 1)):
        folds.append(set(torch.nonzero(c.flush).flatten().tolist()))
        c.write_pos.masked_fill_(c.flush.bool(), 0)  # what the verify's fold and the commit's reset amount to
        assert int(c.write_pos.max()) <= L - 2
        c.pending.fill_(1)
        before = c.write_pos.clone()
        ring_commit(c, slots, ones, fold_phase=True, impl=impl)
        assert torch.equal(c.write_pos, before + 1)
    counts = [len(f) for f in folds[L - 1 :]]  # after every row's first fold
    assert counts == [3] * len(counts)  # every step folds the same number of rows: 3 per residue of the slot ids
    for s in range(S):
        steps = [i for i, f in enumerate(folds) if s in f]
        assert len(steps) >= 2 and all(b - a == L - 1 for a, b in zip(steps, steps[1:])), (s, steps)


@pytest.mark.parametrize("T, fold_phase", [(2, True), (1, False)])
def test_without_the_phase_rows_fold_at_capacity_only(T, fold_phase):
    """At window >= 2 (the phase is for window 1 only) or without ``fold_phase`` the commit folds only when the next
    window might not fit, whatever the epoch."""
    c = RingCursors.allocate(8, L=16, window=T)
    c.epoch.copy_(torch.arange(8, dtype=torch.int32) * 5)
    slots = torch.arange(8, dtype=torch.int32)
    for _ in range(2 * 16):
        c.pending.fill_(T)
        c.write_pos.masked_fill_(c.flush.bool(), 0)
        ring_commit(c, slots, torch.full((8,), T, dtype=torch.int32), fold_phase=fold_phase, impl="triton")
        assert torch.equal(c.flush, (c.write_pos + 2 * T > 16).int())


def test_fold_phase_pays_only_for_window_one_over_many_waves(monkeypatch):
    """Window 1 over at least verify_launch.MANY_WAVES waves of verify programs on a GPU; never at wider windows or
    on the CPU; the environment switch forces either way and a bad value is refused."""
    from replayssm.ops import launch, verify_launch

    monkeypatch.delenv("REPLAYSSM_FOLD_PHASE", raising=False)
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert not fold_phase_pays(256, 64, 1, cpu)
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    per_wave = ONE_LAUNCH_PER_SM * 132
    need = verify_launch.MANY_WAVES * per_wave
    assert fold_phase_pays(need // 64, 64, 1, gpu) and fold_phase_pays(256, 64, 1, gpu)
    assert not fold_phase_pays(need // 64 - 1, 64, 1, gpu) and not fold_phase_pays(8, 64, 1, gpu)
    assert not fold_phase_pays(256, 64, 2, gpu)
    monkeypatch.setenv("REPLAYSSM_FOLD_PHASE", "1")
    assert fold_phase_pays(8, 64, 1, cpu) and not fold_phase_pays(8, 64, 4, cpu)
    monkeypatch.setenv("REPLAYSSM_FOLD_PHASE", "0")
    assert not fold_phase_pays(256, 64, 1, gpu)
    monkeypatch.setenv("REPLAYSSM_FOLD_PHASE", "yes")
    with pytest.raises(ValueError, match="REPLAYSSM_FOLD_PHASE"):
        fold_phase_pays(256, 64, 1, gpu)


def test_a_bad_fold_phase_writes_nothing():
    c = _cursors(4, 16, 1, seed=3)
    before = c.clone()
    slots = torch.tensor([1, 2], dtype=torch.int32)
    with pytest.raises(TypeError, match="fold_phase"):
        ring_commit(c, slots, torch.ones(2, dtype=torch.int32), fold_phase=1)
    for name in ("write_pos", "base", "flush", "pending", "epoch"):
        assert torch.equal(getattr(c, name), getattr(before, name)), name


def test_plain_decode_runs_staged_over_many_waves(monkeypatch):
    """One launch for plain decode below verify_launch.MANY_WAVES waves, staged from there on (where the commit's
    fold phase spreads the folds and the staging kernel orders them), at the same batch as fold_phase_pays."""
    from replayssm.ops import launch

    monkeypatch.delenv("REPLAYSSM_VERIFY_ONE_LAUNCH", raising=False)
    monkeypatch.delenv("REPLAYSSM_FOLD_PHASE", raising=False)
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    gpu = torch.device("cuda")
    for B in (8, 64, 65, 66, 128, 256):
        assert one_launch(1, 16, B * 64, gpu) == (not fold_phase_pays(B, 64, 1, gpu)), B
    assert one_launch(1, 16, 64 * 64, gpu) and not one_launch(1, 16, 66 * 64, gpu)
    assert one_launch(1, 16, 256 * 64, torch.device("cpu"))  # the CPU never counts as many waves


@pytest.mark.parametrize("L", [4, 16])
def test_commit_kernel_matches_reference_with_the_fold_phase(L):
    """Kernel against reference with the fold phase on, window 1: random histories and flags, padding rows, epochs
    near the top of the int32 range (the phase takes remainders before it adds the slot), every cursor compared."""
    S = 12
    c = _cursors(S, L, 1, seed=L)
    g = torch.Generator().manual_seed(L + 1)
    c.epoch.copy_(torch.randint(2**31 - 40, 2**31 - 1, (S,), generator=g, dtype=torch.int64).to(torch.int32))
    slots = torch.tensor([3, -1, 0, 11, 7, -1, 5, 9, 2, 10, 1, 4], dtype=torch.int32)
    for _ in range(3 * L):
        c.pending.fill_(1)
        a, b = c.clone(), c.clone()
        ring_commit(a, slots, torch.ones(12, dtype=torch.int32), fold_phase=True, impl="triton")
        ring_commit(b, slots, torch.ones(12, dtype=torch.int32), fold_phase=True, impl="reference")
        for name in ("write_pos", "base", "flush", "pending", "epoch"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
        c = a
    assert int(c.epoch.min()) < 0  # some epochs wrapped past 2**31 - 1 on the way
