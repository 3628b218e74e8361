"""The staging kernel's warps at plain decode (run 10 of 2026-12-04). At T=1, L=32 its fp32 history keys (17.4 KB of
shared memory) leave 13 one-warp programs per SM against 24 at L=16 (run 2: 17.9 against 12.0 us a layer-step);
two or four warps a program put more warps in flight at the same shared memory. Each value of $WARPS patches
``verify.prep_warps`` (landed: one warp at two or more programs per SM; measured slower at T=4 in the first
session's sweep); a 12-step trace of each value is compared torch.equal with the first's, then the random step of
each point of $POINTS is timed with each value in turn, twice. Us per layer-step, CUDA graphs."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.environ.get("TREE", os.getcwd())))
import torch  # noqa: E402

from replayssm.bench.kernels import KernelBenchConfig  # noqa: E402
from replayssm.bench.point import free_memory, layers_for  # noqa: E402
from replayssm.bench.steps import ReplayStep, make_case  # noqa: E402
from replayssm.bench.timing import GraphTimer  # noqa: E402
from replayssm.ops import verify  # noqa: E402

POINTS = [tuple(p) for p in json.loads(os.environ.get("POINTS", "[[1,32,256],[1,16,256]]"))]
WARPS = [int(w) for w in os.environ.get("WARPS", "1,2,4").split(",")]
LANDED = verify.prep_warps


def use(w):
    verify.prep_warps = (lambda programs, sms, BT: w) if w else LANDED


def trace(geo, cfg, T, L, B):
    case = make_case(geo, B, T, L, 2, cfg.dtype, seed=1, device="cuda")
    torch.manual_seed(123)
    step = ReplayStep.build(case)
    outs = []
    for _ in range(12):
        step()
        outs.append(step.outputs.clone())
    torch.cuda.synchronize()
    return torch.stack(outs), torch.stack([step.committed(layer) for layer in range(2)])


def main():
    cfg = KernelBenchConfig(target_ms=15)
    timer = GraphTimer(0.015)
    rows, t0 = [], time.time()
    for T, L, B in POINTS:
        first, ok = None, {}
        for w in WARPS:
            use(w)
            o, c = trace(cfg.geo, cfg, T, L, B)
            first = first or (o, c)
            ok[w] = bool(torch.equal(o, first[0]) and torch.equal(c, first[1]))
            print(json.dumps({"T": T, "L": L, "B": B, "warps": w, "trace_equal_to_first": ok[w]}), flush=True)
        del first
        free_memory(True)
        layers = layers_for(B, cfg.geo, cfg.min_working_set)
        case = make_case(cfg.geo, B, T, L, layers, cfg.dtype, accept="random", device="cuda")
        for rep in range(2):
            for w in WARPS:
                if not ok[w]:
                    continue
                use(w)
                us = timer(ReplayStep.build(case)) / layers * 1e6
                free_memory()
                rows.append({"T": T, "L": L, "B": B, "warps": w, "rep": rep, "random_us": us})
                print(json.dumps(rows[-1]), f"t={time.time() - t0:.0f}s", flush=True)
        del case
        free_memory(True)
    use(0)
    with open(os.path.join(os.environ.get("OUT", "."), "prepw.json"), "w") as f:
        json.dump(rows, f, indent=1)
    for T, L, B in POINTS:
        cells = [f"{w}: " + " / ".join(f"{r['random_us']:.1f}" for r in rows if (r["T"], r["L"], r["B"], r["warps"]) ==
                 (T, L, B, w)) for w in WARPS]  # fmt: skip
        print(f"T={T} L={L} B={B} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
