"""The pinned recurrent update: the one piece of code whose bits the baseline and the exact fold share.

Every kernel that advances a GDN state (``gdn_recurrent``, ``gdn_exact_fold``, the fold inside
``gdn_replay_verify``) holds its ``[BV, K]`` fp32 tile in ``tile_layout`` and calls ``_update`` (via
``_fold_records`` for ring records) with a key normalised by ``_l2norm`` on the tile's column layout.
A row's ``sum_K`` is then always the same sequence of instructions: 4 contiguous K-elements per
register chunk, ``K / 32`` chunks in each thread accumulated in register order, then a butterfly
over the 8 K-lanes of the warp. How many rows a thread, a warp or a program holds does not enter a
row's arithmetic, so launches may size their programs freely; the K-split may never change in one
kernel without the others (docs/kernels.md). Eight K-lanes rather than four (2026-12-02): a row's
chain is half as long and a thread holds twice the rows for the same registers, so a record's update
has twice the independent work to hide its latency (fold -13% per record on an H200, bench/NOTES.md).
The butterfly leaves every row's sum in every lane; a reduce-scatter of the same pairs (each lane
finishing one row: 224 instead of 248 instructions a record) was bitwise and 30% slower, its dependent
chain longer at the register cap (bench/NOTES.md, fourteenth session).

The contract, per record (``e = exp(g)``, ``k^`` the normalised key, in the order of docs/design.md, "the math"):
``h *= e; r = (v - sum_K(h * k^)) * beta; h += k^ (x) r``.
"""

from __future__ import annotations

import torch
import triton.language as tl

from ._gluon import gl, jit
from .ring import MARK_ROWS

K_CHUNK = 4  # contiguous K-elements per register chunk (one 16-byte load)
K_LANES = 8  # lanes of a warp along K
ROW_LANES = 32 // K_LANES  # lanes of a warp along the rows


def tile_layout(num_warps: int, rows_per_thread: int = 1):
    """The register layout of a ``[rows, K]`` state tile: rows over 4 lanes x ``num_warps``, K pinned."""
    return gl.BlockedLayout([rows_per_thread, K_CHUNK], [ROW_LANES, K_LANES], [num_warps, 1], [1, 0])


def tile_rows(num_warps: int, rows_per_thread: int = 1) -> int:
    """Rows of one ``tile_layout`` block (the sub-block a program loads at once)."""
    return ROW_LANES * num_warps * rows_per_thread


assert ROW_LANES == MARK_ROWS, "a fold marker covers the rows of the smallest tile (one warp, one row per thread)"
MARK = tl.constexpr(MARK_ROWS)  # the same, as a constant the kernels can read


@jit
def _fma_combine(acc, w_acc, x, w_x):
    """Reduction step of ``_dot_rows``: (acc, w_acc) + (x, w_x) = (x * w_x + acc * w_acc, 1) with an explicit
    fused multiply-add. A partial sum carries weight 1 (the multiply by 1 folds away); a fresh element
    carries its second factor, so every product enters the running sum through one ``fma``."""
    return gl.fma(x, w_x, acc * w_acc), 1.0


@jit
def _dot_rows(a, b):
    """Row-wise sum_K(a * b) of two [rows, K] fp32 tensors in ``tile_layout``, as one ``fma`` chain per thread
    (register order) followed by the butterfly over the K-lanes.

    ``gl.sum(a * b)`` would leave the first ``fadd(mul, mul)`` of every thread's chain to the compiler,
    which fuses either product depending on the surrounding code: two kernels then round differently
    (seen on the H200: 1 ulp between the baseline and the fold). Here no choice is left."""
    return gl.reduce((a, b), 1, _fma_combine)[0]


@jit
def _l2norm(x):
    """x / sqrt(sum(x*x) + 1e-6) for a [1, K] fp32 row in ``tile_layout`` (K reduced like a tile row).

    Every normalised key in replayssm comes from here, so the ring's ``k^`` records are bitwise the
    keys the baseline normalises itself."""
    return x * gl.expand_dims(1.0 / gl.sqrt(_dot_rows(x, x) + 1e-6), 1)


@jit
def _gating(a, b, A_log, dt_bias):
    """g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b); elementwise fp32."""
    x = a + dt_bias
    softplus = gl.where(x <= 20.0, gl.log(1.0 + gl.exp(gl.minimum(x, 20.0))), x)
    g = -gl.exp(A_log) * softplus
    beta = 1.0 / (1.0 + gl.exp(-b))
    return g, beta


@jit
def _update(h, khat, v, e, beta):
    """One delta-rule step on a [BV, K] fp32 tile (the pinned contract, see the module docstring).

    h: [BV, K] in ``tile_layout``; khat: [1, K] normalised key (same layout); v: [BV] fp32 (rows of
    the tile's row layout); e = exp(g), beta: fp32 scalars."""
    h = h * e
    hb, kb = gl.broadcast(h, khat)
    r = (v - _dot_rows(hb, kb)) * beta
    return gl.fma(khat, gl.expand_dims(r, 1), h)


@jit
def _fold_records(h, rk, rv, rg, rb, n, start, rows, cols, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr):
    """Replay ``n`` ring records (physical ``(start + j) & (L - 1)``) onto the tile h with ``_update``.

    rk: this (slot, key head)'s [L, K] fp32 normalised keys; rv: this (slot, value head)'s [L, V] raw
    values; rg, rb: its [L] fp32 gates. rows: [BV] row indices; cols: [1, K] column indices. The next
    record is fetched while the current one is applied (its values, not the order of work, matter)."""
    p = start & (L - 1)
    khat_n = gl.load(rk + p * K + cols)
    v_n = gl.load(rv + p * V + rows)
    g_n = gl.load(rg + p)
    b_n = gl.load(rb + p)
    for j in range(0, n):
        khat, v, g, beta = khat_n, v_n.to(gl.float32), g_n, b_n
        p = (start + gl.minimum(j + 1, n - 1)) & (L - 1)
        khat_n = gl.load(rk + p * K + cols)
        v_n = gl.load(rv + p * V + rows)
        g_n = gl.load(rg + p)
        b_n = gl.load(rb + p)
        h = _update(h, khat, v, gl.exp(g), beta)
    return h


def l2norm_reference(x: torch.Tensor) -> torch.Tensor:
    """PyTorch twin of ``_l2norm``: row-wise over the last dim, fp32."""
    return x * (1.0 / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6))


def gating_reference(a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor):
    """PyTorch twin of ``_gating``; a, b: [..., HV] any float dtype -> (g, beta) fp32."""
    x = a.float() + dt_bias.float()
    softplus = torch.where(x <= 20.0, torch.log(1.0 + torch.exp(torch.clamp(x, max=20.0))), x)
    g = -torch.exp(A_log.float()) * softplus
    beta = 1.0 / (1.0 + torch.exp(-b.float()))
    return g, beta


def update_reference(h, khat, v, g, beta):
    """PyTorch twin of ``_update`` for one request: the single source of the CPU state update.

    h: [HV, V, K] fp32 (not modified); khat: [HV, K] normalised key, expanded to value heads; v: [HV, V]
    fp32; g, beta: [HV] fp32. Returns the new [HV, V, K] state. Always called with these shapes so the
    CPU baseline and the CPU fold take the same reduction path."""
    h = h * torch.exp(g)[:, None, None]
    r = (v - (h * khat[:, None, :]).sum(-1)) * beta[:, None]
    return h + khat[:, None, :] * r[:, :, None]
