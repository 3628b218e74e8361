"""Kernels of the MTP drafter's propose (27B shape): per-kernel GPU time, C=1 and C=8, fp8 head."""

import json
import os
import sys

sys.path.insert(0, os.getcwd())
from dataclasses import replace

import torch

from replayssm.bench.e2e import E2EConfig, _draft_ms, _runner, lengths
from replayssm.bench.synthetic import preset_config, random_model
from replayssm.models.step import Step, StepKind

out = os.environ["OUT"]
cfg = E2EConfig()
mc = replace(preset_config(cfg.preset, cfg.layers), mtp_num_hidden_layers=1)
model = random_model(mc, seed=0, device="cuda", dtype=torch.bfloat16)
model.fuse_projections()
res = {}
for C in (1, 8):
    max_new, extra, max_len = lengths(cfg, "replay-mtp", 8, None)
    r = _runner(model, "replay-mtp", C, cfg, max_len)
    ms = _draft_ms(r, C)
    slots = torch.arange(C, dtype=torch.int32, device="cuda")
    last = torch.zeros(C, dtype=torch.long, device="cuda")
    step = Step.build(StepKind.VERIFY, slots, r.cfg.window, r.kv, contiguous=True)
    for _ in range(3):
        r.drafter.propose(step, last)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            r.drafter.propose(step, last)
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    kern = {}
    for e in ev:
        k = kern.setdefault(e.name[:100], [0, 0.0])
        k[0] += 1
        k[1] += e.time_range.end - e.time_range.start
    top = sorted(kern.items(), key=lambda kv: -kv[1][1])
    tot = sum(v[1] for v in kern.values()) / 5
    res[C] = {"draft_ms_graph": ms, "kernel_us_per_propose": tot, "n_kernels": len(ev) / 5, "kernels": top}
    print(f"C={C}: propose graph {ms:.3f} ms; kernels {len(ev) / 5:.0f}, kernel time {tot:.0f} us")
    for n, (c, t) in top[:30]:
        print(f"  {t / 5:8.1f} us  x{c / 5:4.0f}  {n}")
    del r
    torch.cuda.empty_cache()
with open(f"{out}/prof_draft.json", "w") as fh:
    json.dump(res, fh, indent=1, default=str)
