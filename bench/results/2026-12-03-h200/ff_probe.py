"""A/B probe of a small batch's fold (run 1: ops/verify_fold.py, a launch of its own before the main kernel; run
2: ops/fold_ahead.py, every layer's flushing rows folded at the commit) in one device call: the tree at $TREE
(default: this one) is imported, its ReplaySSM step gated bitwise against its recurrent baseline, then timed (random
/ pure non-flush / pure flush) at each point of $POINTS, once per launch shape of $FOLD_SHAPES ([warps, rows per
thread, rows per program] of the launch $FOLD_KERNEL names, default verify_fold; this tree only); the outputs and
committed states of a fixed 12-step trace are saved (--save) or compared with a saved trace (--compare).
$GATE_BYPASS=1 (added for ../2026-12-03e-h200/run5.sh; off in every earlier run) times a probe that fails the gate on
purpose, e.g. folding programs that skip their window: timing only, recorded as ``gate_bypassed``."""

import argparse
import contextlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.environ.get("TREE", os.getcwd())))
import torch  # noqa: E402

import replayssm  # noqa: E402
from replayssm.bench.backends import backends_for  # noqa: E402
from replayssm.bench.kernels import KernelBenchConfig  # noqa: E402
from replayssm.bench.point import free_memory, gate_all, layers_for, time_ring  # noqa: E402
from replayssm.bench.steps import ReplayStep, make_case  # noqa: E402
from replayssm.bench.timing import GraphTimer  # noqa: E402
from replayssm.ops import launch  # noqa: E402

POINTS = [tuple(p) for p in json.loads(os.environ.get("POINTS", "[[4,16,8],[1,16,8]]"))]
if os.environ.get("FOLD_ORDER") == "contiguous":  # run 4 (a1b4645): a request's fold-ahead programs consecutive
    import replayssm.ops.fold_ahead as _fa  # noqa: E402

    _fa.REQUESTS_FASTEST = False
SHAPES = [tuple(s) for s in json.loads(os.environ.get("FOLD_SHAPES", "[]"))]


def trace(case, steps=12):
    torch.manual_seed(123)
    step = ReplayStep.build(case)
    outs = []
    for _ in range(steps):
        step()
        outs.append(step.outputs.clone())
    torch.cuda.synchronize()  # committed states, not checkpoints: a fold ahead moves when a checkpoint advances
    committed = torch.stack([step.committed(layer) for layer in range(case.layers)])
    return {"outs": torch.stack(outs).cpu(), "ckpt": committed.cpu()}


def shape_ctx(shape):
    if shape is None:
        return contextlib.nullcontext()
    w, rpt, rows = shape
    cfg = launch.TileConfig(num_warps=w, rows_per_thread=rpt, rows_per_program=rows)
    return launch.override(**{os.environ.get("FOLD_KERNEL", "verify_fold"): cfg})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tag")
    p.add_argument("--save")
    p.add_argument("--compare")
    args = p.parse_args()
    print("replayssm from", os.path.dirname(replayssm.__file__), flush=True)
    cfg = KernelBenchConfig(target_ms=15)
    timer = GraphTimer(0.015)
    saved = torch.load(args.compare) if args.compare else None
    traces, rows = {}, []
    t0 = time.time()
    for shape in SHAPES or [None]:
        for T, L, B in POINTS:
            with shape_ctx(shape):
                layers = layers_for(B, cfg.geo, cfg.min_working_set)
                ours = backends_for(T, {})
                small = make_case(cfg.geo, B, T, L, 2, cfg.dtype, seed=1, device="cuda")
                tr = trace(small)
                key = f"{T}-{L}-{B}"
                traces.setdefault(key, tr)
                gate = gate_all(small, ours)["replayssm/replay"]
                del small
                free_memory(True)
                row = {"tag": args.tag, "shape": shape, "T": T, "L": L, "B": B, "gate": gate}
                if saved is not None and key in saved:
                    s = saved[key]
                    row["outputs_equal_to_saved"] = bool(torch.equal(tr["outs"], s["outs"]))
                    row["checkpoint_equal_to_saved"] = bool(torch.equal(tr["ckpt"], s["ckpt"]))
                if gate["passed"] or os.environ.get("GATE_BYPASS") == "1":
                    row["gate_bypassed"] = not gate["passed"]
                    kind = "random" if T > 1 else "full"
                    case = make_case(cfg.geo, B, T, L, layers, cfg.dtype, accept=kind, device="cuda")
                    row.update(time_ring(ours[1], case, timer, layers))
                    del case
                else:
                    row["refused"] = "failed its gate"
                free_memory(True)
            rows.append(row)
            print(json.dumps(row, default=str), f"t={time.time() - t0:.0f}s", flush=True)
    if args.save:
        torch.save(traces, args.save)
    with open(os.path.join(os.environ.get("OUT", "."), f"ab_{args.tag}.json"), "w") as f:
        json.dump(rows, f, indent=1, default=str)
    print(f"\n{args.tag}: shape T L B gate random nonfl flush fold/rec eq")
    for r in rows:
        f = [r.get(k, float("nan")) for k in ("replay_random_us", "replay_nonflush_us", "replay_flush_us",
                                              "fold_us_per_record")]  # fmt: skip
        print(f"{args.tag}: {r['shape']} {r['T']:>2} {r['L']:>3} {r['B']:>4} {int(r['gate']['passed'])} "
              f"{f[0]:8.1f} {f[1]:8.1f} {f[2]:8.1f} {f[3]:8.1f} eq={r.get('outputs_equal_to_saved')}/"
              f"{r.get('checkpoint_equal_to_saved')}")  # fmt: skip


if __name__ == "__main__":
    main()
