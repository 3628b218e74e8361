"""Can the GDN state streaming hide under GEMMs? A two-stream concurrency probe at the 27B shapes (issue 15).

At the peak point (replay, C=256, T=4: 1,024 rows) a step is 71 ms of GEMMs (compute-bound, ~92% of the measured
bf16 peak) and ~33 ms of memory-bound work, 18 ms of it GDN. A two-micro-batch step (half the requests' GEMMs while
the other half's GDN layers stream their checkpoints) could hide part of the second under the first, if the two kinds
of kernels share the GPU. This probe measures how much they do, before any engine work:

- graph A: the GEMMs of LAYERS GDN decoder layers at M rows (in_proj 5120->16480, out_proj 6144->5120, MLP gate_up
  5120->34816, down 17408->5120; distinct weights per layer), at M = B*T and at 2*M (does splitting cost GEMM
  efficiency?), for each SM carveout of the GEMMs (torch._C._set_sm_carveout_experimental);
- graph B: the bench's ReplayStep (verify + commit + folds, random acceptance) of LAYERS layers at B requests, T=4,
  L=16, H=16, HV=48, K=V=128, bf16;
- A alone, B alone, and A || B (two streams, joined every repetition).

A timing probe, not a correctness check: the GDN step's exactness is gated elsewhere (bench kernels, tests/gpu).
"""

import json
import os
import sys

sys.path.insert(0, os.getcwd())
import torch

from replayssm.bench.steps import ReplayStep, make_case
from replayssm.bench.timing import capture
from replayssm.ops import GDNShape

LAYERS = int(os.environ.get("LAYERS", "8"))
B = int(os.environ.get("B", "128"))
T, L = 4, 16
M = B * T
dev, bf = "cuda", torch.bfloat16
SHAPES = [(5120, 16480), (6144, 5120), (5120, 34816), (17408, 5120)]
W = [[torch.randn(k, n, device=dev, dtype=bf) * 0.02 for k, n in SHAPES] for _ in range(LAYERS)]


def gemm_fn(rows):
    x = {k: torch.randn(rows, k, device=dev, dtype=bf) for k, _ in SHAPES}
    o = [[torch.empty(rows, n, device=dev, dtype=bf) for _, n in SHAPES] for _ in range(LAYERS)]

    def run():
        for layer in range(LAYERS):
            for i, (k, _n) in enumerate(SHAPES):
                torch.mm(x[k], W[layer][i], out=o[layer][i])

    return run


def launch(items, main) -> None:
    """One repetition: every (graph, stream) of ``items`` launched after ``main``'s work, then joined into it."""
    for g, s in items:
        s.wait_stream(main)
        with torch.cuda.stream(s):
            g.replay()
    for _, s in items:
        main.wait_stream(s)


def timed(items, reps=30):
    """ms per repetition of launching every (graph, stream) of ``items`` together, joined each repetition."""
    main = torch.cuda.current_stream()
    for _ in range(3):
        launch(items, main)
    torch.cuda.synchronize()
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record(main)
    for _ in range(reps):
        launch(items, main)
    t1.record(main)
    torch.cuda.synchronize()
    return t0.elapsed_time(t1) / reps


geo = GDNShape(16, 48, 128, 128)
case = make_case(geo, B, T, L, LAYERS, bf, accept="random", seed=0, device=dev)
step = ReplayStep.build(case)
for _ in range(L):  # real records in the rings
    step()
g_gdn = capture(step)
s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
res = {"B": B, "T": T, "L": L, "layers": LAYERS, "M": M, "gpu": torch.cuda.get_device_name(), "rows": []}
t_gdn = timed([(g_gdn, s2)])
print(f"GDN replay step alone: {t_gdn:.3f} ms ({t_gdn / LAYERS * 1e3:.1f} us a layer)", flush=True)
res["gdn_ms"] = t_gdn
for carve in (0, 16, 32, 48):
    torch._C._set_sm_carveout_experimental(carve or None)
    g_gemm = capture(gemm_fn(M))
    g_gemm2 = capture(gemm_fn(2 * M))
    torch._C._set_sm_carveout_experimental(None)
    t_gemm, t_gemm2 = timed([(g_gemm, s1)]), timed([(g_gemm2, s1)])
    t_both = timed([(g_gemm, s1), (g_gdn, s2)])
    t_both_r = timed([(g_gdn, s2), (g_gemm, s1)])  # the GDN launched first
    hidden = (t_gemm + t_gdn - t_both) / t_gdn
    flops = 2 * M * sum(k * n for k, n in SHAPES) * LAYERS
    row = {
        "carveout": carve,
        "gemm_ms": t_gemm,
        "gemm_2M_ms": t_gemm2,
        "both_ms": t_both,
        "both_gdn_first_ms": t_both_r,
        "gdn_hidden": hidden,
        "gemm_tflops": flops / t_gemm / 1e9,
        "gemm_2M_tflops": 2 * flops / t_gemm2 / 1e9,
    }
    res["rows"].append(row)
    print(
        f"carveout {carve:2d}: GEMMs {t_gemm:.3f} ms ({row['gemm_tflops']:.0f} TF/s), at 2M {t_gemm2:.3f} "
        f"({row['gemm_2M_tflops']:.0f} TF/s); A||B {t_both:.3f} ms (GDN first {t_both_r:.3f}) "
        f"vs A+B {t_gemm + t_gdn:.3f}: {hidden:.0%} of the GDN "
        f"hidden; two halves in sequence {2 * t_gemm:.3f} vs one 2M {t_gemm2:.3f}",
        flush=True,
    )
    del g_gemm, g_gemm2
with open(os.path.join(os.environ.get("OUT", "."), "overlap_probe.json"), "w") as fh:
    json.dump(res, fh, indent=1)
