"""Triton kernel of ``causal_conv1d_update`` (``ops.conv``): the speculative window's conv in one launch.

One program per (row, block of channels) computes every window token's output straight from the slot's conv
state and the window's inputs (W loads per output, no read-back of what it writes) and records the row's conv
inputs in ``scratch`` for ``conv_commit``, exactly as the PyTorch reference does: padding rows (slot -1) read
no state, record their inputs and output zeros. The window length is bounded by the scratch width, so the
token and tap loops are unrolled.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _conv_update_kernel(x, state, weight, bias, slots, cu, scratch, y, C, sx, N, S0, S1, HAS_BIAS: tl.constexpr,
                        SPLIT: tl.constexpr, W: tl.constexpr, TMAX: tl.constexpr, BLOCK_C: tl.constexpr):  # fmt: skip
    b = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = c < C
    slot = tl.load(slots + b)
    live = slot >= 0
    safe = tl.maximum(slot, 0).to(tl.int64)
    st = tl.load(cu + b).to(tl.int64)
    ln = tl.load(cu + b + 1).to(tl.int64) - st
    srow = scratch + b.to(tl.int64) * (W - 1 + TMAX) * C
    for p in tl.static_range(W - 1):
        v = tl.load(state + (safe * (W - 1) + p) * C + c, mask=cm & live, other=0.0)
        tl.store(srow + p * C + c, v, mask=cm)
    for i in tl.static_range(TMAX):
        v = tl.load(x + (st + i) * sx + c, mask=cm & (i < ln), other=0.0)
        tl.store(srow + (W - 1 + i) * C + c, v, mask=cm)
    for t in tl.static_range(TMAX):
        acc = tl.zeros([BLOCK_C], tl.float32)
        for w in tl.static_range(W):
            if t + w < W - 1:
                v = tl.load(state + (safe * (W - 1) + t + w) * C + c, mask=cm & live, other=0.0)
            else:
                v = tl.load(x + (st + t + w - (W - 1)) * sx + c, mask=cm & (t + w - (W - 1) < ln), other=0.0)
            acc += v.to(tl.float32) * tl.load(weight + c * W + w, mask=cm, other=0.0).to(tl.float32)
        if HAS_BIAS:
            acc += tl.load(bias + c, mask=cm, other=0.0).to(tl.float32)
        out = tl.where(live, acc / (1.0 + tl.exp(-acc)), 0.0)
        n = st + t
        if SPLIT:  # three channel ranges, each its own contiguous [N, width] block of y
            off = tl.where(c < S0, n * S0 + c, tl.where(c < S1, N * S0 + n * (S1 - S0) + c - S0,
                                                           N * S1 + n * (C - S1) + c - S1))  # fmt: skip
        else:
            off = n * C + c
        tl.store(y + off, out.to(y.dtype.element_ty), mask=cm & (t < ln))


def conv_update_triton(x, conv_state, weight, bias, slots, cu_seqlens, scratch, split=None):
    """The kernel behind ``causal_conv1d_update`` (same arguments, already checked there). With ``split``
    (three widths) the outputs are three contiguous [N, width] tensors written in place, no copy."""
    N, C = x.shape
    W = weight.shape[1]
    B = slots.shape[0]
    y = torch.empty(N * C, dtype=x.dtype, device=x.device)
    S0, S1 = (split[0], split[0] + split[1]) if split else (0, 0)
    out = (y[: N * S0].view(N, S0), y[N * S0 : N * S1].view(N, S1 - S0), y[N * S1 :].view(N, C - S1)) if split else (
        y.view(N, C))  # fmt: skip
    if B == 0:
        return out
    block = min(1024, triton.next_power_of_2(C))
    grid = (B, triton.cdiv(C, block))
    _conv_update_kernel[grid](x, conv_state, weight.contiguous(), weight if bias is None else bias, slots, cu_seqlens,
                              scratch, y, C, x.stride(0), N, S0, S1, HAS_BIAS=bias is not None, SPLIT=split is not None,
                              W=W, TMAX=scratch.shape[1] - (W - 1), BLOCK_C=block)  # fmt: skip
    return out
