"""The staged verify's program order (``verify_prep._order_rank``): a permutation of the batch that keeps the
folding requests out of the last waves and both kinds of request in their own order.

The kernel bits of the order run here through a one-line kernel (every request's rank, as each key-head-0
staging program computes its own); the verify's results under that order are covered by the chain and verify
tests (their batches mix folding and non-folding rows, so the order is not the identity there)."""

import pytest
import torch
import triton.language as tl

from replayssm.ops._gluon import INTERPRET, gl, jit
from replayssm.ops.verify_launch import fold_free_tail, order_layout
from replayssm.ops.verify_prep import _order_rank


@jit
def _ranks_kernel(flags, ranks, B, free_tail, BP: tl.constexpr, OL: tl.constexpr):
    i_b = gl.program_id(0)
    ob = gl.arange(0, BP, layout=OL)
    f_all = gl.load(flags + ob, mask=ob < B, other=0)
    gl.store(ranks + i_b, _order_rank(f_all, ob, B, i_b, free_tail))


def _ranks(flags: torch.Tensor, free_tail: float, warps: int = 1) -> torch.Tensor:
    B = flags.shape[0]
    ranks = torch.full((B,), -1, dtype=torch.int32, device=flags.device)
    BP, layout = order_layout(B, warps)  # the staging kernel runs 1, 2 or 4 warps (prep_warps)
    _ranks_kernel[(B,)](flags, ranks, B, free_tail, BP, layout, num_warps=warps)
    return ranks


def _reference(flags: torch.Tensor, free_tail: float) -> torch.Tensor:
    """The same order in PyTorch: sort by (key, index), key = (rank in its kind + 1/2) / count, folding scaled."""
    f = flags.cpu() != 0
    i_f = (torch.cumsum(f.int(), 0) - f.int()).float()
    i_n = (torch.cumsum((~f).int(), 0) - (~f).int()).float()
    nf = torch.clamp(f.sum().float(), min=1.0)
    nn = torch.clamp((~f).sum().float(), min=1.0)
    s = torch.clamp(1.0 - torch.tensor(free_tail, dtype=torch.float32) / nn, min=0.5)
    key = torch.where(f, (i_f + 0.5) * (s / nf), (i_n + 0.5) / nn)
    order = sorted(range(len(f)), key=lambda b: (key[b].item(), b))
    ranks = torch.empty(len(f), dtype=torch.int32)
    ranks[order] = torch.arange(len(f), dtype=torch.int32)
    return ranks


@pytest.mark.parametrize("B", [1, 5, 37, 64])
@pytest.mark.parametrize("free_tail", [0.0, 3.0, 12.4, 100.0])
@pytest.mark.parametrize("warps", [1, 4])
def test_order_is_a_permutation_with_no_fold_in_the_tail(B, free_tail, warps, device):
    g = torch.Generator().manual_seed(B)
    flags = (torch.rand(B, generator=g) < 0.3).int().to(device)
    flags[0] = 1 if B > 1 else flags[0]  # at least one folding request where there is room for both kinds
    ranks = _ranks(flags, free_tail, warps).cpu()
    assert torch.equal(torch.sort(ranks).values, torch.arange(B, dtype=torch.int32))
    if INTERPRET:  # IEEE division, as PyTorch's; a GPU's fp32 division may round a tied key the other way
        assert torch.equal(ranks, _reference(flags, free_tail))
    f = flags.cpu() != 0
    for kind in (f, ~f):
        r = ranks[kind]
        assert torch.equal(r, torch.sort(r).values), "each kind keeps its own order"
    if f.any():
        after_last_fold = int((ranks > ranks[f].max()).sum())
        assert after_last_fold >= min(free_tail, (~f).sum().item() / 2) - 0.5, "the order's tail is free of folds"


def test_all_or_no_folding_requests_keep_their_order(device):
    for value in (0, 1):
        flags = torch.full((19,), value, dtype=torch.int32, device=device)
        assert torch.equal(_ranks(flags, 5.0).cpu(), torch.arange(19, dtype=torch.int32))


def test_the_free_tail_is_a_wave_and_a_half_of_requests_three_waves_at_plain_decode():
    cpu = torch.device("cpu")  # one SM: a wave is 4 programs
    assert fold_free_tail(2, cpu) == pytest.approx(3.0) and fold_free_tail(2, cpu, BT=4) == pytest.approx(3.0)
    assert fold_free_tail(64, cpu) == pytest.approx(1.5 * 4 / 64)
    assert fold_free_tail(64, cpu, BT=1) == pytest.approx(3.0 * 4 / 64)
