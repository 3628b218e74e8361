"""The GPU soak's driver (``tests/helpers/soak.py``) at a tiny geometry on the CPU: every churn event and
both failure paths happen, and the two backends stay bitwise equal."""

import io
import json

import pytest
import torch

from tests.helpers.soak import Soak, SoakConfig


@pytest.mark.parametrize("validate", [True, False])
def test_soak_driver_runs_every_event_on_cpu(validate):
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
