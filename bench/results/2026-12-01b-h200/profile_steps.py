"""Per-kernel GPU time (torch.profiler, eager) of one layer-step: ours vs SGLang 0.5.23, several points."""

import collections
import json
import os
import sys

sys.path.insert(0, os.getcwd())
import torch
from torch.profiler import ProfilerActivity, profile

from replayssm.bench.peers.sglang import ROLES, load_release
from replayssm.bench.steps import RecurrentDecode, RecurrentStep, ReplayStep, make_case
from replayssm.ops import GDNShape

geo = GDNShape(16, 64, 128, 128)
peer = load_release("0.5.23", os.environ.get("PEERS_ROOT", ".peers")) if os.environ.get("PEERS") else None
points = json.loads(os.environ.get("POINTS", "[[4,16,8],[4,16,256],[8,16,8],[8,32,256],[2,16,8],[1,16,256]]"))
res = {}
for T, L, B in points:
    layers = 2
    case = make_case(geo, B, T, L, layers, torch.bfloat16, accept="random" if T > 1 else "full")
    builds = {"ours/replay": ReplayStep.build, "ours/rec": (RecurrentDecode.build if T == 1 else RecurrentStep.build)}
    role = "ring_decode" if T == 1 else "replay"
    if os.environ.get("PEERS"):
        builds["0523/replay"] = lambda c, r=role: ROLES["0.5.23"][r].build(c, kernels=peer)
    if not os.environ.get("REC"):
        builds.pop("ours/rec")
    for name, b in builds.items():
        step = b(case)
        for _ in range(L + 3):
            step()
        torch.cuda.synchronize()
        n = 20
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                step()
            torch.cuda.synchronize()
        agg = collections.defaultdict(float)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                agg[e.name[:60]] += e.device_time / n / layers
        tot = sum(agg.values())
        key = f"T{T} L{L} B{B} {name}"
        res[key] = dict(agg, total=tot)
        print(f"{key}: total {tot:.1f} us/layer")
        for k, v in sorted(agg.items(), key=lambda kv: -kv[1])[:6]:
            print(f"    {v:8.1f}  {k}")
        del step
        torch.cuda.empty_cache()
with open(os.environ["OUT"] + "/prof.json", "w") as f:
    json.dump(res, f, indent=1)
