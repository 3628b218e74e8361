"""Clock/power over time while one step is replayed for a few seconds (after an idle pause)."""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.getcwd())
import torch

from replayssm.bench.backends import backends_for
from replayssm.bench.kernels import KernelBenchConfig
from replayssm.bench.point import layers_for
from replayssm.bench.steps import acceptance, make_case
from replayssm.bench.timing import capture

cfg = KernelBenchConfig()
out = os.environ["OUT"]
B, T, L = 256, 4, 16
layers = layers_for(B, cfg.geo, cfg.min_working_set)
case = make_case(cfg.geo, B, T, L, layers, cfg.dtype, accept="random", device="cuda")
ours = backends_for(T, {})
res = {}


def run(name, step, seconds=2.5):
    g = capture(step)
    torch.cuda.synchronize()
    time.sleep(1.0)
    mon = subprocess.Popen(
        [
            "nvidia-smi",
            "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active",
            "--format=csv,noheader",
            "-lms",
            "25",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.2)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.time()
    per = []
    while time.time() - t0 < seconds:
        s.record()
        for _ in range(5):
            g.replay()
        e.record()
        e.synchronize()
        per.append((round(time.time() - t0, 3), s.elapsed_time(e) / 5 / layers * 1e3))
    time.sleep(0.1)
    mon.terminate()
    lines = mon.communicate()[0].strip().splitlines()
    res[name] = {"per_replay_us": per, "smi": lines}
    n = len(per)
    print(
        name, "us/layer: first", [round(p[1]) for p in per[:6]], "mid", round(per[n // 2][1]), "last", round(per[-1][1])
    )
    print("  smi:", lines[:: max(1, len(lines) // 12)][:14])


rec = ours[0].build(case)
run("recurrent", rec)
del rec
st = ours[1].build(case.with_accept(acceptance(B, T, "full", "cuda")))
for _ in range(L):
    st()
st.set_cursors(True)
run("flush", st)
st.set_cursors(False)
run("nonflush", st)
with open(f"{out}/clk.json", "w") as fh:
    json.dump(res, fh)
