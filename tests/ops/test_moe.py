"""Graph-safe MoE routing and the grouped expert GEMM (kernel in the interpreter on CPU)."""

import pytest
import torch
import torch.nn.functional as F

from replayssm.models.layers import SparseMoE
from replayssm.ops.moe import moe_gemm, moe_route


def test_route_sorts_pairs_by_expert():
    ids = torch.tensor([[3, 0], [0, 2], [3, 1]])
    rows, offsets, order = moe_route(ids, 5)
    assert offsets.tolist() == [0, 2, 3, 4, 6, 6]  # expert 4 has no pair
    assert rows.tolist() == [0, 1, 2, 1, 0, 2]  # stable: tokens in order within an expert
    assert ids.view(-1)[order].tolist() == [0, 0, 1, 2, 3, 3]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("N,E,k", [(1, 8, 2), (37, 6, 3)])  # decode-sized, and experts with > 16 pairs
def test_grouped_gemm_matches_reference_and_dense(N, E, k, dtype):
    g = torch.Generator().manual_seed(N)
    D, Nout = 48, 40  # not multiples of the tiles
    x = torch.randn(N, D, generator=g).to(dtype)
    w = (torch.randn(E, Nout, D, generator=g) * D**-0.5).to(dtype)
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(N)])
    rows, offsets, order = moe_route(ids, E)
    ref = moe_gemm(x, w, rows, offsets, num_pairs=N * k, impl="reference")
    tok, slot = order // k, order % k
    dense = torch.einsum("pd,pod->po", x[tok].float(), w[ids[tok, slot]].float()).to(dtype)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert (ref.float() - dense.float()).abs().max() <= tol
    out = moe_gemm(x, w, rows, offsets, num_pairs=N * k, impl="triton")
    assert (out.float() - ref.float()).abs().max() <= tol
    ident = moe_gemm(ref, w[:, :, :Nout].contiguous(), None, offsets, num_pairs=N * k, impl="triton")
    ident_ref = moe_gemm(ref, w[:, :, :Nout].contiguous(), None, offsets, num_pairs=N * k, impl="reference")
    assert (ident.float() - ident_ref.float()).abs().max() <= tol * 4


def _loop_moe(m: SparseMoE, x):
    """The former per-expert loop (data-dependent indexing), as the semantic reference."""
    probs = F.softmax(m.gate(x), dim=-1, dtype=torch.float32)
    weights, idx = torch.topk(probs, m.top_k, dim=-1)
    weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
    out = torch.zeros_like(x)
    gu, down = m.experts.gate_up_proj, m.experts.down_proj
    for e in range(gu.shape[0]):
        rows, which = (idx == e).nonzero(as_tuple=True)
        if rows.numel():
            g, u = (x[rows] @ gu[e].t()).chunk(2, -1)
            out.index_add_(0, rows, (F.silu(g) * u) @ down[e].t() * weights[rows, which, None])
    return out + torch.sigmoid(m.shared_expert_gate(x)) * m.shared_expert(x)


def test_sparse_moe_matches_the_expert_loop():
    torch.manual_seed(0)
    m = SparseMoE(32, 6, 2, 24, 40, norm_topk=True)
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.2)
    x = torch.randn(9, 32)
    assert torch.allclose(m(x), _loop_moe(m, x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", ["reference", "triton"])
def test_grouped_gemm_refuses_pairs_that_do_not_match_its_routing(impl):
    """An eighth misuse review: num_pairs=4 for 6 routed pairs made the kernel write 6 rows into a 4-row output
    (the interpreter once aborted the process), 8 returned uninitialised rows, -1 and True gave bare torch errors."""
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(3, 16, generator=g), torch.randn(4, 16, 16, generator=g)
    rows, offsets, _ = moe_route(torch.tensor([[0, 3], [1, 3], [2, 0]]), 4)
    cases = [
        (dict(num_pairs=4), r"pair_rows must have shape \(4,\)"),
        (dict(num_pairs=-1), "num_pairs must be an int >= 0, got -1"),
        (dict(num_pairs=True), "num_pairs must be an int >= 0, got True"),
        (dict(num_pairs=6, offsets=offsets.flip(0).contiguous()), "offsets must rise from 0 to num_pairs=6"),
        (dict(num_pairs=6, rows=rows + 5), r"pair_rows must lie in \[0, 3\)"),
        (dict(num_pairs=8, rows=None), "x has 3 rows; without pair_rows pair p reads row p"),
    ]
    for kw, msg in cases:
        r, off = kw.pop("rows", rows), kw.pop("offsets", offsets)
        with pytest.raises(ValueError, match=msg):
            moe_gemm(x, w, r, off, impl=impl, **kw)
    assert torch.equal(moe_gemm(x, w, rows, offsets, num_pairs=6, impl=impl),
                       moe_gemm(x, w, rows, offsets, num_pairs=6, impl=impl, validate=False))  # fmt: skip


def test_route_refuses_an_expert_id_out_of_range():
    """An id >= num_experts fell past every expert's range: its pair was silently dropped."""
    with pytest.raises(ValueError, match=r"expert_ids must lie in \[0, 4\) \(num_experts\), got values from 0 to 4"):
        moe_route(torch.tensor([[0, 4]]), 4)
    with pytest.raises(ValueError, match="num_experts must be an int >= 1"):
        moe_route(torch.tensor([[0, 1]]), 0)
