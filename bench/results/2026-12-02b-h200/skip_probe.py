"""Which part of the one-launch verify costs its time: the step timed with parts of the window's work skipped
(REPLAYSSM_VERIFY_SKIP bits: 1 window matrices, 2 history dots, 4 normalisation, 8 ring appends, 16 window loads
zeroed). Outputs are wrong with any bit set: timing only, no gate. One variant per process.

    REPLAYSSM_VERIFY_SKIP=3 python skip_probe.py
"""

import json
import os
import sys

sys.path.insert(0, os.getcwd())
from replayssm.bench.backends import backends_for  # noqa: E402
from replayssm.bench.kernels import KernelBenchConfig  # noqa: E402
from replayssm.bench.point import layers_for, time_ring  # noqa: E402
from replayssm.bench.steps import make_case  # noqa: E402
from replayssm.bench.timing import GraphTimer  # noqa: E402

cfg = KernelBenchConfig(target_ms=10)
timer = GraphTimer(0.010)
skip = os.environ.get("REPLAYSSM_VERIFY_SKIP", "0")
for T, L, B in json.loads(os.environ.get("POINTS", "[[4,16,256],[4,16,8]]")):
    layers = layers_for(B, cfg.geo, cfg.min_working_set)
    case = make_case(cfg.geo, B, T, L, layers, cfg.dtype, accept="random", device="cuda")
    r = time_ring(backends_for(T, {})[1], case, timer, layers)
    print(json.dumps({"skip": skip, "T": T, "L": L, "B": B, **{k: round(v, 1) for k, v in r.items()}}), flush=True)
