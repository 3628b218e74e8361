"""Fold ahead: after a small batch's commit, fold every layer of the rows that will flush at their next verify.

The ring protocol folds a row's history when its ring says ``flush``, inside the next verify, where the fold reads
the checkpoint the verify streams anyway (``verify_kernel``). At a batch that fits in one wave of main-kernel programs
(B=8 at the 122B geometry) that fold is the step's critical path: one program per head folds its 128 rows as two
blocks, a serial chain of ``2 x records`` pinned updates per layer, while most of the GPU has nothing left to do.
``gdn_fold_ahead`` instead folds those rows right after ``ring_commit`` flags them, in one launch for every layer:
four programs per head (``launch.resolve("fold_ahead")``: 32 rows each), each walking the layers with the next layer's
records and state rows copied in while one folds. The fold becomes throughput-bound work spread over the whole GPU,
and the next verify streams those rows with an empty history, like any other.

The effect is ``GDNStatePool.flush`` of the flushing rows: in every layer the history is replayed through the pinned
``_update`` (``verify_fold._fold_staged``: the same code on the same records as the verify's own fold, so the
checkpoints are bitwise the same), blocks already marked with the slot's epoch are not folded twice, and the cursors
then move as ``ring_mark_folded`` moves them (``base += write_pos``, the rest 0, ``epoch`` advanced). The committed
state does not change; only when the fold's arithmetic runs does. ``fold_ahead_pays`` says where it is used.
"""

from __future__ import annotations

import functools

import torch
import triton.language as tl  # noqa: F401  (the interpreter looks for it in a kernel's globals)

from .._env import switch
from . import launch
from ._common import use_triton
from ._gluon import async_copy, check_interpretable, gl, jit
from ._pinned import MARK
from ._validate import check_flags, check_no_overlap, check_slots, check_state, check_tensor, named, values_checkable
from .cursors import _ring_mark_folded_kernel, check_none_pending, mark_reference
from .fold import fold_slot_reference, folded_this_epoch, history_positions
from .ring_layers import RingLayers
from .verify_fold import _fold_staged


@jit
def _issue_layer(ckpt, rk, rv, rg, rb, live, n, start, r0, ks, vs, gs, bs_, hs, K: tl.constexpr, V: tl.constexpr,
                 L: tl.constexpr, BVP: tl.constexpr, CP2: tl.constexpr, CPV: tl.constexpr,
                 CPG: tl.constexpr):  # fmt: skip
    """One copy group of a layer's fold: its ``n`` records (keys, this program's values, gates and betas, in logical
    order) and its ``BVP`` state rows from ``r0``, into shared memory. Nothing is copied unless ``live``."""
    jk = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CP2)), 1)
    kc = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, CP2)), 0)
    async_copy.async_copy_global_to_shared(ks, rk + ((start + jk) & (L - 1)) * K + kc, mask=(jk < n) & live)
    jv = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CPV)), 1)
    rc = gl.expand_dims(gl.arange(0, BVP, layout=gl.SliceLayout(0, CPV)), 0)
    async_copy.async_copy_global_to_shared(vs, rv + ((start + jv) & (L - 1)) * V + r0 + rc, mask=(jv < n) & live)
    jg = gl.expand_dims(gl.arange(0, L, layout=gl.SliceLayout(1, CPG)), 1)
    pg = (start + jg) & (L - 1)
    async_copy.async_copy_global_to_shared(gs, rg + pg, mask=(jg < n) & live)
    async_copy.async_copy_global_to_shared(bs_, rb + pg, mask=(jg < n) & live)
    br = gl.expand_dims(gl.arange(0, BVP, layout=gl.SliceLayout(1, CP2)), 1)
    async_copy.async_copy_global_to_shared(hs, ckpt + (r0 + br) * K + kc, mask=(br < BVP) & live)
    async_copy.commit_group()


