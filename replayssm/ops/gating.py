"""GDN gating: g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import _gating, gating_reference, use_triton
from ._validate import ACT_DTYPES, check_tensor


@triton.jit
def _gdn_gating_kernel(a, b, A_log, dt_bias, g, beta, N, HV: tl.constexpr, BHV: tl.constexpr):
    i_t = tl.program_id(0)
    offs = tl.arange(0, BHV)
    mask = offs < HV
    p = i_t.to(tl.int64) * HV + offs
    a_t = tl.load(a + p, mask=mask, other=0.0).to(tl.float32)
    b_t = tl.load(b + p, mask=mask, other=0.0).to(tl.float32)
    A = tl.load(A_log + offs, mask=mask, other=0.0).to(tl.float32)
    dtb = tl.load(dt_bias + offs, mask=mask, other=0.0).to(tl.float32)
    g_t, beta_t = _gating(a_t, b_t, A, dtb)
    tl.store(g + p, g_t, mask=mask)
    tl.store(beta + p, beta_t, mask=mask)


def _check(a, b, A_log, dt_bias):
    check_tensor("a", a, ndim=2, dtypes=ACT_DTYPES)
    N, HV = a.shape
    check_tensor("b", b, shape=(N, HV), dtypes=ACT_DTYPES, device=a.device)
    check_tensor("A_log", A_log, shape=(HV,), dtypes=ACT_DTYPES, device=a.device)
    check_tensor("dt_bias", dt_bias, shape=(HV,), dtypes=ACT_DTYPES, device=a.device)


def gdn_gating_reference(a, b, *, A_log, dt_bias):
    """PyTorch reference of ``gdn_gating`` (same signature)."""
    return gating_reference(a, b, A_log, dt_bias)


def gdn_gating(a: torch.Tensor, b: torch.Tensor, *, A_log: torch.Tensor, dt_bias: torch.Tensor, impl: str = "auto"):
    """Per-token GDN gates.

    a, b: [N, HV] activations (fp32/fp16/bf16); A_log, dt_bias: [HV]. Returns (g, beta), each
    [N, HV] fp32: g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b). Mutates nothing.
    """
    _check(a, b, A_log, dt_bias)
    if not use_triton(impl, a):
        return gdn_gating_reference(a, b, A_log=A_log, dt_bias=dt_bias)
    N, HV = a.shape
    g = torch.empty(N, HV, dtype=torch.float32, device=a.device)
    beta = torch.empty_like(g)
    if N > 0:
        _gdn_gating_kernel[(N,)](a, b, A_log, dt_bias, g, beta, N, HV=HV, BHV=triton.next_power_of_2(HV))
    return g, beta
