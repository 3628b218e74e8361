"""Per-kernel GPU time (torch.profiler, eager steps) of frozen pure-flush and non-flush steps at T=4, L=16, B=256,
as ``../2026-12-04-h200/ab_probe.py`` freezes them (``ReplayStep.set_cursors``), with and without fold first
(``REPLAYSSM_VERIFY_FOLD_FIRST`` set by the caller). Us per layer-step.

    OUT=DIR python3 kprof_flush.py TAG
"""

import json
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from replayssm.bench.kernels import KernelBenchConfig  # noqa: E402
from replayssm.bench.point import layers_for  # noqa: E402
from replayssm.bench.steps import ReplayStep, acceptance, make_case  # noqa: E402


def main(tag):
    cfg = KernelBenchConfig(target_ms=15)
    T, L, B = 4, 16, 256
    layers = layers_for(B, cfg.geo, cfg.min_working_set)
    case = make_case(cfg.geo, B, T, L, layers, cfg.dtype, accept="random", device="cuda")
    full = case.with_accept(acceptance(B, T, "full", "cuda"))
    rows = []
    for flush in (False, True):
        step = ReplayStep.build(full)
        for _ in range(L):
            step()
        step.set_cursors(flush)
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        n = 10
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                step()
            torch.cuda.synchronize()
        tot = defaultdict(float)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                tot[e.name] += e.device_time
        per = {k[:60]: round(v / (n * layers), 1) for k, v in sorted(tot.items(), key=lambda x: -x[1])}
        rows.append({"tag": tag, "flush": flush, "us_per_layer_step": per})
        print(tag, "flush" if flush else "nonflush", dict(list(per.items())[:5]), flush=True)
        del step
    with open(os.path.join(os.environ.get("OUT", "."), f"kprof_flush_{tag}.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
