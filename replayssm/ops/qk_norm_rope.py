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
from ._validate import ACT_DTYPES, check_eps, check_flags, check_no_overlap, check_tensor, named, values_checkable
from .norms import rms_norm_reference


@triton.jit
def _norm_rope_head(base, w, cos, sin, n, eps, out_ty, HD: tl.constexpr, R: tl.constexpr, BLOCK: tl.constexpr):
    """One head's ``[HD]`` vector at ``base``: zero-centred RMSNorm rounded to ``out_ty``, then the rotation of its
    first R dims in fp32. Returns (values in fp32, offsets, mask)."""
    offs = tl.arange(0, BLOCK)
    m = offs < HD
    xv = tl.load(base + offs, mask=m, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(xv * xv, 0) / HD + eps)
    wv = 1.0 + tl.load(w + offs, mask=m, other=0.0).to(tl.float32)
    yv = (xv * inv * wv).to(out_ty).to(tl.float32)
    half: tl.constexpr = R // 2
    rot_m = offs < R
    partner = tl.where(offs < half, offs + half, offs - half)
    xp = tl.load(base + partner, mask=rot_m, other=0.0).to(tl.float32)
    wp = 1.0 + tl.load(w + partner, mask=rot_m, other=0.0).to(tl.float32)
    yp = (xp * inv * wp).to(out_ty).to(tl.float32)
    rot = tl.where(offs < half, -yp, yp)
    c = tl.load(cos + n * R + offs, mask=rot_m, other=1.0)
    s = tl.load(sin + n * R + offs, mask=rot_m, other=0.0)
    return tl.where(rot_m, yv * c + rot * s, yv), offs, m


@triton.jit
def _qk_norm_rope_kernel(x, w, cos, sin, y, heads, s_n, s_h, eps, HD: tl.constexpr, R: tl.constexpr,
                         BLOCK: tl.constexpr):  # fmt: skip
    n = tl.program_id(0).to(tl.int64)
    hh = tl.program_id(1)
    out, offs, m = _norm_rope_head(x + n * s_n + hh * s_h, w, cos, sin, n, eps, y.dtype.element_ty, HD, R, BLOCK)
    tl.store(y + (n * heads + hh) * HD + offs, out.to(y.dtype.element_ty), mask=m)


