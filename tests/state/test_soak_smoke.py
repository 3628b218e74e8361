"""The GPU soak's driver (``tests/helpers/soak.py``) at a tiny geometry on the CPU: every churn event and
both failure paths happen, and the two backends stay bitwise equal."""

import io
import json

import pytest
import torch

from tests.helpers.soak import Soak, SoakConfig


@pytest.mark.parametrize("validate", [True, False])
def test_soak_driver_runs_every_event_on_cpu(validate):
    cfg = SoakConfig(steps=120, H=1, HV=2, K=16, V=16, window=3, num_layers=2, num_slots=6, batch=4,
                     dtype=torch.float32, device="cpu", seed=3, log_every=60, p_finish=0.1, p_preempt=0.08,
                     p_fork=0.08, p_flush=0.08, p_abort=0.08, p_fail=0.08, p_decode=0.1, validate=validate)  # fmt: skip
    log = io.StringIO()
    stats = Soak(cfg, log).run()
    assert stats["divergences"] == 0 and stats["steps"] == 120
    for event in ("folds", "aborted", "retried", "finished", "preempted", "resumed", "forked", "flushed",
                  "decode_steps"):  # fmt: skip
        assert stats[event] > 0, event
    records = [json.loads(line) for line in log.getvalue().splitlines()]
    assert "config" in records[0] and records[-1]["final"] == stats and len(records) == 4
