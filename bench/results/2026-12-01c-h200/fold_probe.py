"""Probe: one B=256 T=4 L=16 ReplayStep frozen at pure flush / pure non-flush / random, run eagerly (for ncu)."""

import os
import sys

sys.path.insert(0, os.getcwd())
import torch

from replayssm.bench.kernels import KernelBenchConfig
from replayssm.bench.steps import ReplayStep, acceptance, make_case

mode = sys.argv[1]
B = int(sys.argv[2]) if len(sys.argv) > 2 else 256
cfg = KernelBenchConfig()
case = make_case(cfg.geo, B, 4, 16, 2, cfg.dtype, accept="random", device="cuda")
if mode != "random":
    case = case.with_accept(acceptance(B, 4, "full", "cuda"))
step = ReplayStep.build(case)
for _ in range(16):
    step()
if mode != "random":
    step.set_cursors(mode == "flush")
for _ in range(6):
    step()
torch.cuda.synchronize()
print("ok", mode)
