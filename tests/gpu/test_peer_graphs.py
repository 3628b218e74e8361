"""On the GPU: every peer step captures into a CUDA graph and replays exactly like eager calls, and the
kernel bench runs end to end with both releases at a small geometry (``pytest -m gpu tests/gpu/test_peer_graphs.py``;
the kernel files as tests/helpers/peers.py finds them)."""

import pytest
import torch

from replayssm.bench.kernels import KernelBenchConfig, run_kernel_bench
from replayssm.bench.peers.sglang import ROLES, load_release
from replayssm.bench.steps import make_case
from replayssm.bench.timing import capture
from replayssm.ops import GDNShape

GEO = GDNShape(H=2, HV=4, K=64, V=64)


@pytest.fixture(scope="module", params=["0.5.16", "0.5.23"])
def kernels(request, sglang_root):
    return load_release(request.param, sglang_root)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "role, T", [("recurrent", 4), ("replay", 4), ("replay", 2), ("ring_decode", 1), ("recurrent_decode", 1)]
)
def test_graph_replays_like_eager(kernels, role, T):
    L, B, steps = 16, 5, 24
    accepted = torch.ones(B, dtype=torch.int32, device="cuda")

    def build():
        case = make_case(GEO, B, T, L, 2, torch.bfloat16, seed=3, device="cuda").with_accept(lambda: accepted)
        return case, ROLES[kernels.version][role].build(case, kernels=kernels)

    (case_e, eager), (case_g, graphed) = build(), build()
    capture(build()[1])  # compiles every kernel on a throwaway copy, so the real capture runs nothing
    graph = capture_without_warmup(graphed)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(steps):
        accepted.copy_(torch.randint(1, T + 1, (B,), device="cuda", generator=gen, dtype=torch.int32))
        for name in ("q", "k", "v", "a", "b", "mixed_qkv"):
            fresh = torch.randn(case_e.inputs[name].shape, device="cuda", generator=gen).to(torch.bfloat16)
            case_e.inputs[name].copy_(fresh)
            case_g.inputs[name].copy_(fresh)
        eager()
        graph.replay()
        for layer in range(case_e.layers):
            assert torch.equal(eager.outputs[layer], graphed.outputs[layer])
            assert torch.equal(eager.committed(layer), graphed.committed(layer))


def capture_without_warmup(step):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    torch.cuda.synchronize()
    return g


@pytest.mark.gpu
def test_bench_runs_with_both_releases(sglang_root, tmp_path):
    peers = {v: load_release(v, sglang_root) for v in ("0.5.16", "0.5.23")}
    cfg = KernelBenchConfig(geo=GEO, windows=(1, 4), rings=(16,), batches=(8,), min_working_set=1 << 20,
                            peers=tuple(peers), target_ms=5.0)  # fmt: skip
    payload = run_kernel_bench(cfg, tmp_path, peers=peers)
    for row in payload["points"]:
        assert row["refused"] == [], row["gates"]
        for impl in ("replayssm", "sglang-0.5.16", "sglang-0.5.23"):
            assert row[f"{impl}/replay_random_us"] > 0 and f"{impl}/fold_us_per_record" in row
    for row in payload["points"]:
        assert "sglang-0.5.23/recurrent_us" in row and "sglang-0.5.16/recurrent_us" in row