@triton.jit
def _qk_norm_rope_kv_kernel(q, k, v, wq, wk, cos, sin, y, kc, vc, index, NHQ, NKV, s_qn, s_qh, s_kn, s_kh, s_vn,
                            s_vh, eps, HD: tl.constexpr, R: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    """Program (token n, head hh): hh < NHQ normalises and rotates query head hh into y; the others normalise and
    rotate key head hh - NHQ and store it, with the value head, at cache position index[n]."""
    n = tl.program_id(0).to(tl.int64)
    hh = tl.program_id(1)
    if hh < NHQ:
        out, offs, m = _norm_rope_head(q + n * s_qn + hh * s_qh, wq, cos, sin, n, eps, y.dtype.element_ty, HD, R,
                                       BLOCK)  # fmt: skip
        tl.store(y + (n * NHQ + hh) * HD + offs, out.to(y.dtype.element_ty), mask=m)
    else:
        j = hh - NHQ
        out, offs, m = _norm_rope_head(k + n * s_kn + j * s_kh, wk, cos, sin, n, eps, kc.dtype.element_ty, HD, R,
                                       BLOCK)  # fmt: skip
        dst = (tl.load(index + n).to(tl.int64) * NKV + j) * HD + offs
        tl.store(kc + dst, out.to(kc.dtype.element_ty), mask=m)
        tl.store(vc + dst, tl.load(v + n * s_vn + j * s_vh + offs, mask=m, other=0.0), mask=m)


def qk_norm_rope_reference(x, weight, cos, sin, *, eps: float):
    """PyTorch reference of ``qk_norm_rope`` (same signature)."""
    y = rms_norm_reference(x, weight, eps=eps, zero_centred=True)
    r = cos.shape[-1]
    yr, yp = y[..., :r], y[..., r:]
    half = r // 2
    rot = torch.cat([-yr[..., half:], yr[..., :half]], -1)
    out = yr.float() * cos[:, None, :] + rot.float() * sin[:, None, :]
    return torch.cat([out.to(x.dtype), yp], -1)


def _check(x, weight, cos, sin) -> int:
    """x [N, heads, hd] with a unit last stride, weight [hd], cos and sin [N, r] fp32 with r even <= hd: r."""
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
    return r


def qk_norm_rope(x: torch.Tensor, weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, eps: float,
                 impl: str = "auto"):  # fmt: skip
    """x: [N, heads, hd] (unit last stride; the other strides are free, e.g. the query half of a fused
    projection); weight: [hd] (zero-centred norm weight); cos, sin: [N, r] fp32 with r even, r <= hd.
    Returns a new contiguous [N, heads, hd] tensor in x's dtype. Mutates nothing."""
    check_eps(eps)
    r = _check(x, weight, cos, sin)
    N, heads, hd = x.shape
    if not use_triton(impl, x):
        return qk_norm_rope_reference(x, weight, cos, sin, eps=eps)
    y = torch.empty(N, heads, hd, dtype=x.dtype, device=x.device)
    if N:
        _qk_norm_rope_kernel[(N, heads)](x, weight, cos, sin, y, heads, x.stride(0), x.stride(1), eps, HD=hd, R=r,
                                         BLOCK=triton.next_power_of_2(hd))  # fmt: skip
    return y


def qk_norm_rope_kv_reference(q, k, v, wq, wk, cos, sin, k_cache, v_cache, index, *, eps: float,
                              validate: bool = True):  # fmt: skip
    """``qk_norm_rope_kv`` with ``impl="reference"``: the PyTorch twin of its kernel, behind the same checks."""
    return qk_norm_rope_kv(q, k, v, wq, wk, cos, sin, k_cache, v_cache, index, eps=eps, impl="reference",
                           validate=validate)  # fmt: skip


def _kv_reference(q, k, v, wq, wk, cos, sin, k_cache, v_cache, index, *, eps: float):
    """The PyTorch twin of the fused kernel (arguments already checked): the two ``qk_norm_rope`` calls, then the
    cache writes."""
    y = qk_norm_rope_reference(q, wq, cos, sin, eps=eps)
    k_cache.index_copy_(0, index, qk_norm_rope_reference(k, wk, cos, sin, eps=eps))
    v_cache.index_copy_(0, index, v)
    return y


def qk_norm_rope_kv(q, k, v, wq, wk, cos, sin, k_cache, v_cache, index, *, eps: float, impl: str = "auto",
                    validate: bool = True):  # fmt: skip
    """``qk_norm_rope`` of the queries and of the keys, and the write of the keys and values into the KV cache, in
    one launch (a decode or verify step of an attention layer). q [N, nH, hd], k, v [N, nKV, hd] (unit last
    stride, other strides free: views of a fused projection); wq, wk [hd]; cos, sin [N, r] fp32; k_cache,
    v_cache [slots, nKV, hd] (contiguous, the flattened pages of one layer); index [N] int64, the cache position of
    each token (distinct, but for a padded batch's padding rows, which all write the sink page: any of them may
    win there). Returns the queries, a new contiguous [N, nH, hd] tensor; writes the caches' rows
    ``index``, nothing else. Shapes are always checked before anything is written; with ``validate`` (and not while
    a CUDA graph is captured) the index values too (in range), which reads them back: a model's step,
    whose index comes from ``KVCache.token_index``, turns that off."""
    check_tensor("q", q, ndim=3, dtypes=ACT_DTYPES, contiguous=False)
    check_flags(validate=validate)
    check_eps(eps)
    N, nH, hd = q.shape
    for name, t in (("k", k), ("v", v)):
        check_tensor(name, t, ndim=3, dtypes=(q.dtype,), device=q.device, contiguous=False)
        if t.shape[0] != N or t.shape[2] != hd or t.stride(2) != 1:
            raise ValueError(f"{name} must be [{N}, nKV, {hd}] with a unit last stride, got {tuple(t.shape)}, "
                             f"stride {t.stride()}")  # fmt: skip
    nKV = k.shape[1]
    if v.shape[1] != nKV:
        raise ValueError(f"v must have k's {nKV} heads, got {tuple(v.shape)}")
    check_tensor("wk", wk, shape=(hd,), dtypes=ACT_DTYPES, device=q.device)
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        check_tensor(name, c, ndim=3, dtypes=(q.dtype,), device=q.device)
        if c.shape[1:] != (nKV, hd):
            raise ValueError(f"{name} must be [slots, {nKV}, {hd}], got {tuple(c.shape)}")
    check_tensor("index", index, shape=(N,), dtypes=(torch.int64,), device=q.device)
    r = _check(q, wq, cos, sin)
    check_no_overlap(named(k_cache=k_cache, v_cache=v_cache),
                     named(q=q, k=k, v=v, wq=wq, wk=wk, cos=cos, sin=sin, index=index))  # fmt: skip
    if validate and N and values_checkable(index):
        rows = k_cache.shape[0]
        if not bool(((index >= 0) & (index < rows)).all()):
            raise ValueError(f"index holds positions outside [0, {rows}) (the cache's rows): {index.tolist()[:16]}")
    if not use_triton(impl, q):
        return _kv_reference(q, k, v, wq, wk, cos, sin, k_cache, v_cache, index, eps=eps)
    y = torch.empty(N, nH, hd, dtype=q.dtype, device=q.device)
    if N:
        _qk_norm_rope_kv_kernel[(N, nH + nKV)](q, k, v, wq, wk, cos, sin, y, k_cache, v_cache, index, nH, nKV,
                                               q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0),
                                               v.stride(1), eps, HD=hd, R=r,
                                               BLOCK=triton.next_power_of_2(hd))  # fmt: skip
    return y
