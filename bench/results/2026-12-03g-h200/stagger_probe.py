"""Plain decode on the ring with the rows' fold phases spread (timing probe, run 1 of 2026-12-03g).

The bench's plain-decode point (T=1, every row accepting its token) starts every row with an empty ring in the same
step, so every row folds in the same step, one step in L-1 (a pure-flush step) and the folds' FP32 work cannot hide
under other rows' streams. Here, per point of $POINTS (T, L, B), arms in turn: our recurrent decode (`rec`), the
bench's lockstep ring decode (`sync`), and the same ring decode after the rows' write positions were spread
uniformly over 1..L-1 (`stag`: the rings filled by L real steps first, then each row's `write_pos` set to a value of
its own and its `flush` flag as the commit would set it). Timing only: `stag` folds real records but not the ones its
checkpoint belongs with (the bench's gate checks the protocol itself, `sync`). Us per layer-step, CUDA graphs."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.environ.get("TREE", os.getcwd())))
import torch  # noqa: E402

from replayssm.bench.kernels import KernelBenchConfig  # noqa: E402
from replayssm.bench.point import free_memory, layers_for  # noqa: E402
from replayssm.bench.steps import RecurrentDecode, ReplayStep, make_case  # noqa: E402
from replayssm.bench.timing import GraphTimer, copy_bandwidth  # noqa: E402

POINTS = [tuple(p) for p in json.loads(os.environ.get("POINTS", "[[1,16,256],[1,32,256]]"))]
ARMS = os.environ.get("ARMS", "rec,sync,stag,sync,stag,rec").split(",")


def staggered(case, seed=7):
    step = ReplayStep.build(case)
    for _ in range(case.L):  # every physical record of every ring written by a real step
        step()
    c = step.cursors
    g = torch.Generator(device="cuda").manual_seed(seed)
    slots = case.inputs["slots"].long()
    wp = torch.randint(1, case.L, (slots.shape[0],), device="cuda", generator=g, dtype=torch.int32)
    c.write_pos[slots] = wp
    c.flush[slots] = (wp + 2 * case.T > case.L).to(torch.int32)
    c.pending[slots] = 0
    torch.cuda.synchronize()
    return step


def main():
    cfg = KernelBenchConfig(target_ms=15)
    timer = GraphTimer(0.015)
    out = os.environ.get("OUT", ".")
    bw = copy_bandwidth()
    rows, t0 = [], time.time()
    for T, L, B in POINTS:
        layers = layers_for(B, cfg.geo, cfg.min_working_set)
        case = make_case(cfg.geo, B, T, L, layers, cfg.dtype, accept="full", device="cuda")
        for i, arm in enumerate(ARMS):
            if arm == "rec":
                step = RecurrentDecode.build(case)
            elif arm == "sync":
                step = ReplayStep.build(case)
            else:
                step = staggered(case, seed=7 + i)
            us = timer(step) / layers * 1e6
            del step
            free_memory()
            row = {"T": T, "L": L, "B": B, "arm": arm, "i": i, "us": us, "layers": layers, "copy_bw": bw}
            rows.append(row)
            print(json.dumps(row), f"t={time.time() - t0:.0f}s", flush=True)
        del case
        free_memory(True)
    with open(os.path.join(out, "stagger.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\nT L B arm us ratio-to-mean-rec")
    for T, L, B in POINTS:
        pts = [r for r in rows if (r["T"], r["L"], r["B"]) == (T, L, B)]
        rec = [r["us"] for r in pts if r["arm"] == "rec"]
        rec = sum(rec) / len(rec) if rec else float("nan")  # run 2's processes without a rec arm print nan
        for r in pts:
            print(f"{T} {L:>3} {B:>4} {r['arm']:>5} {r['us']:8.1f} {rec / r['us']:6.3f}x")


if __name__ == "__main__":
    main()
