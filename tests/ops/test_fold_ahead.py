"""Fold ahead (``ops/fold_ahead.py``): after a commit, every layer of the rows that will flush folds at once, and
their next verify streams them with an empty history. The committed state never changes: bitwise the baseline's.

The CPU has one "SM", so ``fold_ahead_pays`` never picks it here for these batches; the tests call the op
directly, or force it with ``REPLAYSSM_FOLD_AHEAD=1``."""

import pytest
import torch

from replayssm.ops import (
    RingLayers,
    fold_ahead_pays,
    gdn_exact_fold,
    gdn_fold_ahead,
    gdn_fold_ahead_reference,
    gdn_replay_verify,
    launch,
)
from tests.helpers.chain import LayerChain, call
from tests.helpers.gdn64 import rel_err
from tests.helpers.inputs import make_gdn_inputs, slot_tensor

NL, H, HV, K, V = 2, 2, 4, 32, 32


@pytest.mark.parametrize("T, L", [(4, 8), (2, 8), (1, 4)])
def test_folding_ahead_keeps_the_committed_state_bitwise_the_baselines(T, L, device):
    """Two layers over a chain of steps with a padding row and a slot sitting out every other step: with a fold
    ahead after every commit the committed state of every layer is torch.equal to the recurrent baseline's after
    every step, the rows folded ahead then verify with no fold of their own (their flush cursor cleared), and the
    outputs equal those of the same chain folding inside its verifies."""
    S = 3
    runs = {}
    for ahead in (True, False):
        c = LayerChain(S, NL, H, HV, K, V, T=T, L=L, device=device, impl="triton", seed=5)
        rng = torch.Generator().manual_seed(9)
        outs, folded_ahead = [], 0
        for i in range(2 * L // T + 3):
            slots = ([2, -1, 0], [2, -1, 0, 1])[i % 2]
            lens = [int(torch.randint(1, T + 1, (1,), generator=rng)) for _ in slots]
            accepted = [int(torch.randint(1, n + 1, (1,), generator=rng)) for n in lens]
            outs += [o for _, o in c.step(slots, lens, accepted, ahead)]
            assert not ahead or int(c.rings.cursors.flush.sum()) == 0  # every flag cleared by its fold
            if ahead:  # a commit leaves write_pos >= 1 unless the row was folded ahead after it
                folded_ahead += sum(int(c.rings.cursors.write_pos[s]) == 0 for s in slots if s >= 0)
            for layer in range(NL):
                assert torch.equal(c.committed(layer, list(range(S))), c.state[layer]), (i, layer)
        runs[ahead] = (c, outs, folded_ahead)
    (c1, o1, n1), (c0, o0, _) = runs[True], runs[False]
    assert n1 > 0
    for a, b in zip(o1, o0):
        assert torch.equal(a, b)
    assert torch.equal(c1.state, c0.state)


def test_fold_ahead_matches_the_reference(device):
    """Rows with and without a flush flag, a padding row, one row already folded in layer 0 (its markers say this
    epoch: not folded twice): checkpoints, markers and cursors against the PyTorch reference; rows that do not
    flush untouched."""
    T, L, S = 4, 16, 4
    c = LayerChain(S, NL, H, HV, K, V, T=T, L=L, device=device, impl="reference", seed=3)
    rng = torch.Generator().manual_seed(1)
    for _ in range(2):
        lens = [int(torch.randint(1, T + 1, (1,), generator=rng)) for _ in range(S)]
        c.step(list(range(S)), lens, [int(torch.randint(1, n + 1, (1,), generator=rng)) for n in lens], False)
    cur = c.rings.cursors
    cur.flush.zero_()
    cur.flush[[1, 3]] = 1
    assert int(cur.write_pos[1]) > 0 and int(cur.write_pos[3]) > 0
    gdn_exact_fold(
        c.checkpoint[0], c.rings.layers[0], slot_tensor([3], device), empty_history=False, impl="reference"
    )  # fmt: skip  (layer 0 of slot 3 folded and marked already)
    slots = slot_tensor([3, -1, 0, 1], device)
    res = {}
    for impl in ("triton", "reference"):
        ck = c.checkpoint.clone()
        rings = RingLayers(*(getattr(c.rings, n).clone() for n in ("k", "v", "g", "beta", "u", "folded")),
                           c.rings.cursors.clone())  # fmt: skip
        fn = gdn_fold_ahead if impl == "triton" else gdn_fold_ahead_reference
        kw = {"impl": "triton"} if impl == "triton" else {}
        fn(ck, rings, slots, **kw)
        res[impl] = (ck, rings)
    (ck, rg), (ck_r, rg_r) = res["triton"], res["reference"]
    assert rel_err(ck, ck_r) < 1e-5
    assert torch.equal(ck[0, 3], c.checkpoint[0, 3])  # marked folded already: not folded twice
    assert not torch.equal(ck[1, 3], c.checkpoint[1, 3]) and not torch.equal(ck[:, 1], c.checkpoint[:, 1])
    assert torch.equal(ck[:, [0, 2]], c.checkpoint[:, [0, 2]])  # no flush flag, or not in the batch
    assert torch.equal(rg.folded, rg_r.folded)
    for name in ("write_pos", "base", "flush", "pending", "epoch"):
        assert torch.equal(getattr(rg.cursors, name), getattr(rg_r.cursors, name)), name
    assert rg.cursors.write_pos[[1, 3]].tolist() == [0, 0] and rg.cursors.flush.sum() == 0


def test_one_layer_folds_ahead_bitwise(device):
    """A pool of one GDN layer (the kernel's layer loop once): committed state torch.equal to the baseline's."""
    c = LayerChain(2, 1, H, HV, K, V, T=2, L=4, device=device, impl="triton", seed=12)
    for lens, acc in (([2, 1], [2, 1]), ([2, 2], [1, 2]), ([1, 2], [1, 1])):
        c.step([1, 0], lens, acc, ahead=True)
        assert int(c.rings.cursors.flush.sum()) == 0
        assert torch.equal(c.committed(0, [0, 1]), c.state[0])
    assert int(c.rings.cursors.epoch.min()) > 3  # three commits, and folds ahead that advanced the epochs again


def test_fold_ahead_splits_heads_over_programs(device):
    """Programs of 8 rows (four per 32-row head) give bitwise the checkpoints of whole-head programs."""
    T, L, S = 2, 4, 2
    c = LayerChain(S, NL, H, HV, K, V, T=T, L=L, device=device, impl="triton", seed=8)
    c.step([0, 1], [2, 1], [2, 1], False)
    c.step([0, 1], [2, 2], [1, 2], False)
    assert int(c.rings.cursors.flush.sum()) > 0
    res = []
    for rows in (8, 32):
        ck = c.checkpoint.clone()
        rings = RingLayers(*(getattr(c.rings, n).clone() for n in ("k", "v", "g", "beta", "u", "folded")),
                           c.rings.cursors.clone())  # fmt: skip
        with launch.override(fold_ahead=launch.TileConfig(num_warps=1, rows_per_thread=1, rows_per_program=rows)):
            gdn_fold_ahead(ck, rings, slot_tensor([1, 0], device), impl="triton")
        res.append(ck)
    assert torch.equal(res[0], res[1]) and not torch.equal(res[0], c.checkpoint)


def test_bad_calls_are_refused_before_anything_is_written(device):
    c = LayerChain(2, NL, H, HV, K, V, T=2, L=4, device=device, impl="triton", seed=2)
    c.step([0, 1], [2, 2], [2, 2], False)
    assert int(c.rings.cursors.flush.sum()) > 0
    ids = slot_tensor([0, 1], device)

    def unchanged(ck, cur, marks):
        return (torch.equal(c.checkpoint, ck) and torch.equal(c.rings.folded, marks)
                and all(torch.equal(getattr(c.rings.cursors, n), getattr(cur, n))
                        for n in ("write_pos", "base", "flush", "pending", "epoch")))  # fmt: skip

    before = (c.checkpoint.clone(), c.rings.cursors.clone(), c.rings.folded.clone())
    with pytest.raises(TypeError, match="RingLayers"):
        gdn_fold_ahead(c.checkpoint, c.rings.layers[0], ids)
    with pytest.raises(ValueError, match="layers"):
        gdn_fold_ahead(c.checkpoint[:1], c.rings, ids)
    with pytest.raises(ValueError, match="slots"):
        gdn_fold_ahead(c.checkpoint, c.rings, slot_tensor([0, 2], device))
    with pytest.raises(ValueError, match="slots"):
        gdn_fold_ahead(c.checkpoint, c.rings, slot_tensor([1, 1], device))  # a slot twice
    assert unchanged(*before)
    x = make_gdn_inputs([1], H, HV, K, V, device=device)
    x["A_log"], x["dt_bias"] = c.params[0]["A_log"], c.params[0]["dt_bias"]
    call(gdn_replay_verify, x, checkpoint=c.checkpoint[0], ring=c.rings.layers[0], slots=slot_tensor([1], device))
    before = (c.checkpoint.clone(), c.rings.cursors.clone(), c.rings.folded.clone())
    with pytest.raises(ValueError, match="not committed"):
        gdn_fold_ahead(c.checkpoint, c.rings, ids)  # slot 1 has a verified window pending
    assert unchanged(*before)


def test_fold_ahead_pays_at_one_wave_of_short_windows(monkeypatch):
    monkeypatch.delenv("REPLAYSSM_FOLD_AHEAD", raising=False)
    assert not fold_ahead_pays(1, 2, 2, 8, torch.device("cpu"))  # never by itself on the CPU
    dev = torch.device("cuda")  # (only its type is read: no GPU needed)
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    assert fold_ahead_pays(8, 64, 4, 16, dev) and fold_ahead_pays(8, 64, 2, 32, dev)
    assert fold_ahead_pays(8, 48, 3, 16, dev)  # the 27B geometry's 48 value heads, a 3-token window
    assert not fold_ahead_pays(8, 64, 1, 16, dev)  # plain decode: every row folds in the same step
    assert not fold_ahead_pays(9, 64, 4, 16, dev) and not fold_ahead_pays(256, 64, 2, 16, dev)  # a fuller GPU
    assert not fold_ahead_pays(8, 64, 8, 16, dev)  # long windows fold nearly every step
    assert not fold_ahead_pays(8, 64, 4, 32, dev)  # 256 history dots: the verify is staged there
    monkeypatch.setenv("REPLAYSSM_FOLD_AHEAD", "1")
    assert fold_ahead_pays(256, 64, 8, 16, dev)
    assert not fold_ahead_pays(8, 64, 1, 16, dev)  # never plain decode, even forced (the kernel bench did: a review)
    monkeypatch.setenv("REPLAYSSM_FOLD_AHEAD", "0")
    assert not fold_ahead_pays(8, 64, 4, 16, dev)
    monkeypatch.setenv("REPLAYSSM_FOLD_AHEAD", "yes")
    with pytest.raises(ValueError, match="REPLAYSSM_FOLD_AHEAD must be 0, 1 or unset"):
        fold_ahead_pays(8, 64, 4, 16, dev)


def test_ring_layers_checks_its_buffers():
    r = RingLayers.allocate(3, 4, H, HV, K, V, L=8, window=2, dtype=torch.float32)
    assert r.num_layers == 3 and len(r.layers) == 3 and r.layers[2].cursors is r.cursors
    r.layers[1].k.fill_(1.0)  # a layer's Ring is a view
    assert (r.k[1] == 1).all() and r.k[0].isnan().all()
    with pytest.raises(ValueError, match="same number of layers"):
        RingLayers(r.k, r.v[:2], r.g, r.beta, r.u, r.folded, r.cursors)
    with pytest.raises(ValueError, match="Ring.k"):
        RingLayers(r.k[:, :, :, :4].contiguous(), r.v, r.g, r.beta, r.u, r.folded, r.cursors)  # L=4 records, not 8
    with pytest.raises(ValueError, match="num_layers"):
        RingLayers.allocate(0, 4, H, HV, K, V, L=8, window=2)
    big = RingLayers.allocate(2, 8, H, HV, K, V, L=8, window=2, dtype=torch.float32)
    parts = (big.k[:, :4], big.v[:, :4], big.g[:, :4], big.beta[:, :4], big.u[:, :4], big.folded[:, :4])
    with pytest.raises(ValueError, match="contiguous"):  # slots 0-3 of a larger stack: the kernels' offsets break
        RingLayers(*parts, r.cursors)
