"""The staged verify's fold-first launch (``verify_fold_first``): flushing rows folded in a launch of their own,
their window dots handed to the main kernel. Against the staged verify that folds inside its main kernel: the same
checkpoints and ring records bitwise (the same pinned fold), outputs close (the folded rows' window dots summed on
FMA rows instead of streamed); against the reference; a retry folds nothing again and gives the same outputs."""

import pytest
import torch

from replayssm.ops import gdn_replay_verify, ring_commit
from replayssm.ops.verify_launch import fold_first
from tests.helpers.chain import Chain, call
from tests.helpers.gdn64 import rel_err
from tests.ops.test_fold_once import _committed, _flushing


def _run(T, L, V, ff, monkeypatch, device, impl="triton"):
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", "0")
    monkeypatch.setenv("REPLAYSSM_VERIFY_FOLD_FIRST", ff)
    H, HV, K, S = 2, 4, 32, 3
    c = Chain(S, H, HV, K, V, T=T, L=L, dtype=torch.float32, device=device, impl=impl, seed=5)
    rng = torch.Generator().manual_seed(9)
    outs = []
    for _ in range(2 * L // T + 2):
        lens = [int(torch.randint(1, T + 1, (1,), generator=rng)) for _ in range(S)]
        outs.append(c.verify([2, 0, 1], lens)[1].clone())
        c.commit([int(torch.randint(1, n + 1, (1,), generator=rng)) for n in lens])
    return c, outs


@pytest.mark.parametrize("T, L, V", [(4, 8, 32), (2, 8, 64), (1, 4, 32)])
def test_fold_first_matches_the_fold_in_the_main_kernel(T, L, V, monkeypatch, device):
    c0, o0 = _run(T, L, V, "0", monkeypatch, device)
    c1, o1 = _run(T, L, V, "1", monkeypatch, device)
    cr, orf = _run(T, L, V, "0", monkeypatch, device, impl="reference")
    assert c0.flushes > 0 and c0.flushes == c1.flushes
    assert torch.equal(c0.checkpoint, c1.checkpoint)
    for name in ("k", "v", "g", "beta"):
        assert torch.equal(getattr(c0.ring, name).nan_to_num(), getattr(c1.ring, name).nan_to_num()), name
    assert rel_err(c0.ring.u.nan_to_num(), c1.ring.u.nan_to_num()) < 1e-5
    assert any(not torch.equal(a, b) for a, b in zip(o0, o1))  # the switch took effect: dots summed another way
    for a, b, r in zip(o0, o1, orf):
        assert rel_err(a, b) < 1e-5 and rel_err(b, r) < 1e-5
    assert rel_err(c1.checkpoint, cr.checkpoint) < 1e-5


def test_a_retry_of_a_fold_first_verify_folds_once_and_gives_the_same_outputs(monkeypatch):
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", "0")
    monkeypatch.setenv("REPLAYSSM_VERIFY_FOLD_FIRST", "1")
    shape = dict(T=4, L=8, V=32)
    checkpoint, ring, slots, x = _flushing("triton", **shape)
    o1 = call(gdn_replay_verify, x, checkpoint=checkpoint, ring=ring, slots=slots, impl="triton")
    folded = checkpoint.clone()
    o2 = call(gdn_replay_verify, x, checkpoint=checkpoint, ring=ring, slots=slots, impl="triton")  # the retry
    assert torch.equal(checkpoint, folded) and torch.equal(o1, o2)
    ring_commit(ring, slots, torch.tensor([3], dtype=torch.int32), impl="triton")
    ref_ckpt, ref_ring, _, _ = _flushing("reference", **shape)
    o_ref = call(gdn_replay_verify, x, checkpoint=ref_ckpt, ring=ref_ring, slots=slots, impl="reference")
    ring_commit(ref_ring, slots, torch.tensor([3], dtype=torch.int32), impl="reference")
    assert rel_err(o1, o_ref) < 1e-5
    assert rel_err(_committed(checkpoint, ring, "triton"), _committed(ref_ckpt, ref_ring, "reference")) < 1e-5


def test_the_fold_first_switch(monkeypatch):
    monkeypatch.delenv("REPLAYSSM_VERIFY_FOLD_FIRST", raising=False)
    assert fold_first(True) is False
    monkeypatch.setenv("REPLAYSSM_VERIFY_FOLD_FIRST", "1")
    assert fold_first(True) is True and fold_first(False) is False
    monkeypatch.setenv("REPLAYSSM_VERIFY_FOLD_FIRST", "yes")
    with pytest.raises(ValueError, match="REPLAYSSM_VERIFY_FOLD_FIRST must be 0, 1 or unset"):
        fold_first(True)
