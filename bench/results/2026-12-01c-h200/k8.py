"""Dev run 8: ours replay at a few points (gated bitwise), for A/B between two trees."""

import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
from replayssm.bench.backends import backends_for
from replayssm.bench.kernels import KernelBenchConfig
from replayssm.bench.point import free_memory, gate_all, layers_for, time_ring
from replayssm.bench.steps import make_case
from replayssm.bench.timing import GraphTimer

out = os.environ["OUT"]
tag = sys.argv[1]
cfg = KernelBenchConfig(target_ms=15)
timer = GraphTimer(0.015)
POINTS = json.loads(os.environ.get("POINTS", "[[4,16,256],[4,16,128],[8,32,256],[1,16,256],[4,16,8]]"))
res = []
t0 = time.time()
for T, L, B in POINTS:
    layers = layers_for(B, cfg.geo, cfg.min_working_set)
    ours = backends_for(T, {})
    g = make_case(cfg.geo, B, T, L, 2, cfg.dtype, seed=1, device="cuda")
    gate = gate_all(g, ours)["replayssm/replay"]
    del g
    row = {"tag": tag, "T": T, "L": L, "B": B, "gate": gate}
    if gate["passed"]:
        case = make_case(cfg.geo, B, T, L, layers, cfg.dtype, accept="random" if T > 1 else "full", device="cuda")
        row.update(time_ring(ours[1], case, timer, layers))
        del case
    free_memory(True)
    res.append(row)
    print(
        tag,
        T,
        L,
        B,
        gate["passed"],
        {k: round(v, 1) for k, v in row.items() if k.endswith("us") or k.endswith("record")},
        round(time.time() - t0),
        flush=True,
    )
with open(f"{out}/k8_{tag}.json", "w") as fh:
    json.dump(res, fh, indent=1, default=str)
