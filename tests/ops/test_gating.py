import pytest
import torch

from replayssm.ops import gdn_gating, gdn_gating_reference
from tests.helpers.gdn64 import gates64, rel_err


def _inputs(N, HV, dtype, device):
    a = (torch.randn(N, HV) * 8).to(dtype).to(device)  # wide enough to hit softplus' linear branch
    b = (torch.randn(N, HV) * 3).to(dtype).to(device)
    return a, b, torch.randn(HV, device=device), torch.randn(HV, device=device) * 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_reference_matches_float64(dtype):
    a, b, A_log, dt_bias = _inputs(37, 6, dtype, "cpu")
    g, beta = gdn_gating_reference(a, b, A_log=A_log, dt_bias=dt_bias)
    g64, beta64 = gates64(a, b, A_log, dt_bias)
    assert g.dtype == beta.dtype == torch.float32
    assert rel_err(g, g64) < 1e-6 and rel_err(beta, beta64) < 1e-6  # fp32 evaluation of exact formulas


def test_kernel_matches_reference(device):
    a, b, A_log, dt_bias = _inputs(29, 5, torch.float16, device)  # HV=5: a non-power-of-two width
    g, beta = gdn_gating(a, b, A_log=A_log, dt_bias=dt_bias, impl="triton")
    g_ref, beta_ref = gdn_gating_reference(a, b, A_log=A_log, dt_bias=dt_bias)
    assert rel_err(g, g_ref) < 1e-5 and rel_err(beta, beta_ref) < 1e-5  # fast exp/log vs libm: a few ulp


def test_bad_inputs_raise():
    a, b, A_log, dt_bias = _inputs(4, 3, torch.float32, "cpu")
    with pytest.raises(ValueError, match="b must have shape"):
        gdn_gating(a, b[:, :2], A_log=A_log, dt_bias=dt_bias)
    with pytest.raises(TypeError, match="a must have dtype"):
        gdn_gating(a.int(), b, A_log=A_log, dt_bias=dt_bias)
    with pytest.raises(ValueError, match="dt_bias must have shape"):
        gdn_gating(a, b, A_log=A_log, dt_bias=dt_bias[:1])
    with pytest.raises(ValueError, match="impl must be one of"):
        gdn_gating(a, b, A_log=A_log, dt_bias=dt_bias, impl="cuda")
