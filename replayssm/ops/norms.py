"""Fused small ops of the model step: RMSNorm (optionally with the residual add), the GDN output norm, SiLU-mul.

Each replaces a chain of 5-10 PyTorch kernels with one launch, and keeps the PyTorch chain's roundings: every
intermediate that the reference rounds to the activation dtype is rounded at the same place in the kernel, so
the two differ only in the order of the mean's summation. References have the same signatures; on CPU
tensors the public ops run them (``impl="auto"``), so CPU results are exactly the unfused model's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from ._common import use_triton
from ._validate import ACT_DTYPES, check_eps, check_flags, check_tensor


@triton.jit
def _rms_norm_kernel(x, res, w, y, h, D, sx, sr, eps, HAS_RES: tl.constexpr, ZERO_CENTRED: tl.constexpr,
                     BLOCK: tl.constexpr):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    m = offs < D
    xv = tl.load(x + row * sx + offs, mask=m, other=0.0).to(tl.float32)
    if HAS_RES:  # the residual stream h = x + res, rounded like the reference's add, then normalised
        hv = (xv + tl.load(res + row * sr + offs, mask=m, other=0.0).to(tl.float32)).to(h.dtype.element_ty)
        tl.store(h + row * D + offs, hv, mask=m)
        xv = hv.to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(xv * xv, 0) / D + eps)
    wv = tl.load(w + offs, mask=m, other=0.0).to(tl.float32)
    if ZERO_CENTRED:
        wv = 1.0 + wv
    tl.store(y + row * D + offs, (xv * inv * wv).to(y.dtype.element_ty), mask=m)


def _rows(x: torch.Tensor, name: str) -> torch.Tensor:
    """x [..., D] with unit last stride -> a 2-D view [R, D] (row stride free)."""
    check_tensor(name, x, dtypes=ACT_DTYPES, contiguous=False)
    if x.stride(-1) != 1:
        raise ValueError(f"{name} must have a unit last stride, got stride {x.stride()}")
    try:
        return x.view(-1, x.shape[-1])
    except RuntimeError:
        return x.reshape(-1, x.shape[-1])


def _check_norm(x, weight, residual):
    rows = _rows(x, "x")
    check_tensor("weight", weight, shape=(x.shape[-1],), dtypes=ACT_DTYPES, device=x.device)
    if residual is not None:
        _rows(residual, "residual")
        if residual.shape != x.shape or residual.dtype != x.dtype or residual.device != x.device:
            raise ValueError(f"residual must match x {tuple(x.shape)} {x.dtype}, got {tuple(residual.shape)} "
                             f"{residual.dtype} on {residual.device}")  # fmt: skip
    return rows


def rms_norm_reference(x, weight, *, eps: float, zero_centred: bool = True):
    """PyTorch reference of ``rms_norm`` (same signature)."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    w = (1.0 + weight.float()) if zero_centred else weight.float()
    return (y * w).to(x.dtype)


def add_rms_norm_reference(x, residual, weight, *, eps: float, zero_centred: bool = True):
    """PyTorch reference of ``add_rms_norm`` (same signature)."""
    h = x + residual
    return h, rms_norm_reference(h, weight, eps=eps, zero_centred=zero_centred)


