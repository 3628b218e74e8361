"""What ``REPLAYSSM_VERIFY_FOLD_LAST=1`` gives up (``verify_launch.fold_last``): an aborted and retried step of a
flushing row (``StatePool.abort`` folds flagged rows) streams the folded checkpoint, where its first attempt streamed
the unfolded one with its history, so the retry's logits equal the first attempt's up to rounding instead of bit for
bit (tests/engine/test_misuse.py, with the switch off). The committed states stay bitwise the recurrent lockstep's.
The Triton kernels run (in the interpreter), as the switch lives there."""

import pytest
import torch

from replayssm.engine.runner import ModelRunner, RunnerConfig
from replayssm.models.loader import load_model


@pytest.mark.parametrize("fold_last", ["0", "1"])
def test_a_retry_after_abort_of_a_flushing_step(tiny_model_dir, fold_last, monkeypatch):
    monkeypatch.setenv("REPLAYSSM_IMPL", "triton")
    monkeypatch.setenv("REPLAYSSM_VERIFY_FOLD_LAST", fold_last)
    model = load_model(tiny_model_dir)
    runs = [ModelRunner(model, RunnerConfig(backend="replay", max_slots=1, max_len=128, window=4, ring_len=8,
                                            shadow_backend="recurrent")) for _ in range(2)]  # fmt: skip
    for r in runs:
        r.prefill(r.alloc(), list(range(10, 30)))
    g = torch.Generator().manual_seed(3)
    flushed = differs = 0
    for _ in range(5):
        t = torch.randint(3, 250, (1, 4), generator=g)
        flushing = int(runs[0].pool.primary.cursors.flush[0])
        flushed += flushing
        first = runs[0].step([0], t)
        runs[0].abort()
        retry, twin = runs[0].step([0], t), runs[1].step([0], t)
        if fold_last == "0":
            assert torch.equal(first, retry) and torch.equal(retry, twin)
        else:
            differs += flushing and not torch.equal(first, retry)  # (rows that do not flush: bitwise, as before)
            assert flushing or torch.equal(first, retry)
            assert (retry - first).abs().max() <= 1e-4 * first.abs().max()
            assert (retry - twin).abs().max() <= 1e-4 * twin.abs().max()
        for r in runs:
            r.commit([3])
        assert runs[0].states_equal([0]) and runs[1].states_equal([0])
    assert flushed >= 1 and (differs >= 1) == (fold_last == "1")
