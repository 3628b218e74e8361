"""A runner's step that fails part-way: its eager commit finished or rolled back, the fused step undone or its rows
lost (replayssm/engine/step_end.py; each test failed before its fix)."""

import pytest
import torch

import replayssm.state.commit as commit_module
from tests.helpers.interrupts import Stop, fail_after, gdn_state, tiny_runner
from tests.helpers.pools import same


def test_the_runner_s_commit_interrupted_between_the_gdn_state_and_the_kv_cache_finishes_on_retry():
    def run(interrupt):
        r, slot = tiny_runner()
        r.step([slot], torch.tensor([[5, 6]]))
        if interrupt:
            undo = fail_after(r.kv, "commit")  # the lengths moved, then the interrupt
            try:
                with pytest.raises(Stop):
                    r.commit([2])
            finally:
                undo()
            with pytest.raises(RuntimeError, match="interrupted"):
                r.abort()
            with pytest.raises(ValueError, match=r"num_accepted: a commit with \[2\] was interrupted"):
                r.commit([1])
        r.commit([2])
        logits = r.step([slot], torch.tensor([[7, 8]]))
        r.commit([1])
        return r.kv_len(slot), logits, gdn_state(r, slot)

    clean, got = run(False), run(True)
    assert clean[0] == got[0] == 4 + 2 + 1
    assert torch.equal(clean[1], got[1]) and same(clean[2], got[2])


def test_the_runner_rolls_back_a_commit_whose_gdn_part_failed():
    def run(fail):
        r, slot = tiny_runner()
        r.step([slot], torch.tensor([[5, 6]]))
        if fail:
            undo = fail_after(commit_module, "conv_commit")
            try:
                with pytest.raises(Stop):
                    r.commit([2])
            finally:
                undo()
        r.abort()
        logits = r.step([slot], torch.tensor([[7, 8]]))
        r.commit([1])
        return r.kv_len(slot), logits, gdn_state(r, slot)

    clean, got = run(False), run(True)
    assert clean[0] == got[0] == 4 + 1
    assert torch.equal(clean[1], got[1]) and same(clean[2], got[2])


def test_the_runner_finishes_a_commit_whose_fold_ahead_failed_and_refuses_to_abort_it(monkeypatch):
    monkeypatch.setenv("REPLAYSSM_FOLD_AHEAD", "1")

    def run(fail):
        r, slot = tiny_runner()
        r.step([slot], torch.tensor([[5, 6]]))
        if fail:
            undo = fail_after(commit_module, "gdn_fold_ahead", before=True)
            try:
                with pytest.raises(Stop):
                    r.commit([2])
            finally:
                undo()
            with pytest.raises(RuntimeError, match="after the GDN state took the step"):
                r.abort()
        r.commit([2])
        logits = r.step([slot], torch.tensor([[7, 8]]))
        r.commit([1])
        return r.kv_len(slot), logits, gdn_state(r, slot)

    clean, got = run(False), run(True)
    assert clean[0] == got[0] and torch.equal(clean[1], got[1]) and same(clean[2], got[2])


@pytest.mark.parametrize("where", ["gdn", "kv"])
def test_a_fused_step_whose_commit_failed_leaves_the_runner_usable(where):
    """step_and_commit's commit fails inside the step, in the GDN state's part or the KV lengths': the step is rolled
    back (the first left the slot refused by every later call, the second the GDN state a step ahead of the KV
    cache), and the same step again gives a clean run's tokens and state."""
    from replayssm.engine.accept import Greedy

    def run(fail):
        r, slot = tiny_runner()
        if fail:
            undo = fail_after(commit_module, "conv_commit") if where == "gdn" else fail_after(r.kv, "commit")
            try:
                with pytest.raises(Stop):
                    r.step_and_commit([slot], torch.tensor([[5, 6]]), [1], Greedy())
            finally:
                undo()
        got = r.step_and_commit([slot], torch.tensor([[5, 6]]), [1], Greedy())
        return got, r.kv_len(slot), gdn_state(r, slot)

    clean, got = run(False), run(True)
    assert clean[:2] == got[:2] and same(clean[2], got[2])


def test_a_fused_step_whose_fold_ahead_failed_loses_its_rows(monkeypatch):
    """The GDN state took the step (its lengths were put back) and the engine gets an exception, not its tokens: the
    rows are lost (the engine gives their requests up) rather than left a step ahead of what the engine knows."""
    from replayssm.engine.accept import Greedy

    monkeypatch.setenv("REPLAYSSM_FOLD_AHEAD", "1")
    r, slot = tiny_runner()
    undo = fail_after(commit_module, "gdn_fold_ahead", before=True)
    try:
        with pytest.raises(Stop):
            r.step_and_commit([slot], torch.tensor([[5, 6]]), [1], Greedy())
    finally:
        undo()
    assert slot in r.lost


def test_a_fused_step_failing_after_its_commit_loses_its_rows(monkeypatch):
    """Anything failing after the commit ran (here: building the step's result): the GDN state took the step, so the
    rows are lost; the lengths were not put back under a committed state (a review of da8b57d)."""
    import replayssm.engine.runner as runner_module
    from replayssm.engine.accept import Greedy

    r, slot = tiny_runner()

    def stop(*a, **kw):
        raise Stop("after the commit")

    monkeypatch.setattr(runner_module, "PendingStep", stop)
    with pytest.raises(Stop):
        r.step_and_commit([slot], torch.tensor([[5, 6]]), [1], Greedy())
    assert slot in r.lost


@pytest.mark.parametrize("where", ["gdn", "kv"])
def test_a_fused_step_with_the_mtp_drafter_rolls_back_to_a_clean_run(where):
    """What the drafter's commit wrote comes back with the lengths (``commit_counters``: its cache's lengths and its
    accepted counts, from which ``propose`` catches up: a review of da8b57d), and later steps give a clean run's
    tokens and state. (Its drafts may differ: the failed step's observed window is not rolled back,
    ``ModelRunner.abort``.)"""
    from replayssm.engine.accept import Greedy, Prescribed
    from replayssm.engine.config import RunnerConfig
    from replayssm.engine.runner import ModelRunner
    from replayssm.models.loader import load_model
    from replayssm.tiny import TINY_MODEL

    model = load_model(TINY_MODEL, mtp="auto", dtype=torch.float32, device="cpu")

    def run(fail):
        r = ModelRunner(model, RunnerConfig(max_slots=2, max_len=64, window=3, device_drafter="mtp"))
        slot = r.alloc()
        r.prefill(slot, [1, 2, 3, 4])
        last = torch.tensor([[5]])
        before = [r.drafter.kv.lens.clone(), r.drafter.num_accepted.clone()]
        if fail:
            undo = fail_after(commit_module, "conv_commit") if where == "gdn" else fail_after(r.kv, "commit")
            try:
                with pytest.raises(Stop):  # (3 accepted: the drafter's count moves, 1 -> 3)
                    r.step_and_commit([slot], last, None, Prescribed(), prescribed=[3], device_drafts=True)
            finally:
                undo()
            assert same([r.drafter.kv.lens, r.drafter.num_accepted], before)
        out = []
        for _ in range(4):
            n, produced = r.step_and_commit([slot], last, None, Greedy(), device_drafts=True)
            out.append((n, produced))
            last = torch.tensor([[produced[0][-1]]])
        return out, gdn_state(r, slot)

    clean, got = run(False), run(True)
    assert clean[0] == got[0] and same(clean[1], got[1])
