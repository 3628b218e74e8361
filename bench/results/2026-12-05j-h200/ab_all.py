"""A/B of trees or switches in one device call (2026-12-05j): each process runs one tree ($TREE, tag $TAG) and writes,
per point of $POINTS (T, L, B), the 12-step random trace of ``ab_probe.py`` (2026-12-04-h200: outputs and committed
states, torch.save), and times the random step, the frozen non-flush and flush steps and the fold cost per record
with the kernel bench's own ``point.time_ring`` at every point (ab_probe.py froze steps at T=4, B=256 only). Us per
layer-step, CUDA graphs, the default launch of each tree (and the switches in the environment)."""

import importlib.util
import json
import os
import sys
import time
import types

_spec = importlib.util.spec_from_file_location(
    "ab_probe", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "2026-12-04-h200", "ab_probe.py")
)
ab_probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ab_probe)  # (puts $TREE first on sys.path, as it always did)

from replayssm.bench.kernels import KernelBenchConfig  # noqa: E402
from replayssm.bench.point import free_memory, layers_for, time_ring  # noqa: E402
from replayssm.bench.steps import ReplayStep, make_case  # noqa: E402
from replayssm.bench.timing import GraphTimer, copy_bandwidth  # noqa: E402

KEYS = {"replay_random_us": "random_us", "replay_nonflush_us": "nonflush_us", "replay_flush_us": "flush_us",
        "fold_us_per_record": "fold_us_per_record"}  # fmt: skip


def run(tag):
    import torch

    cfg = KernelBenchConfig(target_ms=15)
    timer = GraphTimer(0.015)
    bw = copy_bandwidth()
    replay = types.SimpleNamespace(build=ReplayStep.build)
    rows, t0 = [], time.time()
    for T, L, B in ab_probe.POINTS:
        path = os.path.join(ab_probe.OUT, f"trace_{tag}_{T}_{L}_{B}.pt")
        if not os.path.exists(path):
            torch.save(ab_probe.trace(cfg.geo, cfg, T, L, B), path)
            free_memory(True)
        layers = layers_for(B, cfg.geo, cfg.min_working_set)
        case = make_case(cfg.geo, B, T, L, layers, cfg.dtype, accept="random", device="cuda")
        row = {"tag": tag, "T": T, "L": L, "B": B, "layers": layers, "copy_bw": bw}
        row.update({KEYS[k]: v for k, v in time_ring(replay, case, timer, layers).items()})
        rows.append(row)
        print(json.dumps(row), f"t={time.time() - t0:.0f}s", flush=True)
        del case
        free_memory(True)
    with open(os.path.join(ab_probe.OUT, f"ab_{tag}_{os.getpid()}.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(run(os.environ["TAG"]))
