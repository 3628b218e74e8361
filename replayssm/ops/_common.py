"""Pieces shared by every GDN op: the recurrent update (Triton and PyTorch), gating, launch config, dispatch.

The recurrent update lives here exactly once per language. ``gdn_recurrent`` (the baseline) and
``gdn_exact_fold`` / the flush path of ``gdn_replay_verify`` all call ``_recurrent_update`` (Triton)
or ``recurrent_update_reference`` (PyTorch), so the committed state of the two backends is bitwise
equal by construction: same inputs, same operation order, same tile shape (``launch_config``).
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import torch
import triton
import triton.language as tl

IMPLS = ("auto", "triton", "reference")


@triton.jit
def _l2norm(x):
    # x: [K] fp32 -> x / sqrt(sum(x*x) + 1e-6)
    return x / tl.sqrt(tl.sum(x * x, axis=0) + 1e-6)


@triton.jit
def _gating(a, b, A_log, dt_bias):
    """g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b); elementwise, fp32."""
    x = a + dt_bias
    softplus = tl.where(x <= 20.0, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))), x)
    g = -tl.exp(A_log) * softplus
    beta = 1.0 / (1.0 + tl.exp(-b))
    return g, beta


@triton.jit
def _recurrent_update(h, k, v, g, beta):
    """One delta-rule step on a [BV, K] fp32 tile, in the baseline contract's order.

    h: [BV, K] fp32 state rows; k: [K] raw (unnormalised) key as fp32; v: [BV] fp32; g, beta: fp32 scalars.
    h *= exp(g); r = v - sum_K(h * k^); r *= beta; h += k^ (x) r
    """
    k = _l2norm(k)
    h = h * tl.exp(g)
    r = v - tl.sum(h * k[None, :], axis=1)
    r = r * beta
    h = h + r[:, None] * k[None, :]
    return h


@triton.jit
def _fold_records(h, rk, rv, rg, rb, wp, bs, offs_k, offs_v, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr):
    """Replay ring records 0..wp-1 (physical ``(bs + j) & (L - 1)``) onto the tile h with ``_recurrent_update``.

    Shared by the exact-fold kernel and the verify kernel's flush path. Loads are addressed like
    the baseline's (row base + index * stride + offsets) and the next record is fetched while the
    current one is applied, exactly as the baseline fetches its next token.
    """
    p = bs & (L - 1)
    k_n = tl.load(rk + p * K + offs_k)
    v_n = tl.load(rv + p * V + offs_v)
    for j in range(0, wp):
        k_j = k_n.to(tl.float32)
        v_j = v_n.to(tl.float32)
        g_j = tl.load(rg + p)
        b_j = tl.load(rb + p)
        p = (bs + j + 1) & (L - 1)
        k_n = tl.load(rk + p * K + offs_k)
        v_n = tl.load(rv + p * V + offs_v)
        h = _recurrent_update(h, k_j, v_j, g_j, b_j)
    return h


def l2norm_reference(x: torch.Tensor) -> torch.Tensor:
    """Row-wise x / sqrt(sum(x*x) + 1e-6) over the last dim, fp32."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def gating_reference(a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor):
    """PyTorch twin of ``_gating``; a, b: [..., HV] any float dtype -> (g, beta) fp32."""
    x = a.float() + dt_bias.float()
    softplus = torch.where(x <= 20.0, torch.log(1.0 + torch.exp(torch.clamp(x, max=20.0))), x)
    g = -torch.exp(A_log.float()) * softplus
    beta = 1.0 / (1.0 + torch.exp(-b.float()))
    return g, beta


def recurrent_update_reference(h, k, v, g, beta):
    """PyTorch twin of ``_recurrent_update`` for one request: the single source of the CPU state update.

    h: [HV, V, K] fp32 (not modified); k: [HV, K] raw key, already expanded to value heads, fp32;
    v: [HV, V] fp32; g, beta: [HV] fp32. Returns the new [HV, V, K] state.
    Always called with these exact shapes so both CPU backends take the same reduction path.
    """
    k = l2norm_reference(k)
    h = h * torch.exp(g)[:, None, None]
    r = v - (h * k[:, None, :]).sum(-1)
    r = r * beta[:, None]
    return h + r[:, :, None] * k[:, None, :]


_LAUNCH_OVERRIDE: list[tuple[int, int]] = []


@contextmanager
def launch_config_override(BV: int, num_warps: int):
    """Benchmark-only: run every recurrent-update kernel (baseline, fold, verify) with another tile.

    All three kernels see the same override, so the committed state stays bitwise equal across
    backends (checked by the sweep before any timing counts).
    """
    _LAUNCH_OVERRIDE.append((BV, num_warps))
    try:
        yield
    finally:
        _LAUNCH_OVERRIDE.pop()


def launch_config(K: int, V: int) -> tuple[int, int]:
    """(BV, num_warps) for every kernel that runs the recurrent update on a [BV, K] tile.

    The baseline, the exact fold and the fused fold inside the verify kernel must use the same
    values: the reduction tree over K and the FMA contraction follow the register layout, so a
    different tile or warp count would break bitwise equality of the committed state.
    """
    if _LAUNCH_OVERRIDE:
        BV, num_warps = _LAUNCH_OVERRIDE[-1]
        return min(BV, V), num_warps
    return min(V, 32), 1


def use_triton(impl: str, *tensors: torch.Tensor) -> bool:
    """Resolve the ``impl`` keyword: "auto" runs Triton on CUDA tensors and the reference on CPU.

    ``REPLAYSSM_IMPL=triton`` in the environment makes "auto" pick Triton on CPU too (with
    ``TRITON_INTERPRET=1``), which is how the CPU test-suite exercises the kernels.
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if impl == "auto":
        if all(t.is_cuda for t in tensors):
            return True
        return os.environ.get("REPLAYSSM_IMPL", "") == "triton"
    return impl == "triton"
