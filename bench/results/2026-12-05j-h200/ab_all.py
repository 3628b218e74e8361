"""A/B of two trees in one device call (2026-12-05j; ab_probe.py of 2026-12-04-h200 with the frozen steps at every
point): each process runs one tree ($TREE, tag $TAG) and writes, per point of $POINTS (T, L, B), a 12-step random
trace (outputs and committed states, torch.save), the timed random step, the frozen non-flush and flush steps and
the fold cost per record (``point.time_ring``'s way). Us per layer-step, CUDA graphs, the default launch of each
tree."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.environ.get("TREE", os.getcwd())))
import torch  # noqa: E402

from replayssm.bench.kernels import KernelBenchConfig  # noqa: E402
from replayssm.bench.point import fold_cost, free_memory, layers_for  # noqa: E402
from replayssm.bench.steps import ReplayStep, acceptance, make_case  # noqa: E402
from replayssm.bench.timing import GraphTimer, copy_bandwidth  # noqa: E402

POINTS = [tuple(p) for p in json.loads(os.environ.get("POINTS", "[[4,16,256],[1,32,256]]"))]
OUT = os.environ.get("OUT", ".")


def trace(geo, cfg, T, L, B):
    case = make_case(geo, B, T, L, 2, cfg.dtype, seed=1, device="cuda")
    torch.manual_seed(123)
    step = ReplayStep.build(case)
    outs = []
    for _ in range(12):
        step()
        outs.append(step.outputs.clone())
    torch.cuda.synchronize()
    return torch.stack(outs).cpu(), torch.stack([step.committed(layer) for layer in range(2)]).cpu()


def run(tag):
    cfg = KernelBenchConfig(target_ms=15)
    timer = GraphTimer(0.015)
    bw = copy_bandwidth()
    rows, t0 = [], time.time()
    for T, L, B in POINTS:
        path = os.path.join(OUT, f"trace_{tag}_{T}_{L}_{B}.pt")
        if not os.path.exists(path):
            torch.save(trace(cfg.geo, cfg, T, L, B), path)
            free_memory(True)
        layers = layers_for(B, cfg.geo, cfg.min_working_set)
        case = make_case(cfg.geo, B, T, L, layers, cfg.dtype, accept="random", device="cuda")
        row = {"tag": tag, "T": T, "L": L, "B": B, "layers": layers, "copy_bw": bw}
        row["random_us"] = timer(ReplayStep.build(case)) / layers * 1e6
        free_memory()
        if True:
            full = case.with_accept(acceptance(B, T, "full", "cuda"))
            for flush in (False, True):
                step = ReplayStep.build(full)
                for _ in range(L):
                    step()
                records = step.set_cursors(flush)
                row["flush_us" if flush else "nonflush_us"] = timer(step) / layers * 1e6
                del step
                free_memory()
            row["fold_us_per_record"] = fold_cost(row["flush_us"], row["nonflush_us"], records)
        rows.append(row)
        print(json.dumps(row), f"t={time.time() - t0:.0f}s", flush=True)
        del case
        free_memory(True)
    with open(os.path.join(OUT, f"ab_{tag}_{os.getpid()}.json"), "w") as f:
        json.dump(rows, f, indent=1)


def compare(a, b):
    bad = 0
    for T, L, B in POINTS:
        (oa, ca), (ob, cb) = (torch.load(os.path.join(OUT, f"trace_{t}_{T}_{L}_{B}.pt")) for t in (a, b))
        eq = torch.equal(oa, ob) and torch.equal(ca, cb)
        bad += not eq
        print(f"T={T} L={L} B={B}: outputs and committed states {a} vs {b} torch.equal: {eq}", flush=True)
    return bad


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--compare":
        sys.exit(1 if compare(sys.argv[2], sys.argv[3]) else 0)
    run(os.environ["TAG"])
