"""Fused norms, SiLU-mul and q/k norm + rotary against their PyTorch references (kernels in the interpreter on CPU)."""

import pytest
import torch

from replayssm.models.layers import RMSNorm, RMSNormGated, apply_rope
from replayssm.models.rope import RotaryEmbedding, YaRN
from replayssm.ops.norms import add_rms_norm, rms_norm, rms_norm_gated, silu_mul
from replayssm.ops.qk_norm_rope import qk_norm_rope, qk_norm_rope_kv

# fp32: the kernels and references differ only in the order of one D-long sum of squares (~1e-7 relative).
# bf16: the kernels round at the same places as the references (up to 3 roundings per output); each may
# land one ulp (2^-7 relative at most) apart -- on the GPU only through the sum's order, in the CPU
# interpreter also because its fp32 -> bf16 casts truncate instead of rounding to nearest.
TOL = {torch.float32: 1e-5, torch.bfloat16: 3 * 2**-7}


def _close(a, b, dtype):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert ((a.float() - b.float()).abs() <= TOL[dtype] * (1 + b.float().abs())).all()


def _rand(*shape, dtype, g, scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("D", [64, 100])
def test_rms_norm_and_add(device, dtype, D):
    g = torch.Generator().manual_seed(D)
    x, res = _rand(7, D, dtype=dtype, g=g, scale=3).to(device), _rand(7, D, dtype=dtype, g=g).to(device)
    w = _rand(D, dtype=dtype, g=g, scale=0.2).to(device)
    for zc in (True, False):
        ref = rms_norm(x, w, eps=1e-6, zero_centred=zc, impl="reference")
        _close(rms_norm(x, w, eps=1e-6, zero_centred=zc, impl="triton"), ref, dtype)
        h_ref, y_ref = add_rms_norm(x, res, w, eps=1e-6, zero_centred=zc, impl="reference")
        h, y = add_rms_norm(x, res, w, eps=1e-6, zero_centred=zc, impl="triton")
        if device.type == "cuda" or dtype == torch.float32:
            assert torch.equal(h, h_ref)  # the residual add is one rounding to nearest either way
        else:
            _close(h, h_ref, dtype)  # the interpreter's bf16 cast truncates
        _close(y, y_ref, dtype)
    # the reference is the model's RMSNorm exactly, so CPU results are the unfused model's
    m = RMSNorm(D, 1e-6).to(device=device, dtype=dtype)
    m.weight.data.copy_(w)
    assert torch.equal(rms_norm(x, w, eps=1e-6, impl="reference"), m(x))
    # strided rows (a slice of a wider tensor) are read in place
    wide = _rand(7, 2 * D, dtype=dtype, g=g).to(device)
    _close(rms_norm(wide[:, :D], w, eps=1e-6, impl="triton"), rms_norm(wide[:, :D].contiguous(), w, eps=1e-6,
                                                                       impl="reference"), dtype)  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_gated_matches_the_module(device, dtype):
    g = torch.Generator().manual_seed(3)
    N, HV, V = 5, 4, 32
    x = _rand(N, HV, V, dtype=dtype, g=g).to(device)
    zfull = _rand(N, HV * V + 8, dtype=dtype, g=g).to(device)  # z as a slice of a fused projection
    z = zfull[:, : HV * V].view(N, HV, V)
    m = RMSNormGated(V, 1e-6).to(device=device, dtype=dtype)
    m.weight.data.copy_(_rand(V, dtype=dtype, g=g, scale=0.3) + 1)
    ref = m(x, z)
    assert torch.equal(rms_norm_gated(x, z, m.weight, eps=1e-6, impl="reference"), ref)
    _close(rms_norm_gated(x, z, m.weight, eps=1e-6, impl="triton"), ref, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_mul(device, dtype):
    g = torch.Generator().manual_seed(4)
    gu = _rand(6, 2 * 48, dtype=dtype, g=g, scale=2).to(device)
    ref = torch.nn.functional.silu(gu[:, :48]) * gu[:, 48:]
    assert torch.equal(silu_mul(gu, impl="reference"), ref)
    _close(silu_mul(gu, impl="triton"), ref, dtype)


@pytest.mark.parametrize("yarn", [None, YaRN(4.0, 64, attention_factor=1.1386)], ids=["default", "yarn"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_qk_norm_rope_matches_norm_then_rope(device, dtype, yarn):
    g = torch.Generator().manual_seed(5)
    N, heads, hd, r = 6, 3, 32, 8
    qg = _rand(N, heads, 2 * hd, dtype=dtype, g=g, scale=2).to(device)
    q = qg[..., :hd]  # strided: the query half of the fused [query | gate] projection
    norm = RMSNorm(hd, 1e-6).to(device=device, dtype=dtype)
    norm.weight.data.copy_(_rand(hd, dtype=dtype, g=g, scale=0.2))
    cos, sin = RotaryEmbedding(r, 10000.0, yarn)(torch.randint(0, 500, (N,), generator=g).to(device))
    ref = apply_rope(norm(q), cos, sin)
    assert torch.equal(qk_norm_rope(q, norm.weight, cos, sin, eps=1e-6, impl="reference"), ref)
    _close(qk_norm_rope(q, norm.weight, cos, sin, eps=1e-6, impl="triton"), ref, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_qk_norm_rope_kv_is_both_norms_and_the_cache_write(device, dtype):
    """The decode/verify attention's one launch: bitwise the two ``qk_norm_rope`` calls of the same implementation
    and the cache writes; cache rows outside ``index`` untouched; bad arguments refused before any write."""
    g = torch.Generator().manual_seed(9)
    N, nH, nKV, hd, r, slots = 5, 4, 2, 32, 8, 40
    qkv = _rand(N, (2 * nH + 2 * nKV) * hd, dtype=dtype, g=g, scale=2).to(device)  # a fused projection's output
    qg = qkv[:, : 2 * nH * hd].view(N, nH, 2 * hd)
    q = qg[..., :hd]
    k = qkv[:, 2 * nH * hd : (2 * nH + nKV) * hd].view(N, nKV, hd)
    v = qkv[:, (2 * nH + nKV) * hd :].view(N, nKV, hd)
    wq, wk = (_rand(hd, dtype=dtype, g=g, scale=0.2).to(device) for _ in range(2))
    cos, sin = RotaryEmbedding(r, 10000.0)(torch.randint(0, 500, (N,), generator=g).to(device))
    kc0, vc0 = (_rand(slots, nKV, hd, dtype=dtype, g=g).to(device) for _ in range(2))
    index = torch.randperm(slots, generator=g)[:N].to(device)
    for impl in ("reference", "triton"):
        kc, vc = kc0.clone(), vc0.clone()
        y = qk_norm_rope_kv(q, k, v, wq, wk, cos, sin, kc, vc, index, eps=1e-6, impl=impl)
        want_k, want_v = kc0.clone(), vc0.clone()
        want_k[index] = qk_norm_rope(k, wk, cos, sin, eps=1e-6, impl=impl)
        want_v[index] = v
        assert torch.equal(y, qk_norm_rope(q, wq, cos, sin, eps=1e-6, impl=impl)), impl
        assert torch.equal(kc, want_k) and torch.equal(vc, want_v), impl
    kc, vc = kc0.clone(), vc0.clone()
    far = index.clone()
    far[-1] = slots  # past the cache's rows (the kernel wrote outside it)
    for bad, match in (
        ({"index": index.int()}, "index"),
        ({"v": v[:, :1]}, "heads"),
        ({"k_cache": kc[:, :1]}, "k_cache"),
        ({"wk": wk[:-1]}, "wk"),
        ({"index": far}, r"outside \[0, 40\)"),
        ({"index": -far}, "outside"),
        ({"q": q[0]}, "q must have 3 dimensions"),
        ({"eps": 0.0}, "eps must be a finite number > 0"),
        ({"validate": "no"}, "validate must be a bool"),
        ({"v_cache": kc}, "k_cache must not overlap v_cache|v_cache must not overlap k_cache"),
        ({"v": kc[1 : N + 1]}, "must not overlap v in memory"),
    ):  # fmt: skip (the last two: a review)
        kw = dict(q=q, k=k, v=v, wq=wq, wk=wk, cos=cos, sin=sin, k_cache=kc, v_cache=vc, index=index, eps=1e-6) | bad
        for impl in ("reference", "triton"):
            with pytest.raises((ValueError, TypeError), match=match):
                qk_norm_rope_kv(**kw, impl=impl)
            assert torch.equal(kc, kc0) and torch.equal(vc, vc0)


def test_bad_arguments_are_refused_before_anything_runs():
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match="weight must have shape"):
        rms_norm(x, torch.zeros(7), eps=1e-6)
    with pytest.raises(ValueError, match="residual must match"):
        add_rms_norm(x, torch.randn(4, 9), torch.zeros(8), eps=1e-6)
    with pytest.raises(ValueError, match="even last dim"):
        silu_mul(torch.randn(3, 5))
    with pytest.raises(ValueError, match="unit last stride"):
        rms_norm(torch.randn(8, 4).t(), torch.zeros(8), eps=1e-6)
