"""Per-head RMSNorm of queries or keys followed by partial rotary embedding, in one launch.

Qwen3-Next / Qwen3.5 attention normalises q and k per head (zero-centred weight) and then rotates the
first ``r`` dims of every head (non-interleaved, rotate-half style). The reference is the two PyTorch
steps the model ran before, with their roundings: the norm's output is rounded to the dtype, then the
rotation is computed in fp32 and rounded again.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import use_triton
from ._validate import ACT_DTYPES, check_tensor
from .norms import rms_norm_reference


@triton.jit
def _qk_norm_rope_kernel(x, w, cos, sin, y, heads, s_n, s_h, eps, HD: tl.constexpr, R: tl.constexpr,
                         BLOCK: tl.constexpr):  # fmt: skip
    n = tl.program_id(0).to(tl.int64)
    hh = tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    m = offs < HD
    base = x + n * s_n + hh * s_h
    xv = tl.load(base + offs, mask=m, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(xv * xv, 0) / HD + eps)
    wv = 1.0 + tl.load(w + offs, mask=m, other=0.0).to(tl.float32)
    yv = (xv * inv * wv).to(y.dtype.element_ty).to(tl.float32)
    half: tl.constexpr = R // 2
    rot_m = offs < R
    partner = tl.where(offs < half, offs + half, offs - half)
    xp = tl.load(base + partner, mask=rot_m, other=0.0).to(tl.float32)
    wp = 1.0 + tl.load(w + partner, mask=rot_m, other=0.0).to(tl.float32)
    yp = (xp * inv * wp).to(y.dtype.element_ty).to(tl.float32)
    rot = tl.where(offs < half, -yp, yp)
    c = tl.load(cos + n * R + offs, mask=rot_m, other=1.0)
    s = tl.load(sin + n * R + offs, mask=rot_m, other=0.0)
    out = tl.where(rot_m, yv * c + rot * s, yv)
    tl.store(y + (n * heads + hh) * HD + offs, out.to(y.dtype.element_ty), mask=m)


def qk_norm_rope_reference(x, weight, cos, sin, *, eps: float):
    """PyTorch reference of ``qk_norm_rope`` (same signature)."""
    y = rms_norm_reference(x, weight, eps=eps, zero_centred=True)
    r = cos.shape[-1]
    yr, yp = y[..., :r], y[..., r:]
    half = r // 2
    rot = torch.cat([-yr[..., half:], yr[..., :half]], -1)
    out = yr.float() * cos[:, None, :] + rot.float() * sin[:, None, :]
    return torch.cat([out.to(x.dtype), yp], -1)


def qk_norm_rope(x: torch.Tensor, weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, eps: float,
                 impl: str = "auto"):  # fmt: skip
    """x: [N, heads, hd] (unit last stride; the other strides are free, e.g. the query half of a fused
    projection); weight: [hd] (zero-centred norm weight); cos, sin: [N, r] fp32 with r even, r <= hd.
    Returns a new contiguous [N, heads, hd] tensor in x's dtype. Mutates nothing."""
    check_tensor("x", x, ndim=3, dtypes=ACT_DTYPES, contiguous=False)
    N, heads, hd = x.shape
    if x.stride(2) != 1:
        raise ValueError(f"x must have a unit last stride, got stride {x.stride()}")
    check_tensor("weight", weight, shape=(hd,), dtypes=ACT_DTYPES, device=x.device)
    check_tensor("cos", cos, ndim=2, dtypes=(torch.float32,), device=x.device)
    r = cos.shape[1]
    check_tensor("sin", sin, shape=(N, r), dtypes=(torch.float32,), device=x.device)
    if cos.shape[0] != N or r % 2 or r > hd:
        raise ValueError(f"cos must have shape ({N}, r) with r even and <= {hd}, got {tuple(cos.shape)}")
    if not use_triton(impl, x):
        return qk_norm_rope_reference(x, weight, cos, sin, eps=eps)
    y = torch.empty(N, heads, hd, dtype=x.dtype, device=x.device)
    if N:
        _qk_norm_rope_kernel[(N, heads)](x, weight, cos, sin, y, heads, x.stride(0), x.stride(1), eps, HD=hd, R=r,
                                         BLOCK=triton.next_power_of_2(hd))  # fmt: skip
    return y
