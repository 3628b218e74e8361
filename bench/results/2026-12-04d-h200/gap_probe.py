"""Where an engine step's wall time goes beyond its kernels (27B shape, graphs on, overlapped steps as in
``replayssm bench e2e``): per mode and concurrency, (1) the iteration's wall time and the part of it the host spends
waiting for the device; (2) the step's CUDA graph replayed back to back alone (device time of a step); (3) a CUDA
profile of three overlapped iterations: kernel busy time, idle gaps, and the kernels after which the largest gaps
open. A probe for issue 15 (not package code)."""

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import torch

from replayssm.bench.e2e import E2EConfig, _runner, lengths
from replayssm.bench.synthetic import preset_config, random_model
from replayssm.engine import graphs
from replayssm.engine.engine import Engine
from replayssm.engine.spec import BenchmarkAcceptance

out = os.environ["OUT"]
cfg = E2EConfig(prompt_len=64)
mc = preset_config(cfg.preset, cfg.layers)
model = random_model(mc, seed=0, device="cuda", dtype=torch.bfloat16)
model.fuse_projections()
g = torch.Generator().manual_seed(0)

waits = []
_result = graphs.Launched.result


def timed_result(self):
    t0 = time.perf_counter()
    r = _result(self)
    waits.append(time.perf_counter() - t0)
    return r


graphs.Launched.result = timed_result
res = {}
for spec in os.environ.get("POINTS", "replay:64,recurrent:64,plain:64,replay:8,recurrent:8").split(","):
    mode, C = spec.split(":")
    C = int(C)
    T = 1 if mode == "plain" else cfg.window
    steps = 16
    max_new, extra, max_len = lengths(cfg, mode, steps + 8, None)
    r = _runner(model, mode, C, cfg, max_len)
    bench = None if mode == "plain" else BenchmarkAcceptance(cfg.mean_accepted, T, seed=0, meaningless_outputs=True)
    eng = Engine(r, drafter="none" if mode == "plain" else "ngram", benchmark_acceptance=bench, overlap=True)
    for _ in range(C):
        eng.add(torch.randint(0, mc.vocab_size, (cfg.prompt_len,), generator=g).tolist(), max_new)
    eng.step()
    eng.drain()
    for _ in range(3):
        eng.step()
    walls, wts = [], []
    for _ in range(steps):
        waits.clear()
        t0 = time.perf_counter()
        eng.step()
        walls.append(time.perf_counter() - t0)
        wts.append(sum(waits))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            eng.step()
        torch.cuda.synchronize()
    eng.drain()
    # device time alone: the step's graph back to back (state moves; acceptance as last loaded)
    ds = [v for k, v in r._graphs.items() if k[0] == "step"][0]
    for _ in range(3):
        ds.graph.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dev = []
    for _ in range(3):
        a.record()
        for _ in range(5):
            ds.graph.replay()
        b.record()
        b.synchronize()
        dev.append(a.elapsed_time(b) / 5)
    ev = sorted(
        (e.time_range.start, e.time_range.end, e.name)
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA
    )
    busy, gaps, cur, prev_name, biggest = 0.0, 0.0, None, None, []
    for s, e, n in ev:
        if cur is None:
            cur, prev_name = [s, e], n
            continue
        if s > cur[1]:
            busy += cur[1] - cur[0]
            gaps += s - cur[1]
            biggest.append((s - cur[1], prev_name[:70], n[:70]))
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
        prev_name = n
    busy += cur[1] - cur[0]
    span = ev[-1][1] - ev[0][0]
    biggest.sort(reverse=True)
    hist = {}
    for gp, _, _n in biggest:
        k = "<2us" if gp < 2 else "2-10us" if gp < 10 else "10-100us" if gp < 100 else ">=100us"
        hist[k] = hist.get(k, 0) + gp
    key = f"{mode}_C{C}"
    res[key] = {
        "wall_ms_median": statistics.median(walls) * 1e3,
        "wait_ms_median": statistics.median(wts) * 1e3,
        "host_ms_median": statistics.median([w - t for w, t in zip(walls, wts)]) * 1e3,
        "graph_alone_ms": statistics.median(dev),
        "profile_busy_ms": busy / 3e3,
        "profile_gaps_ms": gaps / 3e3,
        "profile_span_ms": span / 3e3,
        "kernels_per_step": len(ev) / 3,
        "gap_hist_ms": {k: v / 3e3 for k, v in hist.items()},
        "biggest_gaps_us": biggest[:12],
    }
    x = res[key]
    print(
        f"== {key}: wall {x['wall_ms_median']:.2f} ms (host {x['host_ms_median']:.2f}, "
        f"wait {x['wait_ms_median']:.2f}); graph alone {x['graph_alone_ms']:.2f}; "
        f"profile busy {x['profile_busy_ms']:.2f} gaps {x['profile_gaps_ms']:.2f} "
        f"span {x['profile_span_ms']:.2f} kernels {x['kernels_per_step']:.0f}",
        flush=True,
    )
    print("   gap histogram (ms/step):", {k: round(v, 3) for k, v in x["gap_hist_ms"].items()})
    for gp, p, n in biggest[:8]:
        print(f"   {gp:8.1f} us after {p} -> {n}")
    del eng, r, ds
    torch.cuda.empty_cache()
with open(f"{out}/gap_probe.json", "w") as fh:
    json.dump(res, fh, indent=1)
