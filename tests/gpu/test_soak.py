"""GPU soak: the two pool backends in lockstep at the Qwen3.5-122B TP1 GDN geometry (H=16, HV=64, K=V=128,
bf16, T=4, L=16) through many verify/commit steps with slot churn (``tests/helpers/soak.py``); zero divergences.

``REPLAYSSM_SOAK_STEPS`` sets the step count (default 2,000: a quick run inside ``pytest -m gpu``; the issue-11
soak is 100,000), ``REPLAYSSM_SOAK_LOG`` a file for the JSON-lines log (config, a record every 1,000 steps, the
final counts), ``REPLAYSSM_SOAK_BATCH`` the running requests (default 16), ``REPLAYSSM_SOAK_VALIDATE=0`` turns
the pools' host-side checks off (fewer host syncs per step; the CUDA-graph configuration).
"""

import os
from contextlib import nullcontext

from tests.helpers.soak import Soak, SoakConfig


def test_lockstep_soak():
    cfg = SoakConfig(steps=int(os.environ.get("REPLAYSSM_SOAK_STEPS", 2000)),
                     batch=int(os.environ.get("REPLAYSSM_SOAK_BATCH", 16)), device="cuda",
                     validate=os.environ.get("REPLAYSSM_SOAK_VALIDATE", "1") != "0")  # fmt: skip
    path = os.environ.get("REPLAYSSM_SOAK_LOG")
    with open(path, "w") if path else nullcontext() as log:
        stats = Soak(cfg, log).run()
    assert stats["steps"] == cfg.steps and stats["divergences"] == 0
    assert stats["folds"] > 0 and stats["aborted"] + stats["retried"] > 0 and stats["resumed"] > 0
    print(stats)
