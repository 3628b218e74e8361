"""Does the data change the time? (run 9 of 2026-12-04.) Run 5's timing model of raw ring keys, which folded garbage
(states soon infinite or NaN), measured a T=4 flush step 57 us faster than its base, the real format 32 us slower.
An earlier session found the step power-bound; if the garbage drew less power, the model ran at higher clocks. Here
the landed tree's pure-flush, pure-non-flush and random steps (T=4, L=16, B=256) and plain decode (T=1, L=32) run
from the bench's random states (``rand``), from states of NaN (``nan``) and of zeros (``zero``: the fold's products
and sums all zero), in turn, twice; `nvidia-smi` samples SM clock and power meanwhile (``smi.csv``). Timing only."""

import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.environ.get("TREE", os.getcwd())))
import torch  # noqa: E402

from replayssm.bench.kernels import KernelBenchConfig  # noqa: E402
from replayssm.bench.point import free_memory, layers_for  # noqa: E402
from replayssm.bench.steps import ReplayStep, acceptance, make_case  # noqa: E402
from replayssm.bench.timing import GraphTimer  # noqa: E402

OUT = os.environ.get("OUT", ".")


def main():
    cfg = KernelBenchConfig(target_ms=15)
    timer = GraphTimer(0.015)
    rows, t0 = [], time.time()
    for T, L, B in ((4, 16, 256), (1, 32, 256)):
        layers = layers_for(B, cfg.geo, cfg.min_working_set)
        base = make_case(cfg.geo, B, T, L, layers, cfg.dtype, accept="random", device="cuda")
        for rep in range(2):
            for kind in ("rand", "nan", "zero"):
                s0 = {"rand": base.state0, "nan": torch.full_like(base.state0, float("nan")),
                      "zero": torch.zeros_like(base.state0)}[kind]  # fmt: skip
                case = dataclasses.replace(base, state0=s0)
                row = {"T": T, "L": L, "B": B, "state": kind, "rep": rep, "t_start": time.time() - t0}
                row["random_us"] = timer(ReplayStep.build(case)) / layers * 1e6
                free_memory()
                if T == 4:
                    full = case.with_accept(acceptance(B, T, "full", "cuda"))
                    for flush in (False, True):
                        step = ReplayStep.build(full)
                        for _ in range(L):
                            step()
                        step.set_cursors(flush)
                        row["flush_us" if flush else "nonflush_us"] = timer(step) / layers * 1e6
                        del step
                        free_memory()
                row["t_end"] = time.time() - t0
                rows.append(row)
                print(json.dumps(row), flush=True)
                del case, s0
                free_memory(True)
        del base
        free_memory(True)
    with open(os.path.join(OUT, "data.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
