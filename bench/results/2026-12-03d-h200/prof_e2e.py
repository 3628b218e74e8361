"""Per-category GPU time of engine steps (27B shape): where the step's time goes, C=8 and C=64."""

import json
import os
import sys

sys.path.insert(0, os.getcwd())
import torch

from replayssm.bench.e2e import E2EConfig, _runner, lengths
from replayssm.bench.synthetic import preset_config, random_model
from replayssm.engine.engine import Engine
from replayssm.engine.spec import BenchmarkAcceptance

out = os.environ["OUT"]
cfg = E2EConfig(prompt_len=64)
mc = preset_config(cfg.preset, cfg.layers)
model = random_model(mc, seed=0, device="cuda", dtype=torch.bfloat16)
model.fuse_projections()
g = torch.Generator().manual_seed(0)


def cat(n):
    if "splitKreduce" in n or n.startswith("Memset"):
        return "splitk+memset"
    if "nvjet" in n or "gemm" in n.lower() or "cutlass" in n or "xmma" in n:
        return "gemm"
    if any(s in n for s in ("_gdn", "_window_prep", "_fold", "ring", "commit", "conv", "cursor", "snapshot")):
        return "gdn"
    if any(s in n for s in ("attn", "qk_norm", "combine", "paged")):
        return "attn"
    if "rms_norm" in n:
        return "norm"
    if "silu" in n:
        return "act"
    return "other"


res = {}
for mode, C in [
    (m, int(c))
    for m, c in (
        x.split(":")
        for x in os.environ.get("PROF", "plain:8,replay:8,recurrent:8,replay:64,recurrent:64,plain:64").split(",")
    )
]:
    T = 1 if mode == "plain" else cfg.window
    ctx = int(os.environ.get("CONTEXT", "0")) or None
    max_new, extra, max_len = lengths(cfg, mode, 16, ctx)
    from replayssm.bench.e2e import paged_tokens

    r = _runner(model, mode, C, cfg, max_len, kv_tokens=paged_tokens(C, max_len) if ctx else None)
    bench = None if mode == "plain" else BenchmarkAcceptance(cfg.mean_accepted, T, seed=0, meaningless_outputs=True)
    eng = Engine(r, drafter="none" if mode == "plain" else "ngram", benchmark_acceptance=bench, overlap=False)
    for _ in range(C):
        eng.add(torch.randint(0, mc.vocab_size, (cfg.prompt_len,), generator=g).tolist(), max_new)
    eng.step()
    eng.drain()
    if extra:
        r.pad_kv([q.slot for q in eng.requests], extra)
    for _ in range(4):
        eng.step()
    eng.drain()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            eng.step()
        eng.drain()
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    iv = sorted((e.time_range.start, e.time_range.end, e.name) for e in ev)
    busy, gap, cur = 0.0, 0.0, None
    for s, e, _n in iv:
        if cur is None:
            cur = [s, e]
            continue
        if s > cur[1]:
            busy += cur[1] - cur[0]
            gap += s - cur[1]
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
    busy += cur[1] - cur[0]
    cats, kern = {}, {}
    for s, e, n in iv:
        c = cats.setdefault(cat(n), [0, 0.0])
        c[0] += 1
        c[1] += e - s
        k = kern.setdefault(n[:80], [0, 0.0])
        k[0] += 1
        k[1] += e - s
    top = sorted(kern.items(), key=lambda kv: -kv[1][1])[:22]
    key = f"{mode}_C{C}"
    res[key] = {
        "n_kernels": len(iv) / 3,
        "busy_us": busy / 3,
        "gap_us": gap / 3,
        "cats": {k: [v[0] / 3, v[1] / 3] for k, v in cats.items()},
        "top": [(n, c / 3, t / 3) for n, (c, t) in top],
    }
    print(
        f"== {key}: kernels/step {len(iv) / 3:.0f}, busy {busy / 3 / 1e3:.2f} ms, gaps {gap / 3 / 1e3:.2f} ms",
        flush=True,
    )
    for k, (c, t) in sorted(cats.items(), key=lambda kv: -kv[1][1]):
        print(f"   {k:14s} {t / 3 / 1e3:7.2f} ms  x{c / 3:5.0f}")
    for n, (c, t) in top:
        print(f"     {t / 3:8.0f} us x{c / 3:4.0f} {n}")
    del eng, r
    torch.cuda.empty_cache()
with open(f"{out}/prof_e2e.json", "w") as fh:
    json.dump(res, fh, indent=1)
