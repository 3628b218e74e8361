"""First launch of ``gdn_replay_verify``: what a window needs that depends on the key head only.

One program per (request, key head), shared by the ``HV / H`` value heads and all row blocks of the
main kernel, which would otherwise each recompute it:

- the window's keys and queries normalised with the pinned ``_l2norm`` (bitwise the keys the
  baseline normalises), the keys appended to the ring, both staged in ``X [B, H, 2BT, K]``
  (``k^_0..k^_{BT-1}``, then ``q^_s * scale``; rows past the window are zero);
- their Gram matrices ``GR [B, H, 2, BT, BT]``: ``k^_s . k^_r`` and ``q^_s . k^_r``;
- for a row that does not fold this step, the history dots ``C [B, H, L, 2BT]``:
  ``k^_j . x`` of every committed record j against every window vector x.

Nothing here depends on the value head's gates; the main kernel applies them.
"""

from __future__ import annotations

import triton.language as tl  # noqa: F401  (the interpreter looks for it in a kernel's globals)

from ._gluon import gl, jit
from ._pinned import _l2norm


@jit
def _window_prep_kernel(
    q, k, slots, cu_seqlens, ring_k, write_pos, base, flush, scale, X, GR, C,
    H: tl.constexpr, K: tl.constexpr, L: tl.constexpr, BT: tl.constexpr, ROW: tl.constexpr, XL: tl.constexpr,
    L3: tl.constexpr, SMEM: tl.constexpr,
):  # fmt: skip
    i_h = gl.program_id(0)
    i_b = gl.program_id(1)
    slot = gl.load(slots + i_b)
    xs = gl.allocate_shared_memory(gl.float32, [2 * BT, K], SMEM)
    if slot >= 0:
        bos = gl.load(cu_seqlens + i_b)
        T = gl.load(cu_seqlens + i_b + 1) - bos
        wp = gl.load(write_pos + slot)
        bs = gl.load(base + slot)
        n_hist = gl.where(gl.load(flush + slot) != 0, 0, wp)  # a folding row has no history left
        rk = ring_k + (slot.to(gl.int64) * H + i_h) * L * K
        head = i_b.to(gl.int64) * H + i_h
        xb = X + head * (2 * BT * K)
        cols = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, ROW)), 0)  # [1, K]
        for s in gl.static_range(BT):
            live = s < T
            t64 = bos.to(gl.int64) + gl.minimum(s, T - 1)
            khat = _l2norm(gl.where(live, gl.load(k + (t64 * H + i_h) * K + cols).to(gl.float32), 0.0))
            qhat = _l2norm(gl.where(live, gl.load(q + (t64 * H + i_h) * K + cols).to(gl.float32), 0.0)) * scale
            xs.slice(s, 1, dim=0).store(khat)
            xs.slice(BT + s, 1, dim=0).store(qhat)
            gl.store(xb + s * K + cols, khat)
            gl.store(xb + (BT + s) * K + cols, qhat)
            if live:
                gl.store(rk + ((bs + wp + s) & (L - 1)) * K + cols, khat)
        gl.thread_barrier()

        # Gram matrices of the window (dim 0 = s, dim 1 = r).
        M2: gl.constexpr = gl.SliceLayout(2, L3)
        i0 = gl.arange(0, BT, layout=gl.SliceLayout(1, M2))
        i1 = gl.arange(0, BT, layout=gl.SliceLayout(0, M2))
        xk0 = xs.slice(0, BT, dim=0).load(gl.SliceLayout(1, L3))
        xk1 = xs.slice(0, BT, dim=0).load(gl.SliceLayout(0, L3))
        xq0 = xs.slice(BT, BT, dim=0).load(gl.SliceLayout(1, L3))
        kk = gl.sum(gl.expand_dims(xk0, 1) * gl.expand_dims(xk1, 0), axis=2)
        qk = gl.sum(gl.expand_dims(xq0, 1) * gl.expand_dims(xk1, 0), axis=2)
        p_gr = GR + head * (2 * BT * BT) + gl.expand_dims(i0, 1) * BT + gl.expand_dims(i1, 0)
        gl.store(p_gr, kk)
        gl.store(p_gr + BT * BT, qk)

        # History dots against every window vector.
        xw = xs.load(XL)  # [2BT, K]
        xcols = gl.arange(0, K, layout=gl.SliceLayout(0, XL))
        xrows = gl.arange(0, 2 * BT, layout=gl.SliceLayout(1, XL))
        cb = C + head * (L * 2 * BT)
        for j in range(0, n_hist):
            kj = gl.load(rk + ((bs + j) & (L - 1)) * K + xcols)
            gl.store(cb + j * (2 * BT) + xrows, gl.sum(xw * gl.expand_dims(kj, 0), axis=1))
