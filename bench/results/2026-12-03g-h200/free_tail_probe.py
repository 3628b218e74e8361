"""The staged verify's fold-free tail (verify_launch.FOLD_FREE_WAVES, 1.5 since the tenth session, never swept), run 3
of 2026-12-03g: the random-acceptance step at each point of $POINTS (T, L, B) for each value of $WAVES, the values
in turn and the whole sweep twice. Before timing, each value's outputs and committed states over a 12-step trace are
compared with the first value's (the order moves programs, not arithmetic: they must be torch.equal). Us per
layer-step, CUDA graphs."""

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
from replayssm.ops import verify_launch  # noqa: E402

POINTS = [tuple(p) for p in json.loads(os.environ.get("POINTS", "[[4,16,128],[4,16,256],[4,16,64]]"))]
WAVES = [float(w) for w in os.environ.get("WAVES", "1.5,0.5,1,2.5,4").split(",")]


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
    out = os.environ.get("OUT", ".")
    rows, t0 = [], time.time()
    for T, L, B in POINTS:
        layers = layers_for(B, cfg.geo, cfg.min_working_set)
        first, equal = None, {}
        for w in WAVES:
            verify_launch.FOLD_FREE_WAVES = w
            o, c = trace(cfg.geo, cfg, T, L, B)
            if first is None:
                first = (o, c)
            eq = equal[w] = bool(torch.equal(o, first[0]) and torch.equal(c, first[1]))
            rows.append({"T": T, "L": L, "B": B, "waves": w, "trace_equal_to_first": eq})
            print(json.dumps(rows[-1]), flush=True)
        del first
        free_memory(True)
        case = make_case(cfg.geo, B, T, L, layers, cfg.dtype, accept="random", device="cuda")
        for rep in range(2):
            for w in WAVES:
                verify_launch.FOLD_FREE_WAVES = w
                if not equal[w]:
                    continue  # refuse to time a value whose trace differs
                us = timer(ReplayStep.build(case)) / layers * 1e6
                free_memory()
                rows.append({"T": T, "L": L, "B": B, "waves": w, "rep": rep, "random_us": us})
                print(json.dumps(rows[-1]), f"t={time.time() - t0:.0f}s", flush=True)
        del case
        free_memory(True)
    with open(os.path.join(out, "free_tail.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\nT L B waves rep0 rep1")
    for T, L, B in POINTS:
        for w in WAVES:
            ts = [r["random_us"] for r in rows if (r["T"], r["L"], r["B"], r.get("waves")) == (T, L, B, w)
                  and "random_us" in r]  # fmt: skip
            print(f"{T} {L:>3} {B:>4} {w:5.1f} " + " ".join(f"{t:8.1f}" for t in ts))


if __name__ == "__main__":
    main()
