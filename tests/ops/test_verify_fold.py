"""The verify's fold in a launch of its own (``ops/verify_fold.py``): a small batch's flushing rows fold first, split
over programs of a few rows, and the main kernel streams them with an empty history.

The CPU has one "SM", so the default choice (``verify.fold_first``: one launch and one wave of programs) never
picks it here; ``REPLAYSSM_VERIFY_FOLD_FIRST=1`` forces it, and ``launch.override(verify_fold=...)`` sizes its
programs."""

import pytest
import torch

from replayssm.ops import gdn_replay_verify, launch
from replayssm.ops.verify import fold_first
from tests.helpers.chain import Chain, call
from tests.helpers.gdn64 import rel_err
from tests.helpers.inputs import make_gdn_inputs, slot_tensor

H, HV, K, V = 2, 4, 32, 32


def test_fold_first_follows_the_way_and_the_batch(monkeypatch):
    monkeypatch.delenv("REPLAYSSM_VERIFY_FOLD_FIRST", raising=False)
    dev = torch.device("cpu")
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    assert fold_first(True, 8 * 64, dev)  # B=8 at the 122B geometry: one wave (528 = 4 per SM)
    assert not fold_first(True, 9 * 64, dev) and not fold_first(True, 256 * 64, dev)  # plain decode keeps its fold
    assert not fold_first(False, 8 * 64, dev)  # staged: the fold stays in the main kernel
    monkeypatch.setenv("REPLAYSSM_VERIFY_FOLD_FIRST", "1")
    assert fold_first(True, 256 * 64, dev) and not fold_first(False, 8 * 64, dev)
    monkeypatch.setenv("REPLAYSSM_VERIFY_FOLD_FIRST", "0")
    assert not fold_first(True, 8, dev)
    monkeypatch.setenv("REPLAYSSM_VERIFY_FOLD_FIRST", "on")
    with pytest.raises(ValueError, match="REPLAYSSM_VERIFY_FOLD_FIRST must be 0, 1 or unset"):
        fold_first(True, 8, dev)


def test_a_bad_fold_first_switch_is_refused_before_anything_is_written(monkeypatch, device):
    c = Chain(2, H, HV, K, V, T=4, L=8, dtype=torch.float32, device=device, impl="triton", seed=3)
    c.verify([0, 1], [3, 2])
    c.commit([2, 1])
    ck, ring = c.checkpoint.clone(), c.ring.clone()
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", "1")
    monkeypatch.setenv("REPLAYSSM_VERIFY_FOLD_FIRST", "2")
    x = make_gdn_inputs([4, 1], H, HV, K, V, dtype=torch.float32, device=device)
    with pytest.raises(ValueError, match="REPLAYSSM_VERIFY_FOLD_FIRST"):
        call(gdn_replay_verify, x, checkpoint=c.checkpoint, ring=c.ring, slots=slot_tensor([1, 0], device),
             impl="triton")  # fmt: skip
    assert torch.equal(c.checkpoint, ck)
    for name in ("k", "v", "u", "g", "beta", "folded"):
        assert torch.equal(getattr(c.ring, name).nan_to_num(), getattr(ring, name).nan_to_num()), name
    for name in ("write_pos", "base", "flush", "epoch", "pending"):
        assert torch.equal(getattr(c.ring.cursors, name), getattr(ring.cursors, name)), name


def _chain(first: str, T: int, L: int, rows, monkeypatch, device, steps: int):
    """A chain with folds, in one launch, the fold first or inside the main kernel; returns it and its outputs."""
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", "1")
    monkeypatch.setenv("REPLAYSSM_VERIFY_FOLD_FIRST", first)
    shape = {"verify_fold": launch.TileConfig(num_warps=1, rows_per_thread=1, rows_per_program=rows)} if rows else {}
    c = Chain(3, H, HV, K, V, T=T, L=L, dtype=torch.float32, device=device, impl="triton", seed=7)
    rng = torch.Generator().manual_seed(5)
    outs = []
    with launch.override(**shape):
        for i in range(steps):
            slots = ([2, -1, 0], [2, -1, 0, 1])[i % 2]  # slot 1 sits out every other step
            lens = [int(torch.randint(1, T + 1, (1,), generator=rng)) for _ in slots]
            outs.append(c.verify(slots, lens)[1].clone())
            c.commit([int(torch.randint(1, n + 1, (1,), generator=rng)) for n in lens])
    return c, outs


