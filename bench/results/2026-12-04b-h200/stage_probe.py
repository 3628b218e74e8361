"""Probe (run 5): one ReplayStep at (T, L, B) of argv, run eagerly for ncu: 20 warm-up steps, then 6 more (random
acceptance at T > 1, every row accepting at T=1, as kprof.py)."""

import os
import sys

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

from replayssm.bench.kernels import KernelBenchConfig  # noqa: E402
from replayssm.bench.point import layers_for  # noqa: E402
from replayssm.bench.steps import ReplayStep, make_case  # noqa: E402

T, L, B = (int(x) for x in sys.argv[1:4])
cfg = KernelBenchConfig()
layers = layers_for(B, cfg.geo, cfg.min_working_set)
case = make_case(cfg.geo, B, T, L, layers, cfg.dtype, accept="random" if T > 1 else "full", device="cuda")
step = ReplayStep.build(case)
for _ in range(26):
    step()
torch.cuda.synchronize()
print("ok", T, L, B, "layers", layers)
