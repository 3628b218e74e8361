"""GPU soak (issue 11): the two pool backends in lockstep at the Qwen3.5 GDN head geometry (H=16, HV=64,
K=V=128, bf16, T=4, L=16) through 100,000 verify/commit steps with slot churn -- alloc, free, offload/restore,
fork, flush, aborted and retried steps (``tests/helpers/soak.py``) -- and zero divergences.

Environment: ``REPLAYSSM_SOAK_STEPS`` (default 100,000), ``REPLAYSSM_SOAK_LOG`` (a file for the JSON-lines
log: config and machine, a record every 1,000 steps, the final counts), ``REPLAYSSM_SOAK_BATCH`` (running
requests, default 4), ``REPLAYSSM_SOAK_VALIDATE=0`` (the pools' host-side checks off), ``REPLAYSSM_SOAK_SEED``.
"""

from tests.helpers.soak import config_from_env, run_logged


def test_lockstep_soak():
    cfg = config_from_env()
    stats = run_logged(cfg)
    assert stats["steps"] == cfg.steps and stats["divergences"] == 0
    for event in ("folds", "finished", "arrived", "preempted", "resumed", "forked", "flushed"):
        assert stats[event] > 0 or cfg.steps < 1000, event
    assert stats["aborted"] + stats["retried"] > 0 or cfg.steps < 1000
    print(stats)
