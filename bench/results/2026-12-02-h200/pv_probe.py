"""Dev probe: the persistent verify (verify_persistent.py) against the chunked one (verify_kernel.py), same tree.

Per point: (1) every variant's outputs, committed states and rings ``torch.equal`` to the chunked kernel's over
12 steps of the real protocol (same inputs, same acceptance); (2) each variant's bitwise gate against our
recurrent baseline (``gate_all``); (3) only for variants that passed both, the random / pure non-flush / pure
flush steps (``time_ring``). Our recurrent baseline is timed once per point. Table last; JSON in $OUT.

    python bench/results/2026-12-02-h200/pv_probe.py [POINTS_JSON]
"""

import json
import os
import sys
import time

import torch

sys.path.insert(0, os.getcwd())
from replayssm.bench.backends import backends_for  # noqa: E402
from replayssm.bench.kernels import KernelBenchConfig  # noqa: E402
from replayssm.bench.point import free_memory, gate_all, layers_for, time_ring  # noqa: E402
from replayssm.bench.steps import ReplayStep, make_case  # noqa: E402
from replayssm.bench.timing import GraphTimer, copy_bandwidth  # noqa: E402

VARIANTS = {
    "chunked": {"REPLAYSSM_VERIFY": "chunked"},
    "p8": {"REPLAYSSM_VERIFY": "persistent", "REPLAYSSM_PV_WARPS": "8", "REPLAYSSM_PV_ROWS": "128",
           "REPLAYSSM_PV_STAGES": "2", "REPLAYSSM_PV_PPS": "1"},
    "p4x2": {"REPLAYSSM_VERIFY": "persistent", "REPLAYSSM_PV_WARPS": "4", "REPLAYSSM_PV_ROWS": "64",
             "REPLAYSSM_PV_STAGES": "2", "REPLAYSSM_PV_PPS": "2"},
}  # fmt: skip
DEFAULT_POINTS = [
    [4, 16, 256, ["chunked", "p8", "p4x2"]],
    [4, 16, 128, ["chunked", "p8", "p4x2"]],
    [4, 16, 8, ["chunked", "p8", "p4x2"]],
    [1, 16, 256, ["chunked", "p8", "p4x2"]],
    [1, 32, 256, ["chunked", "p8"]],
    [8, 16, 256, ["chunked", "p8"]],
    [2, 16, 256, ["chunked", "p8"]],
    [4, 16, 64, ["chunked", "p8", "p4x2"]],
]


def use(variant):
    for k in ("REPLAYSSM_VERIFY", "REPLAYSSM_PV_WARPS", "REPLAYSSM_PV_ROWS", "REPLAYSSM_PV_STAGES", "REPLAYSSM_PV_PPS"):
        os.environ.pop(k, None)
    os.environ.update(VARIANTS[variant])


def trace(case, steps=12):
    """Outputs of every step, then the checkpoints and rings, of one ReplayStep under the current variant."""
    torch.manual_seed(123)
    step = ReplayStep.build(case)
    outs = []
    for _ in range(steps):
        step()
        outs.append(step.outputs.clone())
    torch.cuda.synchronize()
    rings = [(r.k, r.v, r.g, r.beta, r.u, r.folded) for r in step.rings]
    return outs, step.checkpoint, rings


def same(a, b):
    oa, ca, ra = a
    ob, cb, rb = b
    ok = all(torch.equal(x, y) for x, y in zip(oa, ob)) and torch.equal(ca, cb)
    for xa, xb in zip(ra, rb):
        ok = ok and all(torch.equal(p.nan_to_num(), q.nan_to_num()) for p, q in zip(xa, xb))
    return ok


def main():
    out = os.environ.get("OUT", ".")
    points = json.loads(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_POINTS
    cfg = KernelBenchConfig(target_ms=15)
    timer = GraphTimer(0.015)
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.3f} TB/s", flush=True)
    rows = []
    t0 = time.time()
    for T, L, B, variants in points:
        layers = layers_for(B, cfg.geo, cfg.min_working_set)
        ours = backends_for(T, {})
        small = make_case(cfg.geo, B, T, L, 2, cfg.dtype, seed=1, device="cuda")
        traces = {}
        for var in variants:
            use(var)
            tc = time.time()
            traces[var] = trace(small)
            print(f"  T={T} L={L} B={B} {var}: trace {time.time() - tc:.1f}s", flush=True)
        equal = {var: same(traces[var], traces["chunked"]) for var in variants}
        del traces
        gates = {}
        for var in variants:
            use(var)
            gates[var] = gate_all(small, ours)["replayssm/replay"]
        del small
        free_memory(True)
        row = {"T": T, "L": L, "B": B, "layers": layers, "equal_to_chunked": equal, "gates": gates}
        case = make_case(cfg.geo, B, T, L, layers, cfg.dtype, accept="random" if T > 1 else "full", device="cuda")
        row["recurrent_us"] = timer(ours[0].build(case)) / layers * 1e6
        free_memory()
        for var in variants:
            if not (equal[var] and gates[var]["passed"]):
                row[var] = "refused: failed its check"
                continue
            use(var)
            row[var] = time_ring(ours[1], case, timer, layers)
            free_memory()
        del case
        free_memory(True)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "gates"}, default=str), f"t={time.time() - t0:.0f}s",
              flush=True)  # fmt: skip
    with open(os.path.join(out, "pv_probe.json"), "w") as f:
        json.dump({"bandwidth": bw, "rows": rows}, f, indent=1, default=str)
    print(f"\n{'T':>2} {'L':>3} {'B':>4} {'variant':>8} {'eq':>3} {'gate':>4} {'random':>8} {'nonfl':>8} {'flush':>8} "
          f"{'fold/rec':>8} {'rec':>8}")  # fmt: skip
    for r in rows:
        for var, eq in r["equal_to_chunked"].items():
            t = r[var] if isinstance(r[var], dict) else {}
            f = [t.get(k, float("nan")) for k in ("replay_random_us", "replay_nonflush_us", "replay_flush_us",
                                                  "fold_us_per_record")]  # fmt: skip
            print(f"{r['T']:>2} {r['L']:>3} {r['B']:>4} {var:>8} {int(eq):>3} {int(r['gates'][var]['passed']):>4} "
                  f"{f[0]:8.1f} {f[1]:8.1f} {f[2]:8.1f} {f[3]:8.1f} {r['recurrent_us']:8.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
