"""Prep warps sweep: per-kernel GPU time (torch.profiler, eager) of our replay step for PREP_WARPS in 1, 2, 4."""

import collections
import json
import os
import sys

sys.path.insert(0, os.getcwd())
import torch
from torch.profiler import ProfilerActivity, profile

import replayssm.ops.verify as VV
from replayssm.bench.steps import ReplayStep, make_case
from replayssm.ops import GDNShape

geo = GDNShape(16, 64, 128, 128)
points = json.loads(
    os.environ.get("POINTS", "[[4,16,8],[4,16,64],[4,16,256],[8,16,8],[8,32,256],[1,16,8],[1,16,256],[2,16,256]]")
)
res = {}
for T, L, B in points:
    case = make_case(geo, B, T, L, 2, torch.bfloat16, accept="random" if T > 1 else "full")
    line = f"T{T} L{L} B{B}:"
    for W in (1, 2, 4):
        VV.PREP_WARPS = W
        step = ReplayStep.build(case)
        for _ in range(L + 3):
            step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                step()
            torch.cuda.synchronize()
        agg = collections.defaultdict(float)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                agg[e.name[:40]] += e.device_time / 40
        res[f"T{T} L{L} B{B} W{W}"] = dict(agg)
        line += f"  W{W} prep {agg['_window_prep_kernel']:.1f} main {agg['_gdn_replay_verify_kernel']:.1f} |"
        del step
    print(line, flush=True)
with open(os.environ["OUT"] + "/prof2.json", "w") as f:
    json.dump(res, f, indent=1)
