"""Closed-loop exact fold: replay a slot's committed ring records into its checkpoint.

Every record is fed through ``_recurrent_update`` -- the very helper the baseline runs -- from the
raw ``k, v`` and the stored ``g, beta`` (bitwise what the baseline computed), on the same tile
shape and warp count (``launch_config``). The folded checkpoint is therefore bitwise the state the
recurrent baseline holds after the same accepted tokens.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import _fold_records, launch_config, recurrent_update_reference, use_triton
from ._validate import check_slots, check_state, check_tensor, values_checkable
from .cursors import ring_mark_folded
from .ring import Ring


@triton.jit
def _gdn_exact_fold_kernel(
    checkpoint, out, slots, ring_k, ring_v, ring_g, ring_beta, write_pos, base, flush,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr, L: tl.constexpr,
    TO_OUT: tl.constexpr, ONLY_FLUSHING: tl.constexpr,
):  # fmt: skip
    i_v, i_hv, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    slot = tl.load(slots + i_b)
    run = slot >= 0
    if ONLY_FLUSHING:
        run = run & (tl.load(flush + tl.maximum(slot, 0)) != 0)
    if run:
        i_h = i_hv // (HV // H)
        s64 = slot.to(tl.int64)
        offs_v = i_v * BV + tl.arange(0, BV)
        offs_k = tl.arange(0, K)
        tile = (i_hv * V + offs_v[:, None]) * K + offs_k[None, :]
        h = tl.load(checkpoint + s64 * HV * V * K + tile)
        wp = tl.load(write_pos + slot)
        bs = tl.load(base + slot)
        rk = ring_k + (s64 * H + i_h) * L * K
        rv = ring_v + (s64 * HV + i_hv) * L * V
        rg = ring_g + (s64 * HV + i_hv) * L
        rb = ring_beta + (s64 * HV + i_hv) * L
        h = _fold_records(h, rk, rv, rg, rb, wp, bs, offs_k, offs_v, K, V, L)
        if TO_OUT:
            tl.store(out + i_b.to(tl.int64) * HV * V * K + tile, h)
        else:
            tl.store(checkpoint + s64 * HV * V * K + tile, h)


def fold_flushing_rows(checkpoint, ring: Ring, slots: torch.Tensor) -> None:
    """Fold, in place, the history of every row of ``slots`` whose ring says flush; cursors untouched.

    The first launch of ``gdn_replay_verify`` on the GPU. Device-only (no host read of the flags).
    """
    H, L, K = ring.k.shape[1:]
    HV, V = ring.v.shape[1], ring.v.shape[3]
    BV, num_warps = launch_config(K, V)
    c = ring.cursors
    _gdn_exact_fold_kernel[(V // BV, HV, slots.shape[0])](
        checkpoint, checkpoint, slots, ring.k, ring.v, ring.g, ring.beta, c.write_pos, c.base, c.flush,
        H=H, HV=HV, K=K, V=V, BV=BV, L=L, TO_OUT=False, ONLY_FLUSHING=True, num_warps=num_warps,
    )  # fmt: skip


def fold_slot_reference(h: torch.Tensor, ring: Ring, slot: int, positions) -> torch.Tensor:
    """Replay the ring records at physical ``positions`` of ``slot`` onto h [HV, V, K]; returns the result.

    Shared by the fold reference and the flush path of the verify reference.
    """
    H, HV = ring.k.shape[1], ring.v.shape[1]
    for p in positions:
        k_j = ring.k[slot, :, p].float().repeat_interleave(HV // H, dim=0).contiguous()
        v_j = ring.v[slot, :, p].float().contiguous()
        h = recurrent_update_reference(h, k_j, v_j, ring.g[slot, :, p].contiguous(), ring.beta[slot, :, p].contiguous())
    return h


def history_positions(ring: Ring, slot: int) -> list[int]:
    """Physical ring indices of the committed, unfolded records of ``slot``, oldest first."""
    wp, bs = int(ring.cursors.write_pos[slot]), int(ring.cursors.base[slot])
    return [(bs + j) & (ring.L - 1) for j in range(wp)]


def gdn_exact_fold_reference(checkpoint, ring, slots, *, out=None, empty_history=True):
    """PyTorch reference of ``gdn_exact_fold`` (same signature and effects)."""
    for i, slot in enumerate(slots.tolist()):
        if slot < 0:
            continue
        h = fold_slot_reference(checkpoint[slot], ring, slot, history_positions(ring, slot))
        if out is not None:
            out[i] = h
        else:
            checkpoint[slot] = h
    if out is None and empty_history:
        ring_mark_folded(ring, slots, validate=False, impl="reference")
    return out if out is not None else checkpoint


def _check(checkpoint, ring, slots, out, validate):
    if not isinstance(ring, Ring):
        raise TypeError(f"ring must be a Ring, got {type(ring).__name__}")
    H, L, K = ring.k.shape[1:]
    HV, V = ring.v.shape[1], ring.v.shape[3]
    S = check_state("checkpoint", checkpoint, HV, V, K, ring.k.device)
    if S != ring.num_slots:
        raise ValueError(f"checkpoint has {S} slots, ring has {ring.num_slots}")
    check_tensor("slots", slots, ndim=1, dtypes=(torch.int32,), device=checkpoint.device)
    if out is not None:
        check_tensor("out", out, shape=(slots.shape[0], HV, V, K), dtypes=(torch.float32,), device=checkpoint.device)
    if validate and values_checkable(slots):
        check_slots("slots", slots, S)
    return H, HV, K, V


def gdn_exact_fold(
    checkpoint: torch.Tensor,
    ring: Ring,
    slots: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
    empty_history: bool = True,
    validate: bool = True,
    impl: str = "auto",
) -> torch.Tensor:
    """Fold every committed record of ``slots`` into their checkpoints, bitwise like the baseline.

    checkpoint: [S, HV, V, K] fp32; ring: this layer's ``Ring``; slots: [B] int32 (-1 skipped).
    Default: mutates ``checkpoint[slots]`` and, with ``empty_history=True``, the shared cursors
    (``ring_mark_folded``: history emptied). Several layers sharing one set of cursors: pass
    ``empty_history=False`` for each and call ``ring_mark_folded`` once after the last layer.
    With ``out`` ([B, HV, V, K] fp32) the folded states go to ``out[i]`` and nothing else is
    touched: the committed state, materialised without mutation. Returns ``out`` or ``checkpoint``.
    """
    H, HV, K, V = _check(checkpoint, ring, slots, out, validate)
    if not use_triton(impl, checkpoint):
        return gdn_exact_fold_reference(checkpoint, ring, slots, out=out, empty_history=empty_history)
    B = slots.shape[0]
    if B:
        BV, num_warps = launch_config(K, V)
        c = ring.cursors
        _gdn_exact_fold_kernel[(V // BV, HV, B)](
            checkpoint, out if out is not None else checkpoint, slots, ring.k, ring.v, ring.g, ring.beta,
            c.write_pos, c.base, c.flush, H=H, HV=HV, K=K, V=V, BV=BV, L=ring.L, TO_OUT=out is not None,
            ONLY_FLUSHING=False, num_warps=num_warps,
        )  # fmt: skip
    if out is None and empty_history:
        ring_mark_folded(ring, slots, validate=False, impl="triton")
    return out if out is not None else checkpoint
