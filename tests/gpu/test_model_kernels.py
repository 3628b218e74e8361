"""The model-step kernels of issue 15 on the GPU at Qwen3.5-27B / 35B-A3B shapes, against their references,
eagerly and replayed from a CUDA graph."""

import pytest
import torch
import torch.nn.functional as F

from replayssm.ops.conv import causal_conv1d_update, conv_commit
from replayssm.ops.moe import moe_gemm, moe_route
from replayssm.ops.norms import add_rms_norm, rms_norm, rms_norm_gated, silu_mul
from replayssm.ops.paged_attention import paged_attention
from replayssm.ops.qk_norm_rope import qk_norm_rope, qk_norm_rope_kv
from replayssm.state.kv import KVCache

DEV, DT = "cuda", torch.bfloat16
# bf16 outputs: the kernels round where the references round; the sums inside differ in order only.
BOUND = 2e-2


def _err(a, b):
    return ((a.float() - b.float()).abs() / (1 + b.float().abs())).max().item()


def test_norms_and_activations_at_27b_widths():
    g = torch.Generator(device=DEV).manual_seed(0)
    x, r = (torch.randn(64, 5120, device=DEV, generator=g).to(DT) for _ in range(2))
    w = (torch.randn(5120, device=DEV, generator=g) * 0.1).to(DT)
    assert _err(rms_norm(x, w, eps=1e-6), rms_norm(x, w, eps=1e-6, impl="reference")) < BOUND
    (h, y), (h_r, y_r) = (add_rms_norm(x, r, w, eps=1e-6, impl=i) for i in ("auto", "reference"))
    assert torch.equal(h, h_r) and _err(y, y_r) < BOUND
    o = torch.randn(64, 48, 128, device=DEV, generator=g).to(DT)
    qkvz = torch.randn(64, 10240 + 48 * 128, device=DEV, generator=g).to(DT)
    z = qkvz[:, 10240:].view(64, 48, 128)
    wn = torch.rand(128, device=DEV, generator=g).to(DT)
    assert _err(rms_norm_gated(o, z, wn, eps=1e-6), rms_norm_gated(o, z, wn, eps=1e-6, impl="reference")) < BOUND
    gu = torch.randn(64, 2 * 17408, device=DEV, generator=g).to(DT)
    assert _err(silu_mul(gu), silu_mul(gu, impl="reference")) < BOUND
    qkv = torch.randn(64, (48 + 8) * 256, device=DEV, generator=g).to(DT)
    q = qkv[:, : 48 * 256].view(64, 24, 512)[..., :256]
    cos, sin = (f(torch.rand(64, 64, device=DEV, generator=g) * 6) for f in (torch.cos, torch.sin))
    wq = (torch.randn(256, device=DEV, generator=g) * 0.1).to(DT)
    assert _err(qk_norm_rope(q, wq, cos, sin, eps=1e-6), qk_norm_rope(q, wq, cos, sin, eps=1e-6,
                                                                    impl="reference")) < BOUND  # fmt: skip


@pytest.mark.parametrize("B,T", [(8, 4), (64, 4), (8, 1)])
def test_conv_update_and_commit_at_27b_channels(B, T):
    g = torch.Generator(device=DEV).manual_seed(B + T)
    C, S, NL = 10240, B + 4, 3
    wide = torch.randn(B * T, C + 6144, device=DEV, generator=g).to(DT)
    state = torch.randn(NL, S, 3, C, device=DEV, generator=g).to(DT)
    weight = torch.randn(C, 4, device=DEV, generator=g).to(DT)
    slots = torch.randperm(S, generator=g, device=DEV)[:B].to(torch.int32)
    slots[2] = -1
    cu = torch.arange(0, B * T + 1, T, dtype=torch.int32, device=DEV)
    out = []
    for impl in ("auto", "reference"):
        scratch = torch.empty(NL, B, 3 + T, C, dtype=DT, device=DEV)
        ys = [causal_conv1d_update(wide[:, :C], state[i], weight, None, slots, cu, scratch[i], impl=impl,
                                   split=(2048, 2048, 6144)) for i in range(NL)]  # fmt: skip
        out.append((torch.cat([torch.cat(y, 1) for y in ys]), scratch))
    assert torch.equal(out[0][1], out[1][1]) and _err(out[0][0], out[1][0]) < BOUND
    n = torch.randint(1, T + 1, (B,), generator=g, device=DEV).to(torch.int32)
    committed = []
    for impl in ("auto", "reference"):
        st = state.clone()
        conv_commit(st, out[0][1], slots, n, impl=impl)
        committed.append(st)
    assert torch.equal(committed[0], committed[1]) and not torch.equal(committed[0], state)