@jit
def _fold_layer(layer, NL, S, slot, i_hv, i_h, ep, n, start, r0, todo, checkpoint, ring_k, ring_v, ring_g, ring_beta,
                ring_folded, ks, vs, gs, bs_, hs, ks_n, vs_n, gs_n, bs_n, hs_n, H: tl.constexpr, HV: tl.constexpr,
                K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, BV: tl.constexpr, BVP: tl.constexpr,
                TILE: tl.constexpr, CP2: tl.constexpr, CPV: tl.constexpr, CPG: tl.constexpr,
                ROWS1: tl.constexpr):  # fmt: skip
    """Fold ``layer`` from the buffers its copy group filled (``ks .. hs``; ``todo``: its markers were not this
    epoch's), after issuing the next layer's group into the other buffers (``ks_n .. hs_n``), so that the next
    layer's records and state arrive while this one folds. Returns the next layer's ``todo``."""
    nxt = layer + 1
    ln = slot.to(gl.int64) + gl.minimum(nxt, NL - 1) * S  # (layer, slot) of the next layer (this one's, if none)
    _issue_layer(checkpoint + (ln * HV + i_hv) * V * K, ring_k + (ln * H + i_h) * L * K,
                 ring_v + (ln * HV + i_hv) * L * V, ring_g + (ln * HV + i_hv) * L, ring_beta + (ln * HV + i_hv) * L,
                 nxt < NL, n, start, r0, ks_n, vs_n, gs_n, bs_n, hs_n, K, V, L, BVP, CP2, CPV, CPG)  # fmt: skip
    todo_n = (gl.load(ring_folded + (ln * HV + i_hv) * (V // MARK) + r0 // MARK) != ep) & (nxt < NL)
    async_copy.wait_group(1)  # this layer's group has landed (the next one's may still be in flight)
    gl.thread_barrier()  # ... for every thread; and every thread has read this layer's marker
    if todo:
        ls = slot.to(gl.int64) + layer * S
        ckpt = checkpoint + (ls * HV + i_hv) * V * K
        marks = ring_folded + (ls * HV + i_hv) * (V // MARK)
        ks_rows = ks._reinterpret(gl.float32, [L, K], ROWS1)
        vs_rows = vs._reinterpret(ring_v.dtype.element_ty, [L, BVP], ROWS1)
        gs_rows = gs._reinterpret(gl.float32, [L, 1], ROWS1)
        bs_rows = bs_._reinterpret(gl.float32, [L, 1], ROWS1)
        rows0 = r0 + gl.arange(0, BV, layout=gl.SliceLayout(1, TILE))
        cols = gl.expand_dims(gl.arange(0, K, layout=gl.SliceLayout(0, TILE)), 0)
        m = gl.arange(0, BV // MARK, layout=gl.SliceLayout(1, TILE))
        for blk in gl.static_range(BVP // BV):
            h = hs.slice(blk * BV, BV, dim=0).load(TILE)
            h = _fold_staged(h, ks_rows, vs_rows, gs_rows, bs_rows, n, blk * BV, BV, TILE)
            gl.store(ckpt + gl.expand_dims(rows0 + blk * BV, 1) * K + cols, h)
            gl.store(marks + (r0 + blk * BV) // MARK + m, gl.full([BV // MARK], 0, gl.int32,
                                                                   layout=gl.SliceLayout(1, TILE)) + ep)  # fmt: skip
    gl.thread_barrier()  # every thread is done with these buffers: the layer after next may take them
    return todo_n


@jit(do_not_specialize=["NL", "S"])  # a one-layer kernel specialised on NL == 1 broke Triton 3.6's lowering (sm_90)
def _fold_ahead_kernel(
    slots, write_pos, base, flush, epoch, checkpoint, ring_k, ring_v, ring_g, ring_beta, ring_folded, NL, S,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, BV: tl.constexpr,
    BVP: tl.constexpr, TILE: tl.constexpr, CP2: tl.constexpr, CPV: tl.constexpr, CPG: tl.constexpr,
    SMEM: tl.constexpr, ROWS1: tl.constexpr, SMEM_H: tl.constexpr,
):  # fmt: skip
    # requests vary fastest, so every wave of programs holds some of each (a request's programs one after the other
    # measured the same on an H200: 23.0 vs 23.2 us at T=4, B=8)
    i_b = gl.program_id(0)
    i_hv = gl.program_id(1)
    i_p = gl.program_id(2)  # which BVP rows of the head
    # two sets of buffers: a layer's records and state rows land in one while the layer before folds from the other
    ks = gl.allocate_shared_memory(gl.float32, [L, K], SMEM)
    vs = gl.allocate_shared_memory(ring_v.dtype.element_ty, [L, BVP], SMEM)
    gs = gl.allocate_shared_memory(gl.float32, [L, 1], SMEM)
    bs_ = gl.allocate_shared_memory(gl.float32, [L, 1], SMEM)
    hs = gl.allocate_shared_memory(gl.float32, [BVP, K], SMEM_H)
    ks2 = gl.allocate_shared_memory(gl.float32, [L, K], SMEM)
    vs2 = gl.allocate_shared_memory(ring_v.dtype.element_ty, [L, BVP], SMEM)
    gs2 = gl.allocate_shared_memory(gl.float32, [L, 1], SMEM)
    bs2 = gl.allocate_shared_memory(gl.float32, [L, 1], SMEM)
    hs2 = gl.allocate_shared_memory(gl.float32, [BVP, K], SMEM_H)
    slot = gl.load(slots + i_b)
    if slot >= 0:
        fl = gl.load(flush + slot)
        n = gl.load(write_pos + slot)
        start = gl.load(base + slot)
        ep = gl.load(epoch + slot)
        if fl != 0:
            i_h = i_hv // (HV // H)
            r0 = i_p * BVP
            l0 = slot.to(gl.int64)
            _issue_layer(checkpoint + (l0 * HV + i_hv) * V * K, ring_k + (l0 * H + i_h) * L * K,
                         ring_v + (l0 * HV + i_hv) * L * V, ring_g + (l0 * HV + i_hv) * L,
                         ring_beta + (l0 * HV + i_hv) * L, NL > 0, n, start, r0, ks, vs, gs, bs_, hs, K, V, L, BVP,
                         CP2, CPV, CPG)  # fmt: skip
            todo = gl.load(ring_folded + (l0 * HV + i_hv) * (V // MARK) + r0 // MARK) != ep
            for lp in range(0, NL, 2):  # two layers per turn, so each set of buffers has a fixed role
                todo = _fold_layer(lp, NL, S, slot, i_hv, i_h, ep, n, start, r0, todo, checkpoint, ring_k, ring_v,
                                   ring_g, ring_beta, ring_folded, ks, vs, gs, bs_, hs, ks2, vs2, gs2, bs2, hs2, H, HV,
                                   K, V, L, BV, BVP, TILE, CP2, CPV, CPG, ROWS1)  # fmt: skip
                if lp + 1 < NL:
                    todo = _fold_layer(lp + 1, NL, S, slot, i_hv, i_h, ep, n, start, r0, todo, checkpoint, ring_k,
                                       ring_v, ring_g, ring_beta, ring_folded, ks2, vs2, gs2, bs2, hs2, ks, vs, gs,
                                       bs_, hs, H, HV, K, V, L, BV, BVP, TILE, CP2, CPV, CPG, ROWS1)  # fmt: skip


@functools.cache
def _layouts(W: int, BVP: int):
    """Copy layouts of the [L, K] keys, the [L, BVP] 16-bit values and the [L, 1] gates (16-byte vectors)."""
    lv = max(1, min(16, BVP // 8))
    return (
        gl.BlockedLayout([1, 4], [1, 32], [W, 1], [1, 0]),
        gl.BlockedLayout([1, 8], [32 // lv, lv], [W, 1], [1, 0]),
        gl.BlockedLayout([1, 1], [32, 1], [W, 1], [1, 0]),
    )


_SMEM = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
_ROWS1 = gl.SwizzledSharedLayout(1, 1, 1, [0])  # the same bytes, indexable row by row
_SMEM_H = gl.SwizzledSharedLayout(4, 1, 8, [1, 0])  # state rows read on the pinned tile: 16-byte vectors XOR row


def fold_ahead_pays(batch: int, HV: int, window: int, L: int, device: torch.device) -> bool:
    """Whether a commit of ``batch`` rows should fold ahead (``gdn_fold_ahead``): where the next verify runs in one
    wave of main-kernel programs (fewer than ``verify_launch.ONE_LAUNCH_PER_SM`` per SM) over windows of 2 to 4
    tokens with at most ``verify_launch.ONE_LAUNCH_HISTORY`` history dots (``L x 2T``), i.e. where it runs in one
    launch and its folding programs are its critical path. Not for plain decode (T=1): every row accepts one token a
    step, so the rows fold together and the fold is throughput-bound inside the verify too (H200, B=8: 15.0 us a step
    there, 15.8 ahead). A batch that fills the GPU keeps the fold inside the verify, which then reads the checkpoint
    once for both; so do long windows, which fold often (at T=8, L=16 every step): folding ahead would add a read of
    most checkpoints. Never on the CPU, where the ops run as PyTorch references and nothing waits on a wave.
    ``REPLAYSSM_FOLD_AHEAD=0`` / ``=1`` forces either way (benchmarks, tests) at windows of 2 or more."""
    from .verify_launch import ONE_LAUNCH_HISTORY, ONE_LAUNCH_PER_SM

    env = switch("REPLAYSSM_FOLD_AHEAD")
    if window < 2:  # (even when forced: a pool never folds ahead of a plain-decode step either)
        return False
    if env:
        return env == "1"
    BT = 1 << max(0, window - 1).bit_length()  # the verify's padded window
    if device.type != "cuda" or BT > 4 or L * 2 * BT > ONE_LAUNCH_HISTORY:
        return False
    return batch * HV < ONE_LAUNCH_PER_SM * launch.sm_count(device)


def gdn_fold_ahead_reference(checkpoint, rings, slots, *, validate: bool = True):
    """``gdn_fold_ahead`` with ``impl="reference"``: the PyTorch twin of its kernel, behind the same checks."""
    return gdn_fold_ahead(checkpoint, rings, slots, validate=validate, impl="reference")


def _fold_ahead_reference(checkpoint, rings, slots):
    """The PyTorch twin of ``gdn_fold_ahead``'s kernel (arguments already checked; same effects, except that like
    ``gdn_exact_fold``'s reference it skips a layer of a slot whose markers all say this epoch, where the kernel
    decides per program's rows: they differ only on a layer a launch left half-folded)."""
    c = rings.cursors
    rows = [s for s in slots.tolist() if s >= 0 and int(c.flush[s])]
    for s in rows:
        for layer, ring in enumerate(rings.layers):
            if not folded_this_epoch(ring, s):
                checkpoint[layer, s] = fold_slot_reference(checkpoint[layer, s], ring, s, history_positions(ring, s))
                ring.folded[s] = c.epoch[s]
    mark_reference(c, torch.tensor(rows, dtype=torch.int32), False)
    return checkpoint


def _check(checkpoint, rings, slots, validate):
    if not isinstance(rings, RingLayers):
        raise TypeError(f"rings must be RingLayers (every layer's ring), got {type(rings).__name__}")
    check_tensor("checkpoint", checkpoint, dtypes=(torch.float32,), contiguous=False)
    if checkpoint.dim() != 5:
        raise ValueError(f"checkpoint must be [layers, S, HV, V, K], got shape {tuple(checkpoint.shape)}")
    NL, H, HV, K, V = rings.num_layers, rings.k.shape[2], rings.v.shape[2], rings.k.shape[4], rings.v.shape[4]
    if checkpoint.shape[0] != NL:
        raise ValueError(f"checkpoint has {checkpoint.shape[0]} layers, rings have {NL}")
    S = check_state("checkpoint[0]", checkpoint[0], HV, V, K, rings.k.device)
    slots_held = rings.cursors.num_slots
    if S != slots_held or not checkpoint.is_contiguous():
        raise ValueError(f"checkpoint must be a contiguous [{NL}, {slots_held}, {HV}, {V}, {K}] tensor, got "
                         f"{tuple(checkpoint.shape)}")  # fmt: skip
    check_tensor("slots", slots, ndim=1, dtypes=(torch.int32,), device=checkpoint.device)
    check_no_overlap(named(checkpoint=checkpoint), named(slots=slots), spans=rings.written_spans)
    if validate and values_checkable(slots):
        ids = check_slots("slots", slots, S)
        rings.cursors.check_values()
        check_none_pending(rings.cursors, ids, "fold ahead")
    return NL, S, H, HV, K, V


def gdn_fold_ahead(
    checkpoint: torch.Tensor,
    rings: RingLayers,
    slots: torch.Tensor,
    *,
    validate: bool = True,
    impl: str = "auto",
) -> torch.Tensor:
    """Fold, in every layer, the history of the rows of ``slots`` whose ring flags a fold at their next verify, and
    empty it: their next verify streams them like any other row. Call between steps, after ``ring_commit``.

    checkpoint: [layers, S, HV, V, K] fp32 (every layer's); rings: every layer's ring (``RingLayers``); slots: [B]
    int32, -1 = padding. Mutates, for each row whose ``flush`` cursor is set: ``checkpoint[:, slot]`` and the fold
    markers (blocks already marked with the slot's epoch are not folded again), then the cursors as
    ``ring_mark_folded`` moves them. Rows that do not flush are not touched. The committed state is unchanged
    (bitwise: the pinned update on the ring's records, as the verify's fold). With ``validate=True`` (skipped under
    graph capture) checks slot ids, the cursors' ranges and that no row has a verified window pending; nothing is
    written when a check fails. Returns ``checkpoint``."""
    check_flags(validate=validate)
    NL, S, H, HV, K, V = _check(checkpoint, rings, slots, validate)
    if not use_triton(impl, checkpoint):
        return _fold_ahead_reference(checkpoint, rings, slots)
    check_interpretable(ring_v=rings.v)
    B = slots.shape[0]
    if B:
        ln = launch.resolve("fold_ahead", V, B * HV, checkpoint.device)
        c = rings.cursors
        _fold_ahead_kernel[(B, HV, ln.programs_per_head)](
            slots, c.write_pos, c.base, c.flush, c.epoch, checkpoint, rings.k, rings.v, rings.g, rings.beta,
            rings.folded, NL, S, H, HV, K, V, c.L, ln.rows, ln.rows_per_program, ln.layout,
            *_layouts(ln.num_warps, ln.rows_per_program), _SMEM, _ROWS1, _SMEM_H, num_warps=ln.num_warps,
        )  # fmt: skip
        _ring_mark_folded_kernel[(B,)](slots, c.write_pos, c.base, c.flush, c.pending, c.epoch, L=c.L, RESET=False,
                                       FLUSHING=True, num_warps=1)  # fmt: skip
    return checkpoint
