"""Paged attention (kernel in the interpreter on CPU) against its reference and against the dense SDPA path."""

import pytest
import torch
import torch.nn.functional as F

from replayssm.ops.paged_attention import paged_attention
from replayssm.state.kv import KVCache

# fp32 with ieee dots: the kernel sums exp-weighted values page by page (online softmax, split partials), SDPA
# in one pass; the two orders differ by a few fp32 ulps of the largest term. bf16: P is rounded to bf16 before
# the value product (as in flash attention), ~2^-8 relative.
TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}


def _dense_sdpa(q, keys, vals, start, T, scale):
    """What the engine's attention computed before the paged cache: a dense [B, L] view and an explicit mask."""
    B, L = keys.shape[:2]
    nH, hd = q.shape[1:]
    pos = start[:, None] + torch.arange(T)[None, :]
    mask = torch.arange(L)[None, None, :] <= pos[:, :, None]
    o = F.scaled_dot_product_attention(
        q.view(B, T, nH, hd).transpose(1, 2),
        keys.transpose(1, 2),
        vals.transpose(1, 2),
        attn_mask=mask[:, None],
        scale=scale,
        enable_gqa=True,
    )
    return o.transpose(1, 2).reshape(B * T, nH, hd)


def _filled(B, T, nH, nKV, hd, page, lens, dtype, g, dynamic):
    """A cache with ``lens[b] + T`` entries per row (committed past + the window), rows in a scrambled page
    order when dynamic; returns the cache, q, and each row's dense keys/values for the SDPA check."""
    max_len = max(lens) + T + 5
    kv = KVCache(1, B + 1, max_len, nKV, hd, dtype=dtype, device="cpu", page_size=page,
                 num_pages=(B + 1) * (-(-max_len // page)) if dynamic else None)  # fmt: skip
    slots = list(range(B + 1))[::-1][:B] if dynamic else list(range(B))  # skip slot 0 to scramble pages
    if dynamic:
        kv.reserve([0], [3 * page])  # someone else's pages first, so rows do not own pages 0, 1, ...
    kv.reserve(slots, [n + T for n in lens])
    L = max(lens) + T
    keys = torch.randn(B, L, nKV, hd, generator=g).to(dtype)
    vals = torch.randn(B, L, nKV, hd, generator=g).to(dtype)
    rows = torch.tensor(slots)
    for b, s in enumerate(slots):
        n = lens[b] + T
        idx = kv.token_index(torch.tensor([s]), torch.arange(n))
        kv.write(0, keys[b, :n], vals[b, :n], idx)
    q = torch.randn(B * T, nH, hd, generator=g).to(dtype)
    return kv, q, rows, keys, vals


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("B,T,nH,nKV,lens,dynamic", [
    (3, 4, 4, 2, [0, 17, 40], True),     # an empty past, a window straddling a page, several pages
    (2, 1, 6, 2, [31, 5], False),        # plain decode, group of 3 heads (not a power of two)
    (1, 3, 2, 2, [70], True),            # one row: many splits, one page each
])  # fmt: skip
def test_kernel_matches_reference_and_dense_sdpa(B, T, nH, nKV, lens, dynamic, dtype):
    g = torch.Generator().manual_seed(B * 10 + T)
    hd, page = 32, 16
    kv, q, rows, keys, vals = _filled(B, T, nH, nKV, hd, page, lens, dtype, g, dynamic)
    start = torch.tensor(lens)
    args = (q, kv.k[0], kv.v[0], kv.block_table, rows, start)
    ref = paged_attention(*args, T=T, scale=hd**-0.5, impl="reference")
    dense = _dense_sdpa(q, keys, vals, start, T, hd**-0.5)
    tol = TOL[dtype]
    assert (ref.float() - dense.float()).abs().max() <= tol
    out = paged_attention(*args, T=T, scale=hd**-0.5, impl="triton")
    assert out.shape == q.shape and out.dtype == dtype
    assert (out.float() - ref.float()).abs().max() <= tol


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("B,T,lens", [(3, 4, [0, 17, 40]), (1, 3, [70])], ids=["one-pass", "splits"])
def test_output_gate_inside_the_kernel(B, T, lens, dtype):
    """``gate`` (a strided view, as the fused projection gives it): the output times sigmoid(gate), rounded once,
    in both the one-pass store and the split combine."""
    g = torch.Generator().manual_seed(7 + B)
    nH, nKV, hd, page = 4, 2, 32, 16
    kv, q, rows, *_ = _filled(B, T, nH, nKV, hd, page, lens, dtype, g, dynamic=True)
    gate = (torch.randn(B * T, nH, 2 * hd, generator=g) * 2).to(dtype)[..., hd:]
    args = (q, kv.k[0], kv.v[0], kv.block_table, rows, torch.tensor(lens))
    plain = paged_attention(*args, T=T, scale=hd**-0.5, impl="reference")
    ref = paged_attention(*args, T=T, scale=hd**-0.5, gate=gate, impl="reference")
    if dtype == torch.float32:
        assert torch.equal(ref, plain * torch.sigmoid(gate))
    assert (ref.float() - plain.float() * torch.sigmoid(gate.float())).abs().max() <= TOL[dtype]
    out = paged_attention(*args, T=T, scale=hd**-0.5, gate=gate, impl="triton")
    assert out.dtype == dtype and (out.float() - ref.float()).abs().max() <= TOL[dtype]
    with pytest.raises(ValueError, match="gate"):
        paged_attention(*args, T=T, scale=hd**-0.5, gate=gate[:, :1])


def test_kernel_reads_only_used_pages():
    """Pages past a row's keys are poisoned with NaN: the kernel never reads them (the reference would)."""
    g = torch.Generator().manual_seed(0)
    kv, q, rows, *_ = _filled(2, 2, 4, 2, 32, 16, [5, 20], torch.float32, g, dynamic=False)
    used = {int(rows[0]): 1, int(rows[1]): 2}  # pages holding 7 and 22 keys
    for r, n in used.items():
        kv.k[0, kv.block_table[r, n:].long()] = float("nan")
        kv.v[0, kv.block_table[r, n:].long()] = float("nan")
    out = paged_attention(q, kv.k[0], kv.v[0], kv.block_table, rows, torch.tensor([5, 20]), T=2, scale=0.2,
                          impl="triton")  # fmt: skip
    assert torch.isfinite(out).all()


def test_bad_shapes_are_refused():
    kv = KVCache(1, 2, 32, 2, 16, dtype=torch.float32, device="cpu", page_size=16)
    q = torch.randn(4, 4, 16)
    rows, start = torch.tensor([0, 1]), torch.tensor([3, 4])
    with pytest.raises(ValueError, match="B\\*T"):
        paged_attention(q, kv.k[0], kv.v[0], kv.block_table, rows, start, T=3, scale=1.0)
    with pytest.raises(TypeError, match="rows"):
        paged_attention(q, kv.k[0], kv.v[0], kv.block_table, rows.int(), start, T=2, scale=1.0)


@pytest.mark.parametrize("impl", ["reference", "triton"])
def test_bad_values_and_scales_are_refused(impl):
    """An eighth misuse review: a row past the table, a negative start or a page id past the cache read outside
    the cache on the kernel path (garbage, NaN) and gave bare IndexErrors or other results on the reference's;
    scale=None crashed the kernel path while the reference took its default."""
    g = torch.Generator().manual_seed(1)
    kv = KVCache(1, 2, 32, 2, 16, dtype=torch.float32, device="cpu", page_size=16)
    q = torch.randn(4, 4, 16, generator=g)
    rows, start = torch.tensor([0, 1]), torch.tensor([3, 4])

    def call(rows=rows, start=start, table=kv.block_table, **kw):
        return paged_attention(q, kv.k[0], kv.v[0], table, rows, start, T=2, impl=impl, **{"scale": 0.25, **kw})

    bad_table = kv.block_table.clone()
    bad_table[1, 0] = kv.k.shape[1]  # one past the cache's pages
    for kw, err, msg in (
        (dict(rows=torch.tensor([0, 7])), ValueError, r"rows must lie in \[0, 3\)"),
        (dict(rows=torch.tensor([0, -1])), ValueError, r"rows must lie in \[0, 3\)"),
        (dict(start=torch.tensor([3, -5])), ValueError, r"start must lie in \[0, 30\]"),
        (dict(start=torch.tensor([3, 31])), ValueError, r"start must lie in \[0, 30\]"),
        (dict(table=bad_table), ValueError, r"block_table holds page ids outside \[0, 5\)"),
        (dict(scale=torch.tensor(0.25)), TypeError, "scale must be a Python float or None"),
        (dict(scale=float("nan")), ValueError, "scale must be a finite positive number"),
    ):
        with pytest.raises(err, match=msg):
            call(**kw)
    assert torch.equal(call(scale=None), call(scale=16**-0.5))
    assert torch.equal(call(validate=False), call())


@pytest.mark.parametrize("impl", ["reference", "triton"])
def test_page_ids_past_a_row_s_keys_are_never_read(impl):
    """A docs audit: the reference gathered every column of the table, so a stale id in a column past a row's keys
    raised IndexError there while the kernel (which never reads it) ran."""
    g = torch.Generator().manual_seed(3)
    kv = KVCache(1, 2, 32, 2, 16, dtype=torch.float32, device="cpu", page_size=16)
    q = torch.randn(4, 4, 16, generator=g)
    kv.k.normal_(generator=g)
    kv.v.normal_(generator=g)
    rows, start = torch.tensor([0, 1]), torch.tensor([3, 4])  # one page each
    want = paged_attention(q, kv.k[0], kv.v[0], kv.block_table, rows, start, T=2, scale=0.25, impl=impl)
    stale = kv.block_table.clone()
    stale[:2, 1] = 10**6
    got = paged_attention(q, kv.k[0], kv.v[0], stale, rows, start, T=2, scale=0.25, impl=impl)
    assert torch.equal(got, want)
