"""Dev sweep: our recurrent baseline's launch shape (warps x rows per thread) with the 8-K-lane pinned tile, beside
both SGLang releases' recurrent kernels, at a few points. Each shape's outputs and committed states are checked
``torch.equal`` to the default shape's first (the pinned layout makes them equal by construction); a shape that
fails is not timed. Table last; JSON in $OUT.

    python bench/results/2026-12-02-h200/rec_sweep.py
"""

import json
import os
import sys

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

from replayssm.bench.backends import backends_for  # noqa: E402
from replayssm.bench.kernels import KernelBenchConfig, load_peers  # noqa: E402
from replayssm.bench.point import free_memory, layers_for  # noqa: E402
from replayssm.bench.steps import make_case  # noqa: E402
from replayssm.bench.timing import GraphTimer  # noqa: E402
from replayssm.ops import launch  # noqa: E402

SHAPES = [(2, 4), (2, 2), (4, 2), (4, 4), (1, 4), (8, 2), (1, 2)]
POINTS = [(4, 256), (8, 256), (2, 256), (1, 256), (4, 8), (4, 64)]


def run_once(build, case):
    torch.manual_seed(5)
    step = build(case)
    step()
    torch.cuda.synchronize()
    return step.outputs.clone(), step.committed(0).clone()


def main():
    cfg = KernelBenchConfig(target_ms=15)
    timer = GraphTimer(0.015)
    peers = load_peers(cfg)
    rows = []
    for T, B in POINTS:
        layers = layers_for(B, cfg.geo, cfg.min_working_set)
        backends = backends_for(T, peers)
        ours = backends[0]
        case = make_case(cfg.geo, B, T, 16, layers, cfg.dtype, accept="random" if T > 1 else "full", device="cuda")
        ref = run_once(ours.build, case)
        row = {"T": T, "B": B}
        for w, r in SHAPES:
            with launch.override(recurrent=launch.TileConfig(num_warps=w, rows_per_thread=r)):
                got = run_once(ours.build, case)
                same = torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
                row[f"{w}x{r}_equal"] = same
                if same:
                    row[f"{w}x{r}_us"] = timer(ours.build(case)) / layers * 1e6
            free_memory()
        for b in backends:
            if b.kind == "recurrent" and b.impl != "replayssm":
                row[f"{b.impl}_us"] = timer(b.build(case)) / layers * 1e6
                free_memory()
        del case
        free_memory(True)
        rows.append(row)
        print(json.dumps(row), flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "rec_sweep.json"), "w") as f:
        json.dump(rows, f, indent=1)
    for row in rows:
        best = min((v, k) for k, v in row.items() if k.endswith("x1_us") or k.endswith("x2_us") or k.endswith("x4_us"))
        sgl = min(v for k, v in row.items() if k.startswith("sglang"))
        print(f"T={row['T']} B={row['B']}: " + " ".join(f"{w}x{r}={row.get(f'{w}x{r}_us', float('nan')):.1f}"
              for w, r in SHAPES) + f" | sglang best {sgl:.1f} | best ours {best[1]} {best[0]:.1f}"
              f" ({best[0] / sgl:.3f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
