"""The GPU soak's driver (``tests/helpers/soak.py``) at a tiny geometry on the CPU: every churn event and
both failure paths happen, and the two backends stay bitwise equal."""

import io
import json

import pytest
import torch

from tests.helpers.soak import Soak, SoakConfig, config_from_env, run_logged


@pytest.mark.parametrize("ahead", ["0", "1"], ids=["fold-in-verify", "fold-ahead"])
@pytest.mark.parametrize("validate", [True, False])
def test_soak_driver_runs_every_event_on_cpu(validate, ahead, monkeypatch):
    """Also with every commit folding ahead (``REPLAYSSM_FOLD_AHEAD=1``, ops/fold_ahead.py): the flushing rows then
    fold in the commit, and every churn event and failure meets rows folded that way."""
    monkeypatch.setenv("REPLAYSSM_FOLD_AHEAD", ahead)
    events = dict(p_finish=0.15, p_preempt=0.12, p_fork=0.12, p_flush=0.12, p_abort=0.12, p_fail=0.12, p_decode=0.15)
    cfg = SoakConfig(steps=60, H=1, HV=2, K=16, V=16, window=3, num_layers=2, num_slots=6, batch=4,
                     dtype=torch.float32, device="cpu", seed=3, log_every=30, validate=validate, **events)  # fmt: skip
    log = io.StringIO()
    stats = Soak(cfg, log).run()
    assert stats["divergences"] == 0 and stats["steps"] == 60
    for event in ("folds", "aborted", "retried", "finished", "preempted", "resumed", "forked", "flushed",
                  "decode_steps"):  # fmt: skip
        assert stats[event] > 0, event
    records = [json.loads(line) for line in log.getvalue().splitlines()]
    assert "config" in records[0] and records[-1]["final"] == stats and len(records) == 4


def test_gpu_soak_configuration_runs_on_cpu(tmp_path, monkeypatch):
    """The GPU soak's exact configuration (real head geometry, bf16, env-driven) for a few steps on the CPU
    (PyTorch references), writing its log where REPLAYSSM_SOAK_LOG says."""
    log = tmp_path / "soak.jsonl"
    for k, v in dict(REPLAYSSM_SOAK_STEPS="6", REPLAYSSM_SOAK_DEVICE="cpu", REPLAYSSM_SOAK_LOG=str(log)).items():
        monkeypatch.setenv(k, v)
    cfg = config_from_env(log_every=3, p_fork=0.5, p_preempt=0.5)
    assert (cfg.H, cfg.HV, cfg.K, cfg.V, cfg.window, cfg.dtype) == (16, 64, 128, 128, 4, torch.bfloat16)
    stats = run_logged(cfg)
    assert stats["steps"] == 6 and stats["divergences"] == 0
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert records[0]["meta"]["torch"] == torch.__version__ and records[-1]["final"] == stats
