import collections
import json
import os
import sys

sys.path.insert(0, os.getcwd())
import torch
from torch.profiler import ProfilerActivity, profile

from replayssm.bench.steps import ReplayStep, make_case
from replayssm.ops import GDNShape

geo = GDNShape(16, 64, 128, 128)
points = [[4, 16, 8], [4, 16, 64], [4, 16, 256], [8, 16, 8], [8, 32, 256], [2, 16, 256], [1, 16, 256]]
res = {}
for T, L, B in points:
    case = make_case(geo, B, T, L, 2, torch.bfloat16, accept="random" if T > 1 else "full")
    line = f"T{T} L{L} B{B}:"
    for tc in ("0", "1"):
        os.environ["REPLAYSSM_VERIFY_TC"] = tc
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
        res[f"T{T} L{L} B{B} TC{tc}"] = dict(agg)
        line += f"  TC{tc} prep {agg['_window_prep_kernel']:.1f} main {agg['_gdn_replay_verify_kernel']:.1f} |"
        del step
    print(line, flush=True)
os.environ["REPLAYSSM_VERIFY_TC"] = "1"
with open(os.environ["OUT"] + "/prof3.json", "w") as f:
    json.dump(res, f, indent=1)
