"""Timing-only probe (no gate: the probed tree's math may be wrong on purpose): ReplaySSM's random, pure non-flush
and pure flush steps of the tree at $TREE, and the fold cost per record, at each point of $POINTS.

    TREE=.lz python lazy_time.py lz
"""

import json
import os
import sys

sys.path.insert(0, os.path.abspath(os.environ.get("TREE", os.getcwd())))
import replayssm  # noqa: E402
from replayssm.bench.backends import backends_for  # noqa: E402
from replayssm.bench.kernels import KernelBenchConfig  # noqa: E402
from replayssm.bench.point import free_memory, layers_for, time_ring  # noqa: E402
from replayssm.bench.steps import make_case  # noqa: E402
from replayssm.bench.timing import GraphTimer  # noqa: E402

POINTS = [tuple(p) for p in json.loads(os.environ.get("POINTS", "[[4,16,256],[1,16,256]]"))]


def main():
    tag = sys.argv[1]
    print("replayssm from", os.path.dirname(replayssm.__file__), flush=True)
    cfg = KernelBenchConfig(target_ms=15)
    timer = GraphTimer(0.015)
    rows = []
    for T, L, B in POINTS:
        layers = layers_for(B, cfg.geo, cfg.min_working_set)
        case = make_case(cfg.geo, B, T, L, layers, cfg.dtype, accept="random" if T > 1 else "full", device="cuda")
        row = {"tag": tag, "T": T, "L": L, "B": B, **time_ring(backends_for(T, {})[1], case, timer, layers)}
        del case
        free_memory(True)
        rows.append(row)
        print(f"{tag}: " + json.dumps(row), flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), f"lazy_{tag}.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
