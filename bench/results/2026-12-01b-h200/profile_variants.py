"""Per-kernel GPU time (torch.profiler, eager, per layer) of our replay step under two variants of one knob.

VARY=prep_warps (run at dbd2f21, where ``replayssm.ops.verify.PREP_WARPS`` was a module constant): the prep with
1, 2 and 4 warps -> prep_warps_dbd2f21.json. VARY=tensor_cores (run at fd70c78): ``REPLAYSSM_VERIFY_TC`` 0 and
1 -> tensor_cores_fd70c78.json. Run from the repository root with $OUT set."""

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

VARY = os.environ.get("VARY", "tensor_cores")
POINTS = {
    "prep_warps": [
        [4, 16, 8],
        [4, 16, 64],
        [4, 16, 256],
        [8, 16, 8],
        [8, 32, 256],
        [1, 16, 8],
        [1, 16, 256],
        [2, 16, 256],
    ],  # fmt: skip
    "tensor_cores": [[4, 16, 8], [4, 16, 64], [4, 16, 256], [8, 16, 8], [8, 32, 256], [2, 16, 256], [1, 16, 256]],
}[VARY]


def apply(value):
    if VARY == "prep_warps":
        VV.PREP_WARPS = value
    else:
        os.environ["REPLAYSSM_VERIFY_TC"] = value


def kernel_times(case, L, layers=2, steps=20):
    step = ReplayStep.build(case)
    for _ in range(L + 3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    agg = collections.defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            agg[e.name[:40]] += e.device_time / (steps * layers)
    return dict(agg)


geo = GDNShape(16, 64, 128, 128)
res = {}
for T, L, B in POINTS:
    case = make_case(geo, B, T, L, 2, torch.bfloat16, accept="random" if T > 1 else "full")
    line = f"T{T} L{L} B{B}:"
    for value in (1, 2, 4) if VARY == "prep_warps" else ("0", "1"):
        apply(value)
        agg = kernel_times(case, L)
        res[f"T{T} L{L} B{B} {VARY}={value}"] = agg
        line += f"  {value}: prep {agg['_window_prep_kernel']:.1f} main {agg['_gdn_replay_verify_kernel']:.1f} |"
    print(line, flush=True)
with open(os.environ["OUT"] + f"/{VARY}.json", "w") as f:
    json.dump(res, f, indent=1)
