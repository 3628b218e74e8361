"""The verify with its fold last (``REPLAYSSM_VERIFY_FOLD_LAST=1``, ``verify_launch.fold_last``): a flushing row streams
its unfolded checkpoint with its whole history, as a row that does not flush, and folds once its window is done. The
committed state must stay bitwise the recurrent baseline's (the same fold on the same records), the outputs must be
those of the fold-first verify up to fp32 rounding, a retry (which finds the head folded) must not fold again, and
the switch must be checked. On the GPU at the real shape: tests/gpu/test_fold_last_gpu.py."""

import pytest
import torch

from replayssm.ops import gdn_replay_verify, launch, ring_commit, verify_launch
from tests.helpers.chain import Chain, call
from tests.helpers.gdn64 import rel_err
from tests.ops.test_fold_once import _committed, _flushing, _once
from tests.ops.test_verify_dots import TWO_BLOCKS

SHAPE = dict(T=4, L=8, V=32)


def _chain(T, L, K, dtype, steps):
    """A chain of verify + commit steps over three slots (one with a random window length) that flush several times:
    (outputs of every step, whether every committed state was torch.equal to the baseline's, flushes)."""
    c = Chain(3, 1, 2, K, K, T=T, L=L, dtype=dtype, device="cpu", impl="triton", seed=4)
    rng = torch.Generator().manual_seed(2)
    outs, bitwise = [], True
    for _ in range(steps):
        lens = [T, T, int(torch.randint(1, T + 1, (1,), generator=rng))]
        o_base, o = c.verify([0, 1, 2], lens)
        assert rel_err(o, o_base) < (1e-5 if dtype == torch.float32 else 2e-3)
        outs.append(o)
        c.commit([int(torch.randint(1, n + 1, (1,), generator=rng)) for n in lens])
        bitwise &= torch.equal(c.committed_replay([0, 1, 2]), c.state)
    return torch.cat(outs), bitwise, c.flushes


@pytest.mark.parametrize(
    "one_launch, T, L, K, dtype",
    [("0", 4, 8, 32, torch.float32), ("1", 4, 8, 32, torch.float32), ("0", 4, 16, 64, torch.float16)],
)
def test_folding_last_commits_the_baselines_bits_and_the_same_outputs(one_launch, T, L, K, dtype, monkeypatch):
    """fp16 at K=64, L=16: the staged kernel's small buffers packed in the fold's key rows (``PACK``), which the fold
    then fills after the stream; the staged runs with two fold blocks a program (``PRE``: the many-wave shape)."""
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", one_launch)
    if one_launch == "0":
        monkeypatch.setattr(launch, "_OVERRIDES", [{"verify": TWO_BLOCKS}])
    steps = 3 * L // T + 2
    o_first, bitwise_first, flushes = _chain(T, L, K, dtype, steps)
    monkeypatch.setenv("REPLAYSSM_VERIFY_FOLD_LAST", "1")
    o_last, bitwise_last, flushes_last = _chain(T, L, K, dtype, steps)
    assert flushes == flushes_last >= 6 and bitwise_first and bitwise_last
    assert not torch.equal(o_last, o_first)  # the switch took effect: the outputs come another way
    assert rel_err(o_last, o_first) < (1e-6 if dtype == torch.float32 else 5e-4)


@pytest.mark.parametrize("one_launch", ["0", "1"])
def test_a_retry_after_the_fold_does_not_fold_again(one_launch, monkeypatch):
    """The retry finds the head folded (its marker), streams the folded checkpoint with no history: the checkpoint is
    untouched, the outputs are the first attempt's up to rounding, the committed state the same bits."""
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", one_launch)
    monkeypatch.setenv("REPLAYSSM_VERIFY_FOLD_LAST", "1")
    o_ref, committed_ref = _once("triton", 3, **SHAPE)
    checkpoint, ring, slots, x = _flushing("triton", **SHAPE)
    before = checkpoint.clone()
    o_first = call(gdn_replay_verify, x, checkpoint=checkpoint, ring=ring, slots=slots, impl="triton")
    assert not torch.equal(checkpoint[1], before[1]) and torch.equal(o_first, o_ref)  # slot 1 folded, last
    folded = checkpoint.clone()
    o = call(gdn_replay_verify, x, checkpoint=checkpoint, ring=ring, slots=slots, impl="triton")  # the retry
    assert torch.equal(checkpoint, folded)
    assert rel_err(o, o_first) < 1e-6
    ring_commit(ring, slots, torch.tensor([3], dtype=torch.int32), impl="triton")
    assert torch.equal(_committed(checkpoint, ring, "triton"), committed_ref)


def test_fold_last_is_off_by_default_turns_the_dots_in_fold_off_and_is_checked(monkeypatch):
    monkeypatch.delenv("REPLAYSSM_VERIFY_FOLD_LAST", raising=False)
    assert verify_launch.fold_last() is False
    monkeypatch.setenv("REPLAYSSM_VERIFY_FOLD_LAST", "1")
    assert verify_launch.fold_last() is True
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", "0")
    monkeypatch.setattr(launch, "_OVERRIDES", [{"verify": TWO_BLOCKS}])
    chosen = []
    monkeypatch.setattr(verify_launch, "dots_in_fold", lambda *a: chosen.append(a) or 2)
    monkeypatch.setenv("REPLAYSSM_VERIFY_DIF", "2")
    o, committed = _once("triton", 3, **SHAPE)  # would fail its static_assert if DIF reached the kernel
    assert not chosen  # not even asked
    monkeypatch.setenv("REPLAYSSM_VERIFY_FOLD_LAST", "yes")
    with pytest.raises(ValueError, match="REPLAYSSM_VERIFY_FOLD_LAST must be 0, 1 or unset"):
        verify_launch.fold_last()
