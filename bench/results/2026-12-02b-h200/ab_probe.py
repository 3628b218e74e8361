"""A/B probe of two trees in one device call: the tree at $TREE (default: this one) is imported, its ReplaySSM
step gated bitwise against its recurrent baseline, then timed (random / pure non-flush / pure flush) at each
point; the outputs and committed states of a fixed 12-step trace are saved, or compared with a saved trace.

    TREE=.base python ab_probe.py base --save /tmp/ab_base.pt
    python ab_probe.py new --compare /tmp/ab_base.pt
"""

import argparse
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

POINTS = [(4, 16, 256), (4, 16, 128), (4, 16, 64), (4, 16, 8), (1, 16, 256), (1, 32, 256), (2, 16, 256),
          (8, 16, 256), (4, 32, 256), (8, 32, 256)]  # fmt: skip
if os.environ.get("POINTS"):  # e.g. POINTS='[[4,16,256],[1,16,256]]'
    POINTS = [tuple(p) for p in json.loads(os.environ["POINTS"])]


def trace(case, steps=12):
    torch.manual_seed(123)
    step = ReplayStep.build(case)
    outs = []
    for _ in range(steps):
        step()
        outs.append(step.outputs.clone())
    torch.cuda.synchronize()
    return {"outs": torch.stack(outs).cpu(), "ckpt": step.checkpoint.cpu(), "u": [r.u.cpu() for r in step.rings]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tag")
    p.add_argument("--save")
    p.add_argument("--compare")
    p.add_argument("--recurrent", action="store_true")
    args = p.parse_args()
    print("replayssm from", os.path.dirname(replayssm.__file__), flush=True)
    cfg = KernelBenchConfig(target_ms=15)
    timer = GraphTimer(0.015)
    saved = torch.load(args.compare) if args.compare else None
    traces, rows = {}, []
    t0 = time.time()
    for T, L, B in POINTS:
        layers = layers_for(B, cfg.geo, cfg.min_working_set)
        ours = backends_for(T, {})
        small = make_case(cfg.geo, B, T, L, 2, cfg.dtype, seed=1, device="cuda")
        tr = trace(small)
        key = f"{T}-{L}-{B}"
        traces[key] = tr
        gate = gate_all(small, ours)["replayssm/replay"]
        del small
        free_memory(True)
        row = {"tag": args.tag, "T": T, "L": L, "B": B, "gate": gate}
        if saved is not None and key in saved:
            s = saved[key]
            row["outputs_equal_to_saved"] = bool(torch.equal(tr["outs"], s["outs"]))
            row["checkpoint_equal_to_saved"] = bool(torch.equal(tr["ckpt"], s["ckpt"]))
            row["u_equal_to_saved"] = all(torch.equal(a.nan_to_num(), b.nan_to_num()) for a, b in zip(tr["u"], s["u"]))
            row["outputs_max_diff"] = float((tr["outs"].float() - s["outs"].float()).abs().max())
        if gate["passed"]:
            case = make_case(cfg.geo, B, T, L, layers, cfg.dtype, accept="random" if T > 1 else "full", device="cuda")
            if args.recurrent:
                row["recurrent_us"] = timer(ours[0].build(case)) / layers * 1e6
                free_memory()
            row.update(time_ring(ours[1], case, timer, layers))
            del case
        else:
            row["refused"] = "failed its gate"
        free_memory(True)
        rows.append(row)
        print(json.dumps(row, default=str), f"t={time.time() - t0:.0f}s", flush=True)
    if args.save:
        torch.save(traces, args.save)
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, f"ab_{args.tag}.json"), "w") as f:
        json.dump(rows, f, indent=1, default=str)
    head = f"{'T':>2} {'L':>3} {'B':>4} {'gate':>4} {'random':>8} {'nonfl':>8} {'flush':>8} {'fold/rec':>8}"
    print(f"\n{args.tag}: {head}")
    for r in rows:
        f = [r.get(k, float("nan")) for k in ("replay_random_us", "replay_nonflush_us", "replay_flush_us",
                                              "fold_us_per_record")]  # fmt: skip
        print(f"{args.tag}: {r['T']:>2} {r['L']:>3} {r['B']:>4} {int(r['gate']['passed']):>4} {f[0]:8.1f} {f[1]:8.1f} "
              f"{f[2]:8.1f} {f[3]:8.1f} eq={r.get('outputs_equal_to_saved')} rec={r.get('recurrent_us', '')}"
              )  # fmt: skip


if __name__ == "__main__":
    main()
