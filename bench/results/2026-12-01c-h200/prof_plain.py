"""GPU timeline of plain decode steps (27B shape, C=1 and C=8): graph time vs host gaps, top kernels."""

import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import torch

from replayssm.bench.e2e import E2EConfig, _runner, lengths
from replayssm.bench.synthetic import preset_config, random_model
from replayssm.engine.engine import Engine

out = os.environ["OUT"]
cfg = E2EConfig()
mc = preset_config(cfg.preset, cfg.layers)
model = random_model(mc, seed=0, device="cuda", dtype=torch.bfloat16)
model.fuse_projections()
g = torch.Generator().manual_seed(0)
res = {}
for C in (1, 8):
    max_new, extra, max_len = lengths(cfg, "plain", 12, None)
    r = _runner(model, "plain", C, cfg, max_len)
    eng = Engine(r, drafter="none")
    for _ in range(C):
        eng.add(torch.randint(0, mc.vocab_size, (cfg.prompt_len,), generator=g).tolist(), max_new)
    for _ in range(4):
        eng.step()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(5):
        a.record()
        t0 = time.perf_counter()
        eng.step()
        b.record()
        b.synchronize()
        ms.append((a.elapsed_time(b), (time.perf_counter() - t0) * 1e3))
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ) as prof:
        for _ in range(3):
            eng.step()
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    iv = sorted((e.time_range.start, e.time_range.end, e.name) for e in ev)
    busy, gaps, cur = 0.0, [], None
    for s, e, n in iv:
        if cur is None:
            cur = [s, e]
            continue
        if s > cur[1]:
            busy += cur[1] - cur[0]
            gaps.append((s - cur[1], n))
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
    busy += cur[1] - cur[0]
    span = iv[-1][1] - iv[0][0]
    kern = {}
    for s, e, n in iv:
        k = kern.setdefault(n[:90], [0, 0.0])
        k[0] += 1
        k[1] += e - s
    top = sorted(kern.items(), key=lambda kv: -kv[1][1])[:25]
    cpu = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    res[C] = {
        "step_ms_events_wall": ms,
        "gpu_span_us": span,
        "gpu_busy_us": busy,
        "n_kernels": len(iv),
        "gaps_top": sorted(gaps, reverse=True)[:15],
        "gap_total_us": sum(x for x, _ in gaps),
        "top_kernels": top,
    }
    print(
        f"C={C}: step ms (events, wall) {ms}; 3 steps: span {span:.0f} us, busy {busy:.0f}, "
        f"gaps {sum(x for x, _ in gaps):.0f} in {len(gaps)}, kernels {len(iv)}"
    )
    print("  largest gaps:", [(round(x), n[:40]) for x, n in sorted(gaps, reverse=True)[:8]])
    for n, (c, t) in top[:18]:
        print(f"  {t / 3:9.0f} us/step  x{c / 3:5.0f}  {n}")
    print(cpu[:3000])
    del eng, r
    torch.cuda.empty_cache()
with open(f"{out}/prof_plain.json", "w") as fh:
    json.dump(res, fh, indent=1, default=str)