def _launch_norm(x, residual, weight, eps, zero_centred):
    rows = _check_norm(x, weight, residual)
    R, D = rows.shape
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    h = torch.empty_like(y) if residual is not None else y
    res = _rows(residual, "residual") if residual is not None else rows
    if R:
        block = triton.next_power_of_2(D)
        _rms_norm_kernel[(R,)](rows, res, weight, y, h, D, rows.stride(0), res.stride(0), eps,
                               HAS_RES=residual is not None, ZERO_CENTRED=zero_centred, BLOCK=block,
                               num_warps=min(16, max(1, block // 512)))  # fmt: skip
    return h, y


def rms_norm(x: torch.Tensor, weight: torch.Tensor, *, eps: float, zero_centred: bool = True, impl: str = "auto"):
    """RMSNorm over the last dim: ``x / rms(x) * (1 + weight)`` (``zero_centred``, Qwen3-Next/3.5) or ``* weight``,
    computed in fp32 and rounded once. x: [..., D] (unit last stride); weight: [D]. Returns a new [..., D]
    tensor in x's dtype. Mutates nothing."""
    check_flags(zero_centred=zero_centred)
    check_eps(eps)
    if not use_triton(impl, x):
        _check_norm(x, weight, None)
        return rms_norm_reference(x, weight, eps=eps, zero_centred=zero_centred)
    return _launch_norm(x, None, weight, eps, zero_centred)[1]


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, *, eps: float,
                 zero_centred: bool = True, impl: str = "auto"):  # fmt: skip
    """The residual add and the next norm in one pass: ``h = x + residual`` (rounded to the dtype), then
    ``rms_norm(h)``. Returns (h, normed h), both new tensors. Mutates nothing."""
    check_flags(zero_centred=zero_centred)
    check_eps(eps)
    if not use_triton(impl, x):
        _check_norm(x, weight, residual)
        return add_rms_norm_reference(x, residual, weight, eps=eps, zero_centred=zero_centred)
    return _launch_norm(x, residual, weight, eps, zero_centred)


@triton.jit
def _rms_norm_gated_kernel(x, z, w, y, R, HV, V, sz_row, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """``ROWS`` (token, value head) rows of V per program: a head's row alone is too small to keep a program busy."""
    row = (tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS))[:, None]  # [ROWS, 1]
    n, hv = row // HV, row % HV
    offs = tl.arange(0, BLOCK)[None, :]
    m = (offs < V) & (row < R)
    xv = tl.load(x + row * V + offs, mask=m, other=0.0).to(tl.float32)
    zv = tl.load(z + n * sz_row + hv * V + offs, mask=m, other=0.0).to(tl.float32)
    wv = tl.load(w + offs, mask=offs < V, other=0.0)
    inv = 1.0 / tl.sqrt(tl.sum(xv * xv, 1)[:, None] / V + eps)
    normed = (xv * inv).to(wv.dtype)  # the reference rounds the norm, then the weight product, to the dtype
    wy = (wv.to(tl.float32) * normed.to(tl.float32)).to(wv.dtype).to(tl.float32)
    silu = zv / (1.0 + tl.exp(-zv))
    tl.store(y + row * V + offs, (wy * silu).to(y.dtype.element_ty), mask=m)


def rms_norm_gated_reference(x, z, weight, *, eps: float):
    """PyTorch reference of ``rms_norm_gated`` (same signature)."""
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return (weight * y * F.silu(z.float())).to(x.dtype)


def rms_norm_gated(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, *, eps: float, impl: str = "auto"):
    """The GDN output norm per value head: ``weight * (x / rms(x)) * silu(z)``.

    x: [N, HV, V] contiguous; z: [N, HV, V] with unit strides inside a row (the row stride is free: z may
    be a slice of a fused projection); weight: [V] (x's dtype). Returns [N, HV, V] in x's dtype."""
    check_eps(eps)
    check_tensor("x", x, ndim=3, dtypes=ACT_DTYPES)
    check_tensor("z", z, shape=tuple(x.shape), dtypes=(x.dtype,), device=x.device, contiguous=False)
    check_tensor("weight", weight, shape=(x.shape[2],), dtypes=(x.dtype,), device=x.device)
    N, HV, V = x.shape
    if z.stride(2) != 1 or z.stride(1) != V:
        raise ValueError(f"z must be contiguous within a row ([*, {V}, 1] strides), got stride {z.stride()}")
    if not use_triton(impl, x):
        return rms_norm_gated_reference(x, z, weight, eps=eps)
    y = torch.empty_like(x)
    if N:
        block = triton.next_power_of_2(V)
        rows = max(1, min(16, 2048 // block))  # ~2K elements per program: 16 rows of 128, 8 elements a thread
        _rms_norm_gated_kernel[(triton.cdiv(N * HV, rows),)](x, z, weight, y, N * HV, HV, V, z.stride(0), eps,
                                                             ROWS=rows, BLOCK=block)  # fmt: skip
    return y


@triton.jit
def _silu_mul_kernel(gu, y, I, s_row, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = offs < I
    g = tl.load(gu + row * s_row + offs, mask=m, other=0.0).to(tl.float32)
    u = tl.load(gu + row * s_row + I + offs, mask=m, other=0.0).to(tl.float32)
    s = (g / (1.0 + tl.exp(-g))).to(y.dtype.element_ty).to(tl.float32)  # silu rounded, as F.silu in the dtype
    tl.store(y + row * I + offs, (s * u).to(y.dtype.element_ty), mask=m)


def silu_mul_reference(gate_up):
    """PyTorch reference of ``silu_mul`` (same signature)."""
    g, u = gate_up.chunk(2, dim=-1)
    return F.silu(g) * u


def silu_mul(gate_up: torch.Tensor, *, impl: str = "auto"):
    """The gated MLP's activation: gate_up [R, 2I] (gate | up, unit last stride) -> silu(gate) * up [R, I]."""
    rows = _rows(gate_up, "gate_up")
    if gate_up.shape[-1] % 2:
        raise ValueError(f"gate_up must have an even last dim (gate | up), got {tuple(gate_up.shape)}")
    if not use_triton(impl, gate_up):
        return silu_mul_reference(gate_up)
    R, I2 = rows.shape
    y = torch.empty(*gate_up.shape[:-1], I2 // 2, dtype=gate_up.dtype, device=gate_up.device)
    if R:
        block = min(1024, triton.next_power_of_2(I2 // 2))
        _silu_mul_kernel[(R, triton.cdiv(I2 // 2, block))](rows, y, I2 // 2, rows.stride(0), BLOCK=block)
    return y
