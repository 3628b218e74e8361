"""Dev run 7: (A) recurrent baselines timed round-robin (ours under launch shapes, both SGLang releases);
(B) the verify's program order (head-major vs batch-major), each gated bitwise."""

import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import torch

from replayssm.bench.backends import backends_for
from replayssm.bench.kernels import KernelBenchConfig, load_peers
from replayssm.bench.point import free_memory, gate_all, layers_for, time_ring
from replayssm.bench.steps import make_case
from replayssm.bench.sweep import parse_tile
from replayssm.bench.timing import GraphTimer, copy_bandwidth
from replayssm.ops import gdn_recurrent, launch

out_dir = os.environ["OUT"]
cfg = KernelBenchConfig(target_ms=15)
peers = load_peers(cfg)
bw = copy_bandwidth("cuda")
timer = GraphTimer(0.015)
res = {"bw": bw, "A": [], "B": []}
t0 = time.time()


def dump():
    with open(f"{out_dir}/k7.json", "w") as fh:
        json.dump(res, fh, indent=1, default=str)


# (A) recurrent
SHAPES = os.environ.get("RSHAPES", "2x2,1x4,4x2,2x2x2x32x128,1x2,4x1").split(",")
for T, B in [(1, 256), (4, 256)]:
    geo = cfg.geo
    layers = layers_for(B, geo, cfg.min_working_set)
    case = make_case(geo, B, T, 16, layers, cfg.dtype, accept="random" if T > 1 else "full", device="cuda")
    bks = [b for b in backends_for(T, peers) if b.kind == "recurrent"]
    # bitwise check of the shapes: one call each from the same state
    x = case.inputs
    ref = None
    for spec in SHAPES:
        st = case.state0[0].clone()
        with launch.override(recurrent=parse_tile(spec)):
            gdn_recurrent(
                x["q"],
                x["k"],
                x["v"],
                x["a"],
                x["b"],
                A_log=x["A_log"],
                dt_bias=x["dt_bias"],
                state=st,
                slots=x["slots"],
                cu_seqlens=x["cu_seqlens"],
                validate=False,
            )
        if ref is None:
            ref = st
        res["A"].append({"T": T, "B": B, "shape": spec, "bitwise_vs_first": bool(torch.equal(st, ref))})
        del st
    del ref
    times = {}
    for _rnd in range(3):
        for spec in SHAPES:
            with launch.override(recurrent=parse_tile(spec)):
                t = timer(bks[0].build(case)) / layers * 1e6
            times.setdefault(f"ours {spec}", []).append(t)
            free_memory()
        for b in bks[1:]:
            times.setdefault(b.impl, []).append(timer(b.build(case)) / layers * 1e6)
            free_memory()
    res["A"].append({"T": T, "B": B, "times": times})
    print(
        f"A T={T} B={B}:",
        {k: [round(v, 1) for v in vs] for k, vs in times.items()},
        round(time.time() - t0),
        flush=True,
    )
    del case
    free_memory(True)
    dump()

# (B) verify order
POINTS = [(4, 16, 256), (4, 16, 128), (1, 16, 256), (1, 32, 256), (8, 32, 256), (2, 16, 256), (4, 16, 8)]
for T, L, B in POINTS:
    geo = cfg.geo
    layers = layers_for(B, geo, cfg.min_working_set)
    ours = backends_for(T, {})
    for order in ("head", "batch", "head", "batch"):
        os.environ["REPLAYSSM_VERIFY_ORDER"] = order
        gcase = make_case(geo, B, T, L, 2, cfg.dtype, seed=1, device="cuda")
        gate = gate_all(gcase, ours)["replayssm/replay"]
        del gcase
        row = {"T": T, "L": L, "B": B, "order": order, "gate": gate}
        if gate["passed"]:
            case = make_case(geo, B, T, L, layers, cfg.dtype, accept="random" if T > 1 else "full", device="cuda")
            row.update(time_ring(ours[1], case, timer, layers))
            del case
        free_memory(True)
        res["B"].append(row)
        print(
            "B",
            T,
            L,
            B,
            order,
            gate["passed"],
            {k: round(v, 1) for k, v in row.items() if k.endswith("us") or k.endswith("record")},
            round(time.time() - t0),
            flush=True,
        )
        dump()
print("done", round(time.time() - t0))
