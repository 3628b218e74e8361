"""The staged verify's window products taken with the fold (``verify_launch.dots_in_fold``, ``verify_dots``): a
folding program multiplies its just-folded blocks instead of streaming its checkpoint back. Outputs and committed
states must be bitwise those of the stream (one product code), a retry (which finds the rows folded and streams
them) must give the first attempt's outputs, and the switch must be honoured and checked. In the interpreter the
products are fp32 ``dot``s; on the GPU, tests/gpu/test_verify_dots_gpu.py."""

import pytest
import torch

from replayssm.ops import gdn_replay_verify, launch, ring_commit, verify_launch
from replayssm.ops.verify_launch import dots_in_fold
from tests.helpers.chain import call
from tests.helpers.gdn64 import rel_err
from tests.ops.test_fold_once import _committed, _flushing, _once

SHAPE = dict(T=4, L=8, V=32)  # T=4: products on tensor cores
# the many-wave shape scaled down: whole heads, two fold blocks a program (one warp: 16-row blocks of 4 rows a thread)
TWO_BLOCKS = launch.TileConfig(num_warps=1, rows_per_thread=4, rows_per_program=32, stages=2, k_chunk=32)


@pytest.fixture
def staged(monkeypatch):
    """The staged verify (at these tiny batches the CPU would run it in one launch) with two fold blocks a program,
    and a record of every choice ``dots_in_fold`` made."""
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", "0")
    monkeypatch.setattr(launch, "_OVERRIDES", [{"verify": TWO_BLOCKS}])
    chosen = []

    def spy(*args):
        chosen.append(real(*args))
        return chosen[-1]

    real = verify_launch.dots_in_fold
    monkeypatch.setattr(verify_launch, "dots_in_fold", spy)
    return chosen


@pytest.mark.parametrize("mode", ["1", "2", "3"])  # vectors after the fold / with the history / window too
def test_the_products_from_the_fold_are_the_streams(staged, monkeypatch, mode):
    monkeypatch.setenv("REPLAYSSM_VERIFY_DIF", "0")
    o_stream, committed_stream = _once("triton", 3, **SHAPE)
    assert staged and not any(staged)
    staged.clear()
    monkeypatch.setenv("REPLAYSSM_VERIFY_DIF", mode)
    o_fold, committed_fold = _once("triton", 3, **SHAPE)
    assert staged and staged == [int(mode)] * len(staged)  # every verify of the chain (the flushing one too) took it
    assert torch.equal(o_fold, o_stream)
    assert torch.equal(committed_fold, committed_stream)
    o_ref, committed_ref = _once("reference", 3, **SHAPE)
    assert rel_err(o_fold, o_ref) < 1e-5 and rel_err(committed_fold, committed_ref) < 1e-5


@pytest.mark.parametrize("mode", ["1", "2", "3"])
def test_a_retry_streams_the_folded_rows_and_gives_the_first_attempts_outputs(staged, monkeypatch, mode):
    monkeypatch.setenv("REPLAYSSM_VERIFY_DIF", mode)
    o_ref, committed_ref = _once("triton", 3, **SHAPE)
    checkpoint, ring, slots, x = _flushing("triton", **SHAPE)
    before = checkpoint.clone()
    o_first = call(gdn_replay_verify, x, checkpoint=checkpoint, ring=ring, slots=slots, impl="triton")
    assert not torch.equal(checkpoint[1], before[1])  # slot 1 folded (with its products)
    folded = checkpoint.clone()
    o = call(gdn_replay_verify, x, checkpoint=checkpoint, ring=ring, slots=slots, impl="triton")  # the retry
    assert staged and all(staged) and torch.equal(checkpoint, folded)  # ... found it folded: no fold, so it streamed
    assert torch.equal(o, o_first) and torch.equal(o, o_ref)
    ring_commit(ring, slots, torch.tensor([3], dtype=torch.int32), impl="triton")
    assert torch.equal(_committed(checkpoint, ring, "triton"), committed_ref)


def test_dots_in_fold_is_mode_2_by_default_at_l16_and_needs_the_staged_two_block_tensor_core_shape(monkeypatch):
    monkeypatch.delenv("REPLAYSSM_VERIFY_DIF", raising=False)
    assert dots_in_fold(True, True, True, 64, 128, 8, True, 16) == 2  # measured faster at L=16 (bench/NOTES.md)
    assert dots_in_fold(True, True, True, 64, 128, 8, False, 32) == 0  # and slower at L=32
    assert dots_in_fold(True, True, True, 64, 128, 8, True, 32) == 0  # packed (bf16) too
    assert dots_in_fold(True, True, True, 64, 128, 8, False, 17) == 0  # the boundary: L <= 16 only
    assert dots_in_fold(True, True, True, 64, 128, 8, True, 8) == 2  # below 16 the same path (not timed there)
    assert dots_in_fold(True, True, True, 64, 128, 16, True, 16) == 0  # T=8 as with the switch set
    ln = launch.resolve("verify", 128, 256 * 64, torch.device("cpu"), split_small=True)
    assert (ln.rows, ln.rows_per_program) == (64, 128)  # the many-wave shape it is for
    for env, mode in (("0", 0), ("1", 1), ("2", 2), ("3", 3)):
        monkeypatch.setenv("REPLAYSSM_VERIFY_DIF", env)
        assert dots_in_fold(True, True, True, 64, 128, 8, True, 16) == mode
        assert dots_in_fold(True, True, True, 64, 128, 8, False, 32) == mode
        assert dots_in_fold(True, True, True, 64, 128, 8, True, 32) == min(mode, 1)  # packed L=32: no room for 2, 3
        assert dots_in_fold(False, True, True, 64, 128, 8, True, 16) == 0  # one launch
        assert dots_in_fold(True, False, True, 64, 128, 8, True, 16) == 0  # FMA rows (T <= 2)
        assert dots_in_fold(True, True, False, 64, 128, 8, True, 16) == 0  # no prefetch of the second block
        assert dots_in_fold(True, True, True, 64, 64, 8, True, 16) == 0  # one block
        assert dots_in_fold(True, True, True, 32, 128, 8, True, 16) == 0  # four blocks
        assert dots_in_fold(True, True, True, 64, 128, 16, True, 32) == 0  # T=8: 16 window vectors would spill
    monkeypatch.setenv("REPLAYSSM_VERIFY_DIF", "yes")
    with pytest.raises(ValueError, match="REPLAYSSM_VERIFY_DIF must be 0, 1, 2, 3 or unset"):
        dots_in_fold(True, True, True, 64, 128, 8, True, 16)
