"""Triton kernels of ``causal_conv1d_update`` and ``conv_commit`` (``ops.conv``): the speculative window's conv
and its rollback, one launch each.

``_conv_update_kernel``: one program per (row, block of channels) computes every window token's output straight
from the slot's conv state and the window's inputs and records the row's conv inputs in ``scratch`` for
``conv_commit``, exactly as the PyTorch reference does: padding rows (slot -1) read no state, record their
inputs and output zeros. Every load is issued before the first store (a compiler may not move a load above a
store that could alias it, so stores in between would make each load wait a round trip of its own); a tap's
products are summed in tap order, as the reference does.

``_conv_commit_kernel``: one program per (row, layer, block of channels) copies the W-1 recorded inputs that end
at the row's last accepted token from ``scratch`` into the slot's conv state; padding rows write nothing.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import sm_count

_VEC = 8  # channels per thread: one 16-byte vector of 16-bit activations


@triton.jit
def _conv_update_kernel(x, state, weight, bias, slots, cu, scratch, y, C, sx, N, S0, S1, HAS_BIAS: tl.constexpr,
                        SPLIT: tl.constexpr, W: tl.constexpr, TMAX: tl.constexpr, TP2: tl.constexpr,
                        SPAN: tl.constexpr, BLOCK_C: tl.constexpr):  # fmt: skip
    b = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = c < C
    slot = tl.load(slots + b)
    live = slot >= 0
    safe = tl.maximum(slot, 0).to(tl.int64)
    st = tl.load(cu + b).to(tl.int64)
    ln = tl.load(cu + b + 1).to(tl.int64) - st
    c2 = c[None, :]
    cm2 = cm[None, :]
    # the row's inputs, state first: [SPAN, BLOCK_C] (SPAN = W-1+TMAX rounded up to a power of two)
    r = tl.arange(0, SPAN)[:, None]
    from_state = r < W - 1
    xi = tl.maximum(r - (W - 1), 0)
    p_state = state + (safe * (W - 1) + tl.minimum(r, W - 2)) * C + c2
    p_x = x + (st + xi) * sx + c2
    rec = tl.where(from_state, tl.load(p_state, mask=cm2 & from_state & live, other=0.0),
                   tl.load(p_x, mask=cm2 & (r >= W - 1) & (xi < ln), other=0.0))  # fmt: skip
    # the taps of every output: tap w of token t is input row t + w
    t = tl.arange(0, TP2)[:, None]  # tokens past TMAX are past every window (t >= ln): masked
    acc = tl.zeros([TP2, BLOCK_C], tl.float32)
    for w in tl.static_range(W):
        rw = t + w
        sw = rw < W - 1
        xw = tl.maximum(rw - (W - 1), 0)
        v = tl.where(sw, tl.load(state + (safe * (W - 1) + tl.minimum(rw, W - 2)) * C + c2, mask=cm2 & sw & live,
                                 other=0.0),
                     tl.load(x + (st + xw) * sx + c2, mask=cm2 & (rw >= W - 1) & (xw < ln), other=0.0))  # fmt: skip
        acc += v.to(tl.float32) * tl.load(weight + c2 * W + w, mask=cm2, other=0.0).to(tl.float32)
    if HAS_BIAS:
        acc += tl.load(bias + c2, mask=cm2, other=0.0).to(tl.float32)
    # stores
    srow = scratch + b.to(tl.int64) * (W - 1 + TMAX) * C
    tl.store(srow + r * C + c2, rec, mask=cm2 & (r < W - 1 + TMAX))
    out = tl.where(live, acc / (1.0 + tl.exp(-acc)), 0.0)
    n = st + t
    if SPLIT:  # three channel ranges, each its own contiguous [N, width] block of y
        off = tl.where(c2 < S0, n * S0 + c2, tl.where(c2 < S1, N * S0 + n * (S1 - S0) + c2 - S0,
                                                       N * S1 + n * (C - S1) + c2 - S1))  # fmt: skip
    else:
        off = n * C + c2
    tl.store(y + off, out.to(y.dtype.element_ty), mask=cm2 & (t < ln))


def _block(B: int, C: int, device) -> tuple[int, int]:
    """(channels per program, warps): 16-byte vectors, as many warps as fill 1024 channels, fewer (smaller
    programs) while the batch leaves the GPU with fewer than two programs per SM."""
    warps = max(1, min(4, triton.next_power_of_2(C) // (32 * _VEC)))
    while warps > 1 and B * triton.cdiv(C, 32 * _VEC * warps) < 2 * sm_count(device):
        warps //= 2
    return 32 * _VEC * warps, warps


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
    tmax = scratch.shape[1] - (W - 1)
    block, warps = _block(B, C, x.device)
    grid = (B, triton.cdiv(C, block))
    _conv_update_kernel[grid](x, conv_state, weight.contiguous(), weight if bias is None else bias, slots, cu_seqlens,
                              scratch, y, C, x.stride(0), N, S0, S1, HAS_BIAS=bias is not None, SPLIT=split is not None,
                              W=W, TMAX=tmax, TP2=triton.next_power_of_2(tmax),
                              SPAN=triton.next_power_of_2(W - 1 + tmax), BLOCK_C=block, num_warps=warps)  # fmt: skip
    return out


@triton.jit
def _conv_commit_kernel(state, scratch, slots, num_accepted, C, s_l, s_s, k_l, k_b, W1: tl.constexpr,
                        W1P: tl.constexpr, BLOCK_C: tl.constexpr):  # fmt: skip
    b = tl.program_id(0)
    layer = tl.program_id(1).to(tl.int64)
    slot = tl.load(slots + b)
    if slot >= 0:
        n = tl.load(num_accepted + b).to(tl.int64)
        c = (tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C))[None, :]
        p = tl.arange(0, W1P)[:, None]
        m = (c < C) & (p < W1)
        kept = tl.load(scratch + layer * k_l + b.to(tl.int64) * k_b + (n + p) * C + c, mask=m)
        tl.store(state + layer * s_l + slot.to(tl.int64) * s_s + p * C + c, kept, mask=m)


def conv_commit_triton(conv_state, scratch, slots, num_accepted):
    """The kernel behind ``conv_commit`` for [NL, S, W-1, C] states and [NL, >=B, W-1+T_max, C] scratch (both
    contiguous in their last two dims; checked there)."""
    NL, _, W1, C = conv_state.shape
    B = slots.shape[0]
    if B == 0 or NL == 0:
        return
    block, warps = _block(B * NL, C, conv_state.device)
    grid = (B, NL, triton.cdiv(C, block))
    _conv_commit_kernel[grid](conv_state, scratch, slots, num_accepted, C, conv_state.stride(0), conv_state.stride(1),
                              scratch.stride(0), scratch.stride(1), W1=W1, W1P=triton.next_power_of_2(W1),
                              BLOCK_C=block, num_warps=warps)  # fmt: skip