@pytest.mark.parametrize("B,T", [(1, 1), (8, 4), (64, 4)])
def test_paged_attention_at_27b_heads(B, T):
    """24 query heads over 4 KV heads of 256, pages of 64, rows of 0..1000 committed tokens, dynamic pages."""
    g = torch.Generator(device=DEV).manual_seed(B)
    kv = KVCache(1, B + 2, 1100, 4, 256, dtype=DT, device=DEV, num_pages=(B + 2) * 18)
    lens = torch.randint(0, 1000, (B,), generator=g, device=DEV)
    lens[0] = 0
    slots = list(range(B + 2))[2:]
    kv.reserve(slots, [int(n) + T for n in lens])
    for s, n in zip(slots, lens.tolist()):
        idx = kv.token_index(torch.tensor([s], device=DEV), torch.arange(n + T, device=DEV))
        kv.write(0, torch.randn(n + T, 4, 256, device=DEV, generator=g).to(DT),
                 torch.randn(n + T, 4, 256, device=DEV, generator=g).to(DT), idx)  # fmt: skip
    q = torch.randn(B * T, 24, 256, device=DEV, generator=g).to(DT)
    gate = torch.randn(B * T, 24, 512, device=DEV, generator=g).to(DT)[..., 256:]  # the fused projection's gate
    rows = torch.tensor(slots, device=DEV)
    args = (q, kv.k[0], kv.v[0], kv.block_table, rows, lens.long())
    for gt in (None, gate):
        ref = paged_attention(*args, T=T, scale=256**-0.5, gate=gt, impl="reference")
        out = paged_attention(*args, T=T, scale=256**-0.5, gate=gt)
        assert _err(out, ref) < BOUND
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = paged_attention(*args, T=T, scale=256**-0.5, gate=gt)
        graph.replay()
        assert torch.equal(captured, out)


def test_qk_norm_rope_kv_at_27b_heads():
    """24 query and 4 KV heads of 256 from one fused projection: bitwise the two qk_norm_rope launches and the
    cache writes."""
    g = torch.Generator(device=DEV).manual_seed(3)
    N, slots = 32, 4096
    qkv = torch.randn(N, (48 + 8) * 256, device=DEV, generator=g).to(DT)
    q = qkv[:, : 48 * 256].view(N, 24, 512)[..., :256]
    k, v = (qkv[:, (48 + 4 * i) * 256 : (52 + 4 * i) * 256].view(N, 4, 256) for i in (0, 1))
    cos, sin = (f(torch.rand(N, 64, device=DEV, generator=g) * 6) for f in (torch.cos, torch.sin))
    wq, wk = ((torch.randn(256, device=DEV, generator=g) * 0.1).to(DT) for _ in range(2))
    kc, vc = (torch.randn(slots, 4, 256, device=DEV, generator=g).to(DT) for _ in range(2))
    index = torch.randperm(slots, device=DEV, generator=g)[:N]
    want_k, want_v = kc.clone(), vc.clone()
    want_k[index], want_v[index] = qk_norm_rope(k, wk, cos, sin, eps=1e-6), v
    y = qk_norm_rope_kv(q, k, v, wq, wk, cos, sin, kc, vc, index, eps=1e-6)
    assert torch.equal(y, qk_norm_rope(q, wq, cos, sin, eps=1e-6))
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)


@pytest.mark.parametrize("N", [1, 32, 512])
def test_moe_route_and_gemm_at_35b_a3b_shape_in_a_graph(N):
    """256 experts, top 8, D=2048, I=512: the routed MLP eagerly and replayed from a CUDA graph."""
    g = torch.Generator(device=DEV).manual_seed(N)
    E, k, D, I = 256, 8, 2048, 512
    x = torch.randn(N, D, device=DEV, generator=g).to(DT)
    gu = (torch.randn(E, 2 * I, D, device=DEV, generator=g) * D**-0.5).to(DT)
    down = (torch.randn(E, D, I, device=DEV, generator=g) * I**-0.5).to(DT)
    ids = torch.topk(torch.randn(N, E, device=DEV, generator=g), k).indices

    def routed(impl="auto"):
        rows, offsets, order = moe_route(ids, E)
        h = moe_gemm(x, gu, rows, offsets, num_pairs=N * k, impl=impl)
        y = moe_gemm(F.silu(h[:, :I]) * h[:, I:], down, None, offsets, num_pairs=N * k, impl=impl)
        return torch.empty_like(y).index_copy_(0, order, y)

    eager, ref = routed(), routed("reference")
    assert _err(eager, ref) < BOUND
    routed()  # warm
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = routed()
    graph.replay()
    assert torch.equal(captured, eager)


def test_gemm_library_switches_for_its_rows_and_restores():
    from replayssm.models.gemm import LT_ROWS, gemm_library

    before = torch.backends.cuda.preferred_blas_library()
    x, w = torch.randn(32, 5120, device=DEV, dtype=DT), torch.randn(1024, 5120, device=DEV, dtype=DT)
    ref = F.linear(x, w)
    with gemm_library(32, torch.device(DEV)):
        assert torch.backends.cuda.preferred_blas_library() == torch._C._BlasBackend.Cublaslt
        assert _err(F.linear(x, w), ref) < BOUND
    assert torch.backends.cuda.preferred_blas_library() == before
    with pytest.raises(RuntimeError, match="inside"), gemm_library(LT_ROWS[0], torch.device(DEV)):
        raise RuntimeError("inside")
    assert torch.backends.cuda.preferred_blas_library() == before
    with gemm_library(8, torch.device(DEV)):
        assert torch.backends.cuda.preferred_blas_library() == before
