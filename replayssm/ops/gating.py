"""GDN gating: g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl  # noqa: F401  (the interpreter looks for it in a kernel's globals)

from ._common import use_triton
from ._gluon import gl, jit
from ._pinned import _gating, gating_reference
from ._validate import ACT_DTYPES, check_tensor


@jit
def _gdn_gating_kernel(a, b, A_log, dt_bias, g, beta, HV: tl.constexpr, BHV: tl.constexpr, LAYOUT: tl.constexpr):
    i_t = gl.program_id(0)
    offs = gl.arange(0, BHV, layout=LAYOUT)
    mask = offs < HV
    p = i_t.to(gl.int64) * HV + offs
    a_t = gl.load(a + p, mask=mask, other=0.0).to(gl.float32)
    b_t = gl.load(b + p, mask=mask, other=0.0).to(gl.float32)
    A = gl.load(A_log + offs, mask=mask, other=0.0).to(gl.float32)
    dtb = gl.load(dt_bias + offs, mask=mask, other=0.0).to(gl.float32)
    g_t, beta_t = _gating(a_t, b_t, A, dtb)
    gl.store(g + p, g_t, mask=mask)
    gl.store(beta + p, beta_t, mask=mask)


def _check(a, b, A_log, dt_bias):
    check_tensor("a", a, ndim=2, dtypes=ACT_DTYPES)
    N, HV = a.shape
    check_tensor("b", b, shape=(N, HV), dtypes=ACT_DTYPES, device=a.device)
    check_tensor("A_log", A_log, shape=(HV,), dtypes=ACT_DTYPES, device=a.device)
    check_tensor("dt_bias", dt_bias, shape=(HV,), dtypes=ACT_DTYPES, device=a.device)


def gdn_gating_reference(a, b, *, A_log, dt_bias):
    """``gdn_gating`` with ``impl="reference"``: the PyTorch twin of its kernel, behind the same checks."""
    return gdn_gating(a, b, A_log=A_log, dt_bias=dt_bias, impl="reference")


def gdn_gating(a: torch.Tensor, b: torch.Tensor, *, A_log: torch.Tensor, dt_bias: torch.Tensor, impl: str = "auto"):
    """Per-token GDN gates.

    a, b: [N, HV] activations (fp32/fp16/bf16); A_log, dt_bias: [HV]. Returns (g, beta), each
    [N, HV] fp32: g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b). Mutates nothing.
    """
    _check(a, b, A_log, dt_bias)
    if not use_triton(impl, a):
        return gating_reference(a, b, A_log, dt_bias)
    N, HV = a.shape
    g = torch.empty(N, HV, dtype=torch.float32, device=a.device)
    beta = torch.empty_like(g)
    if N > 0:
        BHV = max(32, triton.next_power_of_2(HV))
        layout = gl.BlockedLayout([BHV // 32], [32], [1], [0])
        _gdn_gating_kernel[(N,)](a, b, A_log, dt_bias, g, beta, HV, BHV, layout, num_warps=1)
    return g, beta
