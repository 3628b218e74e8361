"""Per-kernel GPU time of one tree's ReplaySSM step (torch.profiler over eager steps, no graphs): the verify's
staging / META launch and its main kernel separately, at each point. Random acceptance (T=1: full).

    TREE=.base python kprof.py base;  python kprof.py new
"""

import json
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.abspath(os.environ.get("TREE", os.getcwd())))
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from replayssm.bench.kernels import KernelBenchConfig  # noqa: E402
from replayssm.bench.point import free_memory, layers_for  # noqa: E402
from replayssm.bench.steps import ReplayStep, make_case  # noqa: E402

POINTS = [(4, 16, 256), (4, 16, 128), (8, 16, 256), (2, 16, 256), (4, 16, 8), (1, 16, 256)]
if os.environ.get("KPOINTS"):
    POINTS = [tuple(p) for p in json.loads(os.environ["KPOINTS"])]


def main():
    tag = sys.argv[1]
    cfg = KernelBenchConfig(target_ms=15)
    rows = []
    for T, L, B in POINTS:
        layers = layers_for(B, cfg.geo, cfg.min_working_set)
        case = make_case(cfg.geo, B, T, L, layers, cfg.dtype, accept="random" if T > 1 else "full", device="cuda")
        step = ReplayStep.build(case)
        for _ in range(20):
            step()
        torch.cuda.synchronize()
        n = 30
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                step()
            torch.cuda.synchronize()
        tot = defaultdict(float)
        cnt = defaultdict(int)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                tot[e.name] += e.device_time
                cnt[e.name] += 1
        per = {k: tot[k] / (n * layers) for k in tot}
        row = {"tag": tag, "T": T, "L": L, "B": B, "us_per_layer_step": per, "calls": dict(cnt)}
        rows.append(row)
        short = {k.split("_kernel")[0][-28:]: round(v, 1) for k, v in sorted(per.items(), key=lambda x: -x[1])[:5]}
        print(f"{tag}: T={T} L={L} B={B} {short}", flush=True)
        del step, case
        free_memory(True)
    with open(os.path.join(os.environ.get("OUT", "."), f"kprof_{tag}.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
