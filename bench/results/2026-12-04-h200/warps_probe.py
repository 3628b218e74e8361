"""More warps per SM for the verify's main kernel (probe, run 1 of 2026-12-04).

The sixteenth session's ncu put a pure-flush step's window work after the fold at latency that four warps per
scheduler cannot cover (4-warp programs, 128 registers, four per SM). Compiled for sm_90 on the CPU
(scripts/sm90_compile.py with an override), the main kernel at 8 warps x 2 rows per thread needs 96 registers
uncapped, fits 80 without spills (three programs per SM: six warps per scheduler) and 64 with 48 bytes of stack
(four per SM: eight warps per scheduler). Here each $CONFIGS entry (warps, rows per thread, register cap) runs the
verify through ``launch.override`` and ``verify_launch.MAXNREG``; first a 12-step random trace (outputs and committed
states) compared with the first config's (committed states must be torch.equal: the launch shape never enters a
row's arithmetic), then, per point of $POINTS (T, L, B), the random step and, where T > 1, the frozen non-flush and
flush steps (``point.time_ring``'s way) and the fold cost per record. Us per layer-step, CUDA graphs.

Run 3 reuses it with five-entry configs (warps, rows per thread, register cap, chunks in flight, columns per chunk):
at T=1, L=32 the main kernel's 59 KB of shared memory (two 16 KB checkpoint chunks and a folding row's staged
records) leaves three programs per SM; three chunks of 16 columns make it 51 KB (four per SM)."""

import json
import os
import sys
import time
from contextlib import contextmanager

sys.path.insert(0, os.path.abspath(os.environ.get("TREE", os.getcwd())))
import torch  # noqa: E402

from replayssm.bench.kernels import KernelBenchConfig  # noqa: E402
from replayssm.bench.point import fold_cost, free_memory, layers_for  # noqa: E402
from replayssm.bench.steps import ReplayStep, acceptance, make_case  # noqa: E402
from replayssm.bench.timing import GraphTimer, copy_bandwidth  # noqa: E402
from replayssm.ops import launch, verify_launch  # noqa: E402

POINTS = [tuple(p) for p in json.loads(os.environ.get("POINTS", "[[4,16,256],[4,16,128],[1,16,256],[1,32,256]]"))]
CONFIGS = [tuple(c) for c in json.loads(os.environ.get("CONFIGS", "[[4,4,128],[8,2,80],[8,2,64],[4,4,128],[8,2,80]]"))]


@contextmanager
def config(c):
    w, rpt, nreg, stages, kc = (tuple(c) + (2, 32))[:5]
    old = verify_launch.MAXNREG
    verify_launch.MAXNREG = {"maxnreg": nreg}
    try:
        with launch.override(verify=launch.TileConfig(num_warps=w, rows_per_thread=rpt, stages=stages, k_chunk=kc)):
            yield
    finally:
        verify_launch.MAXNREG = old


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
    bw = copy_bandwidth()
    rows, t0 = [], time.time()
    print(f"copy bandwidth {bw / 1e12:.3f} TB/s", flush=True)
    for T, L, B in POINTS:
        layers = layers_for(B, cfg.geo, cfg.min_working_set)
        first, ok = None, {}
        for c in dict.fromkeys(CONFIGS):
            with config(c):
                o, s = trace(cfg.geo, cfg, T, L, B)
            if first is None:
                first = (o, s)
            ok[c] = bool(torch.equal(s, first[1]))
            row = {"T": T, "L": L, "B": B, "config": c, "committed_equal": ok[c],
                   "outputs_equal": bool(torch.equal(o, first[0])),
                   "outputs_max_diff": float((o.float() - first[0].float()).abs().max())}  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
        del first
        free_memory(True)
        case = make_case(cfg.geo, B, T, L, layers, cfg.dtype, accept="random", device="cuda")
        for rep, c in enumerate(CONFIGS):
            if not ok[c]:
                continue  # refuse to time a config whose committed states differ
            row = {"T": T, "L": L, "B": B, "config": c, "rep": rep, "layers": layers, "copy_bw": bw}
            with config(c):
                row["random_us"] = timer(ReplayStep.build(case)) / layers * 1e6
                free_memory()
                if T == 4 and B == 256 and os.environ.get("FLUSH", "1") == "1":
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
    with open(os.path.join(out, "warps.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\nT L B config random nonflush flush fold/rec")
    for r in rows:
        if "random_us" in r:
            f = [r.get(k, float("nan")) for k in ("random_us", "nonflush_us", "flush_us", "fold_us_per_record")]
            print(f"{r['T']} {r['L']:>3} {r['B']:>4} {str(r['config']):>14} " + " ".join(f"{x:8.1f}" for x in f))


if __name__ == "__main__":
    main()
