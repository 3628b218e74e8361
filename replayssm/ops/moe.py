"""Grouped expert GEMM for sparse MoE layers, with routing that never leaves the device.

``moe_route`` sorts a batch's (token, expert) pairs by expert on the device (argsort + searchsorted: no
``nonzero``, no host read), so a MoE layer can be captured in a CUDA graph. ``moe_gemm`` then runs one
program per (expert, tile of output features) that loops over just its expert's pairs: each used expert's
weights are read once per 16 pairs, unused experts' programs return at once, and the pairs' rows are gathered
from the input in place (no permuted copy of x).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import use_triton
from ._interpreter import INTERPRET
from ._validate import ACT_DTYPES, check_count, check_flags, check_tensor, values_checkable


def moe_route(expert_ids: torch.Tensor, num_experts: int, *, validate: bool = True):
    """expert_ids [N, k] (each token's top-k experts) -> (pair_rows [N*k] int32: the token of every pair in
    expert order, offsets [E+1] int32: expert e's pairs are [offsets[e], offsets[e+1]), order [N*k] int64: the
    flat (token, slot) index of every sorted pair). Stable: ties keep token order.

    ``validate`` (default) reads the ids back and refuses one outside [0, num_experts) (such a pair would fall
    outside every expert's range and be dropped); skipped while a CUDA graph is captured."""
    check_count("num_experts", num_experts, 1)
    check_tensor("expert_ids", expert_ids, ndim=2, dtypes=(torch.int32, torch.int64), contiguous=False)
    check_flags(validate=validate)
    if validate and expert_ids.numel() and values_checkable(expert_ids):
        lo, hi = int(expert_ids.min()), int(expert_ids.max())
        if lo < 0 or hi >= num_experts:
            raise ValueError(f"expert_ids must lie in [0, {num_experts}) (num_experts), got values from {lo} to {hi}")
    N, k = expert_ids.shape
    flat = expert_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    edges = torch.arange(num_experts + 1, device=flat.device, dtype=flat.dtype)
    offsets = torch.searchsorted(flat[order].contiguous(), edges).to(torch.int32)
    return (order // k).to(torch.int32), offsets, order


@triton.jit
def _moe_gemm_kernel(x, w, rows, offsets, out, Nout, K, sx, IDENTITY: tl.constexpr, F32_DOTS: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    e = tl.program_id(0)
    nb = tl.program_id(1)
    lo = tl.load(offsets + e)
    hi = tl.load(offsets + e + 1)
    cols = nb * BLOCK_N + tl.arange(0, BLOCK_N)
    cm = cols < Nout
    kk = tl.arange(0, BLOCK_K)
    wbase = w + e.to(tl.int64) * Nout * K
    for m0 in range(lo, hi, BLOCK_M):
        m = m0 + tl.arange(0, BLOCK_M)
        mm = m < hi
        r = m.to(tl.int64) if IDENTITY else tl.load(rows + m, mask=mm, other=0).to(tl.int64)
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            km = (k0 + kk) < K
            xt = tl.load(x + r[:, None] * sx + (k0 + kk)[None, :], mask=mm[:, None] & km[None, :], other=0.0)
            wt = tl.load(wbase + cols[:, None] * K + (k0 + kk)[None, :], mask=cm[:, None] & km[None, :], other=0.0)
            if F32_DOTS:  # fp32 models, and the interpreter (see ops._interpreter)
                acc += tl.dot(xt.to(tl.float32), tl.trans(wt.to(tl.float32)), input_precision="ieee")
            else:
                acc += tl.dot(xt, tl.trans(wt))
        tl.store(out + m.to(tl.int64)[:, None] * Nout + cols[None, :], acc.to(out.dtype.element_ty),
                 mask=mm[:, None] & cm[None, :])  # fmt: skip


def _check(x, weight, pair_rows, offsets, num_pairs, validate):
    num_pairs = check_count("num_pairs", num_pairs, 0)
    check_flags(validate=validate)
    check_tensor("x", x, ndim=2, dtypes=ACT_DTYPES, contiguous=False)
    if x.stride(1) != 1:
        raise ValueError(f"x must have a unit last stride, got stride {x.stride()}")
    check_tensor("weight", weight, ndim=3, dtypes=(x.dtype,), device=x.device)
    E, Nout, K = weight.shape
    if K != x.shape[1]:
        raise ValueError(f"weight [E, Nout, K] must have K = {x.shape[1]}, got {tuple(weight.shape)}")
    check_tensor("offsets", offsets, shape=(E + 1,), dtypes=(torch.int32,), device=x.device)
    if pair_rows is not None:
        check_tensor("pair_rows", pair_rows, shape=(num_pairs,), dtypes=(torch.int32,), device=x.device)
    elif x.shape[0] < num_pairs:
        raise ValueError(f"x has {x.shape[0]} rows; without pair_rows pair p reads row p, so it needs num_pairs="
                         f"{num_pairs}")  # fmt: skip
    if validate and values_checkable(offsets):
        off = offsets.tolist()
        if off[0] != 0 or off[-1] != num_pairs or any(a > b for a, b in zip(off, off[1:])):
            raise ValueError(f"offsets must rise from 0 to num_pairs={num_pairs} (moe_route's), got {off}")
        if pair_rows is not None and num_pairs:
            lo, hi = int(pair_rows.min()), int(pair_rows.max())
            if lo < 0 or hi >= x.shape[0]:
                raise ValueError(f"pair_rows must lie in [0, {x.shape[0]}) (rows of x), got values from {lo} to {hi}")
    return E, Nout, K, num_pairs


def moe_gemm_reference(x, weight, pair_rows, offsets, *, num_pairs: int, validate: bool = True):
    """PyTorch reference of ``moe_gemm`` (same signature); reads the offsets back (not graph-capturable)."""
    E, Nout, _, num_pairs = _check(x, weight, pair_rows, offsets, num_pairs, validate)
    rows = torch.arange(num_pairs, device=x.device) if pair_rows is None else pair_rows.long()
    out = torch.zeros(num_pairs, Nout, dtype=x.dtype, device=x.device)
    off = offsets.tolist()
    for e in range(E):
        if off[e + 1] > off[e]:
            sel = rows[off[e] : off[e + 1]]
            out[off[e] : off[e + 1]] = (x[sel].float() @ weight[e].float().t()).to(x.dtype)
    return out


def moe_gemm(x: torch.Tensor, weight: torch.Tensor, pair_rows: torch.Tensor | None, offsets: torch.Tensor, *,
             num_pairs: int, validate: bool = True, impl: str = "auto"):  # fmt: skip
    """out[p] = x[pair_rows[p]] @ weight[e].T for every pair p of expert e (offsets[e] <= p < offsets[e+1]).

    x: [M, K] (unit last stride); weight: [E, Nout, K] (x's dtype); pair_rows: [num_pairs] int32, or None for
    pair p reading row p of x; offsets: [E+1] int32 from ``moe_route``. Returns [num_pairs, Nout] in x's dtype,
    accumulated in fp32. Mutates nothing. ``validate`` (default) reads ``offsets`` and ``pair_rows`` back and refuses
    offsets that do not rise from 0 to ``num_pairs`` or rows outside x (the kernel would write past its output or
    read past x); skipped while a CUDA graph is captured. The MoE layer passes ``validate=False``: its routing comes
    from ``moe_route`` on the device, and a read-back would stall every eager step."""
    E, Nout, K, num_pairs = _check(x, weight, pair_rows, offsets, num_pairs, validate)
    if not use_triton(impl, x):
        return moe_gemm_reference(x, weight, pair_rows, offsets, num_pairs=num_pairs, validate=False)
    out = torch.empty(num_pairs, Nout, dtype=x.dtype, device=x.device)
    if num_pairs == 0:
        return out
    bn, bk = min(64, triton.next_power_of_2(Nout)), min(128, max(16, triton.next_power_of_2(K)))
    bn = max(16, bn)
    rows = pair_rows if pair_rows is not None else offsets
    _moe_gemm_kernel[(E, triton.cdiv(Nout, bn))](x, weight, rows, offsets, out, Nout, K, x.stride(0),
                                                IDENTITY=pair_rows is None,
                                                F32_DOTS=INTERPRET or x.dtype == torch.float32, BLOCK_M=16,
                                                BLOCK_N=bn, BLOCK_K=bk, num_warps=4)  # fmt: skip
    return out
