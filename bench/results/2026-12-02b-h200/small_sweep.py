"""Small-batch launch shapes of the verify (issue 10, seventh session): each shape gated bitwise, then timed.

    python small_sweep.py            # points and shapes below; writes $OUT/small_sweep.json

An override is taken as given (ops/launch.py), so "4x4x2x32x64" is 4 warps on 64-row programs: one 64-row fold
block per program, where the default split caps a 64-row program at 2 warps (two 32-row fold blocks).
"""

import json
import os
import sys

sys.path.insert(0, os.getcwd())
from replayssm.bench.kernels import KernelBenchConfig  # noqa: E402
from replayssm.bench.sweep import sweep_tiles  # noqa: E402
from replayssm.bench.timing import GraphTimer, copy_bandwidth  # noqa: E402

SPECS = ["2x4x2x32x64", "4x4x2x32x64", "4x2x2x32x32", "2x4x2x32x32", "4x4x2x32x128", "4x2x2x32x64"]
POINTS = [(4, 16, 8), (8, 32, 8), (8, 16, 8), (4, 16, 32)]


def main():
    cfg = KernelBenchConfig(target_ms=15)
    bw = copy_bandwidth(cfg.device)
    rows = []
    for T, L, B in POINTS:
        print(f"T={T} L={L} B={B}", flush=True)
        rows += sweep_tiles(cfg, bw, SPECS, GraphTimer(0.015), T=T, L=L, batches=(B,))
    with open(os.path.join(os.environ.get("OUT", "."), "small_sweep.json"), "w") as f:
        json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()
