"""Per-kernel GPU time of the ReplaySSM step (torch.profiler over 30 eager steps after 20 warm-up steps, no graphs),
run 2 of 2026-12-04: where plain decode at L=32 spends the ~12 us a step it costs beyond L=16, and where the T=4
step of a 64-row batch (issue 15's engine step at C=64 has the verify at ~1.7x its read) goes. Points $POINTS are
(T, L, B, HV); random acceptance (T=1: every row accepts). Prints the top kernels (us per layer-step)."""

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
from replayssm.ops import GDNShape  # noqa: E402

POINTS = [tuple(p) for p in json.loads(os.environ.get("POINTS", "[[1,16,256,64],[1,32,256,64]]"))]


def main():
    cfg = KernelBenchConfig(target_ms=15)
    rows = []
    for T, L, B, HV in POINTS:
        geo = GDNShape(16, HV, 128, 128)
        layers = layers_for(B, geo, cfg.min_working_set)
        case = make_case(geo, B, T, L, layers, cfg.dtype, accept="random" if T > 1 else "full", device="cuda")
        step = ReplayStep.build(case)
        for _ in range(20):
            step()
        torch.cuda.synchronize()
        n = 30
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                step()
            torch.cuda.synchronize()
        tot, cnt = defaultdict(float), defaultdict(int)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                tot[e.name] += e.device_time
                cnt[e.name] += 1
        per = {k: tot[k] / (n * layers) for k in tot}
        rows.append({"T": T, "L": L, "B": B, "HV": HV, "us_per_layer_step": per, "calls": dict(cnt)})
        short = {k.split("_kernel")[0][-28:]: round(v, 1) for k, v in sorted(per.items(), key=lambda x: -x[1])[:5]}
        print(f"T={T} L={L} B={B} HV={HV} sum={sum(per.values()):.1f} {short}", flush=True)
        del step, case
        free_memory(True)
    with open(os.path.join(os.environ.get("OUT", "."), "kprof.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
