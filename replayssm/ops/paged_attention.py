"""Attention of a step's windows over a paged KV cache, reading only the pages a row holds.

Layouts: ``q`` [B*T, nH, hd] (row b's T queries are consecutive); ``k_cache``, ``v_cache`` [P, page, nKV, hd];
``block_table`` [R, max_pages] int32 page ids of each cache row; ``rows`` [B] int64 the cache row of each
batch row; ``start`` [B] int64 the committed length of each row. Query t of row b sits at position
``start[b] + t`` and attends to keys 0 .. start[b] + t (the committed past and the causal part of its own
window, whose keys must already be in the cache). GQA: query head h reads kv head ``h // (nH // nKV)``.

The kernel runs one program per (row, kv head, split of the row's pages) over all the group's heads and
the window's T queries at once (one K/V page load serves G*T queries), with an online softmax; splits are
combined by a second small kernel. Pages past a row's ``start + T`` keys are never read. The reference
gathers every page of the table into a dense [B, max_pages*page, ...] view and runs SDPA with the same
mask, exactly like the dense cache did.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from ._common import use_triton
from ._interpreter import INTERPRET
from ._validate import ACT_DTYPES, check_flags, check_scale, check_tensor, values_checkable

TARGET_PROGRAMS = 256  # programs per launch that keep every SM of a large GPU busy
MIN_PAGE_SIZE = 16  # the kernel's smallest page (a tl.dot tile); the reference takes any power of two


@triton.jit
def _attn_kernel(q, kc, vc, bt, rows, start, o, part_o, part_ml, gate, s_gn, s_gh, s_bt, NH, NKV, N,
                 pages_per_split, scale, T: tl.constexpr, G: tl.constexpr, HD: tl.constexpr, BLOCK_D: tl.constexpr,
                 PS: tl.constexpr, BLOCK_M: tl.constexpr, SPLIT: tl.constexpr, GATE: tl.constexpr, IEEE: tl.constexpr,
                 F32_DOTS: tl.constexpr):  # fmt: skip
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    sp = tl.program_id(2)
    row = tl.load(rows + b).to(tl.int64)
    st = tl.load(start + b).to(tl.int64)
    n_pages = ((st + T + PS - 1) // PS).to(tl.int32)
    p_lo = sp * pages_per_split
    p_hi = tl.minimum(p_lo + pages_per_split, n_pages)
    mm = tl.arange(0, BLOCK_M)
    t = mm // G
    valid = mm < G * T
    head = kvh * G + mm % G
    tok = (b * T + t).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    dm = d < HD
    qt = tl.load(q + (tok * NH + head)[:, None] * HD + d[None, :], mask=valid[:, None] & dm[None, :], other=0.0)
    qpos = st + t
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    j = tl.arange(0, PS)
    for p in range(p_lo, p_hi):
        page = tl.load(bt + row * s_bt + p).to(tl.int64)
        off = ((page * PS + j) * NKV + kvh)[:, None] * HD + d[None, :]  # [PS, BLOCK_D]
        kt = tl.load(kc + off, mask=dm[None, :], other=0.0)
        if IEEE:
            s = tl.dot(qt, tl.trans(kt), input_precision="ieee") * scale
        elif F32_DOTS:  # the interpreter's bf16 dot is broken; bf16 x bf16 products are exact in fp32
            s = tl.dot(qt.to(tl.float32), tl.trans(kt.to(tl.float32)), input_precision="ieee") * scale
        else:
            s = tl.dot(qt, tl.trans(kt)) * scale
        s = tl.where((p * PS + j)[None, :] <= qpos[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a query may see no key of this page yet
        alpha = tl.exp(m_i - m_safe)
        pr = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(pr, 1)
        vt = tl.load(vc + off, mask=dm[None, :], other=0.0)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(pr.to(vt.dtype), vt, input_precision="ieee")
        elif F32_DOTS:
            pv = pr.to(vt.dtype).to(tl.float32)
            acc = acc * alpha[:, None] + tl.dot(pv, vt.to(tl.float32), input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(pr.to(vt.dtype), vt)
        m_i = m_new
    out_m = valid[:, None] & dm[None, :]
    if SPLIT:  # partial results of this split: unnormalised acc, running max and sum
        base = (sp * N + tok) * NH + head
        tl.store(part_o + base[:, None] * HD + d[None, :], acc, mask=out_m)
        tl.store(part_ml + base * 2, m_i, mask=valid)
        tl.store(part_ml + base * 2 + 1, l_i, mask=valid)
    else:
        out = acc / l_i[:, None]
        if GATE:
            g = tl.load(gate + (tok * s_gn + head * s_gh)[:, None] + d[None, :], mask=out_m, other=0.0)
            out = out * tl.sigmoid(g.to(tl.float32))
        tl.store(o + (tok * NH + head)[:, None] * HD + d[None, :], out.to(o.dtype.element_ty), mask=out_m)


@triton.jit
def _combine_kernel(part_o, part_ml, o, gate, s_gn, s_gh, N, NH, SPLITS, HD: tl.constexpr, BLOCK_D: tl.constexpr,
                    BLOCK_S: tl.constexpr, GATE: tl.constexpr):  # fmt: skip
    tok = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    s = tl.arange(0, BLOCK_S)
    sm = s < SPLITS
    base = (s * N + tok) * NH + head
    m = tl.load(part_ml + base * 2, mask=sm, other=float("-inf"))
    l_s = tl.load(part_ml + base * 2 + 1, mask=sm, other=0.0)
    M = tl.max(m, 0)  # split 0 always holds key 0, so M is finite
    w = tl.where(sm, tl.exp(m - M), 0.0)
    denom = tl.sum(w * l_s, 0)
    d = tl.arange(0, BLOCK_D)
    dm = d < HD
    acc = tl.zeros([BLOCK_D], tl.float32)
    for i in range(0, SPLITS):
        wi = tl.sum(tl.where(s == i, w, 0.0), 0)
        acc += wi * tl.load(part_o + ((i * N + tok) * NH + head) * HD + d, mask=dm, other=0.0)
    out = acc / denom
    if GATE:
        out = out * tl.sigmoid(tl.load(gate + tok * s_gn + head * s_gh + d, mask=dm, other=0.0).to(tl.float32))
    tl.store(o + (tok * NH + head) * HD + d, out.to(o.dtype.element_ty), mask=dm)


def _check(q, k_cache, v_cache, block_table, rows, start, T, gate, scale, validate):
    check_tensor("q", q, ndim=3, dtypes=ACT_DTYPES)
    N, nH, hd = q.shape
    if gate is not None:
        check_tensor("gate", gate, shape=(N, nH, hd), dtypes=(q.dtype,), device=q.device, contiguous=False)
        if gate.stride(2) != 1:
            raise ValueError(f"gate must have a unit last stride, got stride {gate.stride()}")
    check_tensor("k_cache", k_cache, ndim=4, dtypes=(q.dtype,), device=q.device)
    P, PS, nKV, hd_k = k_cache.shape
    check_tensor("v_cache", v_cache, shape=tuple(k_cache.shape), dtypes=(q.dtype,), device=q.device)
    if hd_k != hd or nH % nKV:
        raise ValueError(f"k_cache [P, page, nKV, hd] must have hd={hd} and nKV dividing nH={nH}, got "
                         f"{tuple(k_cache.shape)}")  # fmt: skip
    check_tensor("block_table", block_table, ndim=2, dtypes=(torch.int32,), device=q.device)
    check_tensor("rows", rows, ndim=1, dtypes=(torch.int64,), device=q.device)
    B = rows.shape[0]
    check_tensor("start", start, shape=(B,), dtypes=(torch.int64,), device=q.device)
    if not isinstance(T, int) or isinstance(T, bool) or T < 1:
        raise ValueError(f"T must be an int >= 1 (queries per window), got {T!r}")
    if N != B * T:
        raise ValueError(f"q must hold B*T = {B}*{T} tokens, got {N}")
    scale = check_scale(scale, hd)
    check_flags(validate=validate)
    if validate and B and values_checkable(rows, start, block_table):
        _check_values(block_table, rows, start, T, P, PS)
    return N, nH, hd, PS, nKV, scale


def _used(start, T: int, PS: int, max_pages: int) -> torch.Tensor:
    """[B, max_pages] bool: the table columns each row's keys (start + T of them) occupy, the only ones read."""
    return torch.arange(max_pages, device=start.device)[None, :] < ((start + T + PS - 1) // PS)[:, None]


def _check_values(block_table, rows, start, T, P, PS) -> None:
    """The values ``validate`` reads back: rows of the table, committed lengths whose windows fit the table, page
    ids of the cache's pages wherever a row's keys are read (a kernel would read outside the cache)."""
    R, max_pages = block_table.shape
    if not bool(((rows >= 0) & (rows < R)).all()):
        raise ValueError(f"rows must lie in [0, {R}) (block_table's rows), got {rows.tolist()[:16]}")
    if not bool(((start >= 0) & (start + T <= max_pages * PS)).all()):
        raise ValueError(f"start must lie in [0, {max_pages * PS - T}] (the table's {max_pages} pages of {PS} "
                         f"tokens hold each row's start + T keys), got {start.tolist()[:16]}")  # fmt: skip
    pages = block_table[rows.long()]
    if not bool(((pages >= 0) & (pages < P) | ~_used(start, T, PS, max_pages)).all()):
        raise ValueError(f"block_table holds page ids outside [0, {P}) (k_cache's pages) where these rows' keys "
                         "are read")  # fmt: skip


def paged_attention_reference(q, k_cache, v_cache, block_table, rows, start, *, T: int, scale: float | None, gate=None,
                              validate: bool = True):  # fmt: skip
    """PyTorch reference of ``paged_attention`` (same signature): dense gather of every page, SDPA with a mask,
    then the gate in fp32."""
    N, nH, hd, PS, nKV, scale = _check(q, k_cache, v_cache, block_table, rows, start, T, gate, scale, validate)
    B, max_pages = rows.shape[0], block_table.shape[1]
    pages = torch.where(_used(start, T, PS, max_pages), block_table[rows].long(), 0)  # unused ids never read
    keys = k_cache[pages].reshape(B, max_pages * PS, nKV, hd)
    vals = v_cache[pages].reshape(B, max_pages * PS, nKV, hd)
    pos = start[:, None] + torch.arange(T, device=q.device)[None, :]  # [B, T]
    mask = torch.arange(max_pages * PS, device=q.device)[None, None, :] <= pos[:, :, None]
    o = F.scaled_dot_product_attention(q.view(B, T, nH, hd).transpose(1, 2), keys.transpose(1, 2),
                                       vals.transpose(1, 2), attn_mask=mask[:, None], scale=scale,
                                       enable_gqa=True)  # fmt: skip
    o = o.transpose(1, 2).reshape(N, nH, hd)
    if gate is None:
        return o
    return (o.float() * torch.sigmoid(gate.float())).to(q.dtype)


def num_splits(B: int, nKV: int, max_pages: int) -> int:
    """Splits of each row's pages so that a launch has about ``TARGET_PROGRAMS`` programs (static per shape)."""
    return max(1, min(max_pages, TARGET_PROGRAMS // max(1, B * nKV)))


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                    rows: torch.Tensor, start: torch.Tensor, *, T: int, scale: float | None,
                    gate: torch.Tensor | None = None, validate: bool = True, impl: str = "auto"):  # fmt: skip
    """Causal attention of B windows of T queries over their rows' cached keys (see the module docstring).
    ``gate`` [N, nH, hd] (q's dtype, unit last stride, other strides free): the output is multiplied by
    ``sigmoid(gate)`` before its one rounding to q's dtype (Qwen3.5's gated attention output).

    Returns o [B*T, nH, hd] in q's dtype. Mutates nothing. The kernel reads no value back, so it can be captured
    in a CUDA graph; the number of splits depends only on the shapes. ``validate`` (default; skipped while a graph is
    captured) reads ``rows``, ``start`` and the rows' used page ids back and refuses any outside the table or the
    cache (the kernel would read outside them); ``KVCache.attend``, whose indices are its own, turns it off.
    ``scale`` is a finite positive Python number, or None for ``hd ** -0.5``."""
    N, nH, hd, PS, nKV, scale = _check(q, k_cache, v_cache, block_table, rows, start, T, gate, scale, validate)
    if not use_triton(impl, q):
        return paged_attention_reference(q, k_cache, v_cache, block_table, rows, start, T=T, scale=scale, gate=gate,
                                         validate=False)  # fmt: skip
    if PS < MIN_PAGE_SIZE or PS & (PS - 1):
        raise ValueError(f"the kernel needs a page size that is a power of two >= {MIN_PAGE_SIZE}, got {PS}")
    B, max_pages = rows.shape[0], block_table.shape[1]
    G = nH // nKV
    o = torch.empty_like(q)
    if N == 0:
        return o
    splits = num_splits(B, nKV, max_pages)
    per = triton.cdiv(max_pages, splits)
    splits = triton.cdiv(max_pages, per)
    part_o = torch.empty(splits, N, nH, hd, dtype=torch.float32, device=q.device) if splits > 1 else o
    part_ml = torch.empty(splits, N, nH, 2, dtype=torch.float32, device=q.device) if splits > 1 else o
    block_d = max(16, triton.next_power_of_2(hd))
    g, s_gn, s_gh = (q, 0, 0) if gate is None else (gate, gate.stride(0), gate.stride(1))
    _attn_kernel[(B, nKV, splits)](q, k_cache, v_cache, block_table, rows, start, o, part_o, part_ml, g, s_gn, s_gh,
                                   block_table.stride(0), nH, nKV, N, per, scale, T=T, G=G, HD=hd, BLOCK_D=block_d,
                                   PS=PS, BLOCK_M=max(16, triton.next_power_of_2(G * T)), SPLIT=splits > 1,
                                   GATE=gate is not None, IEEE=q.dtype == torch.float32, F32_DOTS=INTERPRET,
                                   num_warps=8 if block_d * PS >= 16384 else 4)  # fmt: skip
    if splits > 1:
        _combine_kernel[(N, nH)](part_o, part_ml, o, g, s_gn, s_gh, N, nH, splits, HD=hd, BLOCK_D=block_d,
                                 BLOCK_S=triton.next_power_of_2(splits), GATE=gate is not None)  # fmt: skip
    return o