@pytest.mark.parametrize("T, L, rows", [(4, 8, None), (4, 8, 16), (1, 4, 8), (2, 8, 32)])
def test_the_fold_first_verify_is_bitwise_the_folding_main_kernel(T, L, rows, monkeypatch, device):
    """Over a chain with folds, padding rows and programs of ``rows`` rows (None: the default 32, a whole head
    here; 16 and 8: two and four programs per head): checkpoints, fold markers and the ring's records bitwise those of
    the main kernel folding its rows itself (the same pinned update on the same records), outputs equal, and the
    baseline's committed state bitwise too."""
    c1, o1 = _chain("1", T, L, rows, monkeypatch, device, steps=2 * L // T + 2)
    c0, o0 = _chain("0", T, L, None, monkeypatch, device, steps=2 * L // T + 2)
    assert c1.flushes > 0 and c1.flushes == c0.flushes
    assert torch.equal(c1.checkpoint, c0.checkpoint)
    for name in ("k", "v", "u", "g", "beta", "folded"):
        assert torch.equal(getattr(c1.ring, name).nan_to_num(), getattr(c0.ring, name).nan_to_num()), name
    for name in ("write_pos", "base", "flush", "epoch", "pending"):
        assert torch.equal(getattr(c1.ring.cursors, name), getattr(c0.ring.cursors, name)), name
    for a, b in zip(o1, o0):
        assert torch.equal(a, b)
    assert torch.equal(c1.committed_replay([0, 1, 2]), c1.state)


@pytest.mark.parametrize("rows", [None, 8])
def test_the_fold_first_verify_matches_the_reference(rows, monkeypatch, device):
    """A flushing row among rows with history, a padding row, T=4 (the tensor-core path): outputs, checkpoints, the
    ring's records and ``pending`` against the PyTorch reference; nothing left unwritten (NaN-filled output)."""
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", "1")
    monkeypatch.setenv("REPLAYSSM_VERIFY_FOLD_FIRST", "1")
    shape = {"verify_fold": launch.TileConfig(num_warps=1, rows_per_thread=1, rows_per_program=rows)} if rows else {}
    T, L = 4, 16
    c = Chain(4, H, HV, K, V, T=T, L=L, dtype=torch.float32, device=device, impl="reference", seed=11)
    rng = torch.Generator().manual_seed(2)
    for _ in range(2):
        lens = [int(torch.randint(1, T + 1, (1,), generator=rng)) for _ in range(4)]
        c.verify([0, 1, 2, 3], lens)
        c.commit([int(torch.randint(1, n + 1, (1,), generator=rng)) for n in lens])
    c.ring.cursors.flush.zero_()
    c.ring.cursors.flush[1] = 1
    assert int(c.ring.cursors.write_pos[1]) > 0 and int(c.ring.cursors.write_pos[0]) > 0
    slots, lens = [1, 0, -1, 3, 2], [4, 3, 2, 4, 1]
    x = make_gdn_inputs(lens, H, HV, K, V, dtype=torch.float32, device=device)
    res = {}
    for impl in ("triton", "reference"):
        ck, ring = c.checkpoint.clone(), c.ring.clone()
        out = torch.full_like(x["v"], float("nan"))
        with launch.override(**shape):
            call(gdn_replay_verify, x, checkpoint=ck, ring=ring, slots=slot_tensor(slots, device), out=out, impl=impl)
        res[impl] = (out, ck, ring)
    (o, ck, rg), (o_r, ck_r, rg_r) = res["triton"], res["reference"]
    assert not torch.isnan(o).any()
    assert (o[7:9] == 0).all()  # the padding row (tokens 7 and 8)
    assert rel_err(o, o_r) < 1e-5
    assert not torch.equal(ck[1], c.checkpoint[1])  # slot 1 folded its history
    assert torch.equal(ck[[0, 2, 3]], c.checkpoint[[0, 2, 3]])  # the others reconstructed theirs
    assert rel_err(ck, ck_r) < 1e-5
    for name in ("u", "k", "v", "g", "beta"):
        assert rel_err(getattr(rg, name).nan_to_num(), getattr(rg_r, name).nan_to_num()) < 1e-5, name
    assert torch.equal(rg.cursors.pending, rg_r.cursors.pending)


def test_a_retried_fold_first_verify_folds_once(monkeypatch, device):
    """The fold launch marks the blocks it folds with the slot's epoch: a retry of the same step neither folds again
    nor gives other outputs."""
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", "1")
    monkeypatch.setenv("REPLAYSSM_VERIFY_FOLD_FIRST", "1")
    c = Chain(2, H, HV, K, V, T=2, L=4, dtype=torch.float32, device=device, impl="triton", seed=4)
    while not int(c.ring.cursors.flush[1]):
        c.verify([1, 0], [2, 1])
        c.commit([2, 1])
    x = make_gdn_inputs([2, 1], H, HV, K, V, dtype=torch.float32, device=device)
    slots = slot_tensor([1, 0], device)
    before = c.checkpoint.clone()
    o1 = call(gdn_replay_verify, x, checkpoint=c.checkpoint, ring=c.ring, slots=slots, impl="triton")
    folded = c.checkpoint.clone()
    assert not torch.equal(folded[1], before[1])
    o2 = call(gdn_replay_verify, x, checkpoint=c.checkpoint, ring=c.ring, slots=slots, impl="triton")
    assert torch.equal(c.checkpoint, folded) and torch.equal(o1, o2)
