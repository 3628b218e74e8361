"""Where an engine step's GPU idle time sits (issue 15): kernel gaps by the pair of kernels around them.

The thirtieth session's profile (`../2026-12-05h-h200/`) found, at C=64 (27B, 1,024 tokens of context), replay's step
with 2.37 ms of gaps against recurrent's 1.58, and the official run's replay step 1.7 ms above its busy time where
recurrent's is 0.55 above. This probe runs the engine as the official bench does (``overlap=True`` unless
OVERLAP=0; LAYERS=N builds the preset's first N layers, e.g. to fit an H100), profiles three steps, and sums every gap
between consecutive kernels by (kernel before, kernel after), with a histogram of gap sizes. A timing probe:
correctness is gated by the GPU suite and the bench.
"""

import json
import os
import sys

sys.path.insert(0, os.getcwd())
import torch

from replayssm.bench.e2e import E2EConfig, _runner, lengths, paged_tokens
from replayssm.bench.synthetic import preset_config, random_model
from replayssm.engine.engine import Engine
from replayssm.engine.spec import BenchmarkAcceptance

out = os.environ["OUT"]
cfg = E2EConfig(prompt_len=64, layers=int(os.environ["LAYERS"]) if os.environ.get("LAYERS") else None)
mc = preset_config(cfg.preset, cfg.layers)
model = random_model(mc, seed=0, device="cuda", dtype=torch.bfloat16)
model.fuse_projections()
g = torch.Generator().manual_seed(0)
overlap = os.environ.get("OVERLAP", "1") == "1"
STEPS = 3


def short(n):
    for cut in ("<", "("):
        n = n.split(cut)[0]
    return n[:44]


res = {}
for mode, C in [(m, int(c)) for m, c in (x.split(":") for x in os.environ.get("PROF", "replay:64").split(","))]:
    T = 1 if mode == "plain" else cfg.window
    max_new, extra, max_len = lengths(cfg, mode, 24, 1024)
    r = _runner(model, mode, C, cfg, max_len, kv_tokens=paged_tokens(C, max_len))
    bench = None if mode == "plain" else BenchmarkAcceptance(cfg.mean_accepted, T, seed=0, meaningless_outputs=True)
    eng = Engine(r, drafter="none" if mode == "plain" else "ngram", benchmark_acceptance=bench, overlap=overlap)
    for _ in range(C):
        eng.add(torch.randint(0, mc.vocab_size, (cfg.prompt_len,), generator=g).tolist(), max_new)
    eng.step()
    eng.drain()
    if extra:
        r.pad_kv([q.slot for q in eng.requests], extra)
    for _ in range(4):
        eng.step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            eng.step()
        torch.cuda.synchronize()
    eng.drain()
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    iv = sorted((e.time_range.start, e.time_range.end, short(e.name)) for e in ev)
    pairs, prev = {}, None
    hist = {"<2us": [0, 0.0], "2-5us": [0, 0.0], "5-20us": [0, 0.0], ">20us": [0, 0.0]}
    span = iv[-1][1] - iv[0][0]
    for s, e, n in iv:
        if prev is not None and s > prev[1]:
            gap = s - prev[1]
            p = pairs.setdefault(f"{prev[2]} -> {n}", [0, 0.0])
            p[0] += 1
            p[1] += gap
            b = "<2us" if gap < 2 else "2-5us" if gap < 5 else "5-20us" if gap < 20 else ">20us"
            hist[b][0] += 1
            hist[b][1] += gap
        if prev is None or e > prev[1]:
            prev = (s, e, n)
    gaps = sum(v[1] for v in pairs.values())
    key = f"{mode}_C{C}"
    top = sorted(pairs.items(), key=lambda kv: -kv[1][1])[:16]
    res[key] = {
        "overlap": eng.overlap, "kernels_per_step": len(iv) / STEPS, "span_ms_per_step": span / STEPS / 1e3,
        "gap_ms_per_step": gaps / STEPS / 1e3, "hist": {k: [v[0] / STEPS, v[1] / STEPS] for k, v in hist.items()},
        "top_pairs": [(k, v[0] / STEPS, v[1] / STEPS) for k, v in top],
    }  # fmt: skip
    print(f"== {key} overlap={eng.overlap}: kernels/step {len(iv) / STEPS:.0f}, span {span / STEPS / 1e3:.2f} ms, "
          f"gaps {gaps / STEPS / 1e3:.2f} ms", flush=True)  # fmt: skip
    for k, (c, t) in hist.items():
        print(f"   {k:7s} x{c / STEPS:6.0f} {t / STEPS / 1e3:6.2f} ms")
    for k, c, t in res[key]["top_pairs"]:
        print(f"   {t:8.0f} us x{c:5.0f}  {k}")
    del eng, r
    torch.cuda.empty_cache()
with open(f"{out}/gap_prof.json", "w") as fh:
    json.dump(res, fh, indent=1)
