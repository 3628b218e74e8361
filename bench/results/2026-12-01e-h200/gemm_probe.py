"""GEMMs of the 27B step: cuBLAS (default) vs cuBLASLt preferred, per weight shape and M, in CUDA graphs."""

import json
import os
import sys

sys.path.insert(0, os.getcwd())
import torch
import torch.nn.functional as F

from replayssm.bench.synthetic import preset_config, random_model

out = os.environ["OUT"]
mc = preset_config("qwen3.5-27b", None)
model = random_model(mc, seed=0, device="cuda", dtype=torch.bfloat16)
model.fuse_projections()
shapes = {}
for m in model.modules():
    for name in ("_qkvz", "_qkv", "_gate_up"):
        t = getattr(m, name, None)
        if isinstance(t, torch.Tensor):
            shapes.setdefault(tuple(t.shape), [t, 0])[1] += 1
    if isinstance(m, torch.nn.Linear):
        w = m.weight
        if w.untyped_storage().nbytes() > w.numel() * w.element_size():
            continue  # a view of a fused weight, counted above
        shapes.setdefault(tuple(w.shape), [w, 0])[1] += 1
print({k: v[1] for k, v in shapes.items()})
bw = 4.25e12


def time_graph(fn, reps=20):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = 1e9
    for _ in range(5):
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) / reps)
    return best * 1e3  # us


res = []
for M in [int(m) for m in os.environ.get("MS", "1,8,32,64,256").split(",")]:
    tot = {"cublas": 0.0, "cublaslt": 0.0, "floor": 0.0}
    for (N, K), (w, cnt) in sorted(shapes.items()):
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        row = {"M": M, "N": N, "K": K, "count": cnt, "floor_us": N * K * 2 / bw * 1e6}
        for lib in ("cublas", "cublaslt"):
            torch.backends.cuda.preferred_blas_library(lib)
            row[lib + "_us"] = time_graph(lambda x=x, w=w: F.linear(x, w))
            tot[lib] += row[lib + "_us"] * cnt
        torch.backends.cuda.preferred_blas_library("cublas")
        tot["floor"] += row["floor_us"] * cnt
        res.append(row)
        print(
            f"M={M:4d} N={N:6d} K={K:6d} x{cnt:3d}: floor {row['floor_us']:7.1f} "
            f"cublas {row['cublas_us']:7.1f} lt {row['cublaslt_us']:7.1f}",
            flush=True,
        )
    print(
        f"M={M}: step totals (ms) floor {tot['floor'] / 1e3:.2f} cublas {tot['cublas'] / 1e3:.2f} "
        f"cublaslt {tot['cublaslt'] / 1e3:.2f}",
        flush=True,
    )
with open(f"{out}/gemm_probe.json", "w") as fh:
    json.dump(res, fh, indent=1)
