"""The verify with its fold last (``REPLAYSSM_VERIFY_FOLD_LAST=1``) at the real shape (122B TP1 GDN heads, bf16,
staged with its buffers packed in the fold's key rows, and in one launch): a chain's committed states torch.equal to
the recurrent baseline's after every step, the outputs those of the fold-first verify up to rounding, and a retried
mixed step (some rows folding, the others streaming) that does not fold again. CPU twin: tests/ops/test_fold_last.py."""

import pytest
import torch

from replayssm.ops import gdn_replay_verify
from tests.gpu.test_staged_retry import HV, H, K, V, _mixed_step
from tests.helpers.chain import Chain, call
from tests.helpers.gdn64 import rel_err


def _chain(T, L, steps=40):
    c = Chain(64, H, HV, K, V, T=T, L=L, dtype=torch.bfloat16, device="cuda", impl="triton", seed=3,
              rng_device="cuda")  # fmt: skip
    g = torch.Generator().manual_seed(3)
    outs = []
    for i in range(steps):
        lens = torch.randint(1, T + 1, (64,), generator=g).tolist()
        _, o = c.verify(list(range(64)), lens)
        outs.append(o.float())
        c.commit([int(torch.randint(1, n + 1, (1,), generator=g)) for n in lens])
        assert torch.equal(c.committed_replay(list(range(64))), c.state), i
    return torch.cat(outs), c.flushes


@pytest.mark.parametrize("T, L, one_launch", [(4, 16, "0"), (4, 32, "0"), (1, 32, "0"), (2, 16, "0"), (4, 16, "1")])
def test_folding_last_keeps_the_baselines_bits(T, L, one_launch, monkeypatch):
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", one_launch)
    o_first, flushes = _chain(T, L)
    monkeypatch.setenv("REPLAYSSM_VERIFY_FOLD_LAST", "1")
    o_last, flushes_last = _chain(T, L)
    assert flushes == flushes_last >= 32
    assert not torch.equal(o_last, o_first) and rel_err(o_last, o_first) < 5e-3  # bf16 outputs, another route


@pytest.mark.parametrize("T, L, one_launch", [(4, 16, "0"), (1, 32, "0"), (4, 16, "1")])
def test_a_retried_step_folding_last_does_not_fold_again(T, L, one_launch, monkeypatch):
    """Retries find their heads folded and fold nothing (staged: its buffers packed in the fold's key rows)."""
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", one_launch)
    monkeypatch.setenv("REPLAYSSM_VERIFY_FOLD_LAST", "1")
    c, x, slots = _mixed_step(T, L)
    before = c.checkpoint.clone()
    first = call(gdn_replay_verify, x, checkpoint=c.checkpoint, ring=c.ring, slots=slots).clone()
    folded = c.checkpoint.clone()
    assert not torch.equal(folded, before)
    for _ in range(2):
        again = call(gdn_replay_verify, x, checkpoint=c.checkpoint, ring=c.ring, slots=slots)
        assert torch.equal(c.checkpoint, folded)
        assert rel_err(again.float(), first.float()) < 5e-3
