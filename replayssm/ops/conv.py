"""Short causal conv1d (depthwise, SiLU) over the GDN q/k/v channels, with speculative rollback.

Layouts: ``x`` [N, C] tokens; ``weight`` [C, W] (W = kernel size, 4 in Qwen3-Next/3.5); ``bias``
[C] or None; ``conv_state`` [S, W-1, C], the last W-1 inputs of each slot, oldest first.

For a speculative window the state must roll back to the last accepted token (docs/design.md, "conv state"). The
update op therefore leaves the state alone and records each row's conv inputs, state included,
in ``scratch`` [B, W-1+T_max, C]; ``conv_commit`` then keeps the W-1 inputs that end at the last
accepted token. On CUDA tensors both run as Triton kernels (``ops.conv_update``), elsewhere as the PyTorch
references here; both index on the device only (no host sync), so they can be captured in a CUDA graph. Rows
with slot -1 read no state, write no state, and output zeros.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._common import use_triton
from ._validate import (
    ACT_DTYPES,
    check_cu_seqlens,
    check_flags,
    check_no_overlap,
    check_slots,
    check_tensor,
    named,
    values_checkable,
)
from .conv_update import conv_commit_triton, conv_update_triton
from .scatter import scatter_slots_


def _check_conv(x, weight, bias, conv_state=None):
    # the conv state (a pool's, on its device) is where the others must be: a wrong-device x is named as x
    dev = conv_state.device if isinstance(conv_state, torch.Tensor) else None
    check_tensor("x", x, ndim=2, dtypes=ACT_DTYPES, contiguous=False, device=dev)
    if x.stride(1) != 1:
        raise ValueError(f"x must have a unit last stride (rows may be slices of a wider tensor), got {x.stride()}")
    C = x.shape[1]
    check_tensor("weight", weight, ndim=2, dtypes=ACT_DTYPES, device=x.device)
    if weight.shape[0] != C:
        raise ValueError(f"weight must have shape ({C}, W), got {tuple(weight.shape)}")
    if bias is not None:
        check_tensor("bias", bias, shape=(C,), dtypes=ACT_DTYPES, device=x.device)
    if conv_state is not None:
        check_tensor("conv_state", conv_state, ndim=3, device=x.device)
        if conv_state.dtype != x.dtype:
            raise TypeError(f"x is {x.dtype}; conv_state is {conv_state.dtype} (the activations must have the conv "
                            "state's dtype: PoolConfig.dtype)")  # fmt: skip
        if conv_state.shape[2] != C:
            raise ValueError(f"conv_state must have shape (S, W-1, {C}) for x of {C} channels, got "
                             f"{tuple(conv_state.shape)}")  # fmt: skip
        if conv_state.shape[1] != weight.shape[1] - 1:
            raise ValueError(f"weight must have shape ({C}, {conv_state.shape[1] + 1}): conv_state keeps "
                             f"{conv_state.shape[1]} tokens (W-1), got {tuple(weight.shape)}")  # fmt: skip


def causal_conv1d_prefill(x, weight, bias, cu_seqlens, initial_state=None):
    """Whole prompts. x: [N, C]; cu_seqlens: [B+1] int32; initial_state: [B, W-1, C] or None (zeros).

    Returns (y [N, C] = silu(conv(x)), final_state [B, W-1, C]): the last W-1 inputs of each sequence,
    in x's dtype. Computed in fp32, rounded to x's dtype once. Every sequence holds at least one token and
    cu_seqlens ends at N (checked: it reads cu_seqlens back anyway).
    """
    _check_conv(x, weight, bias)
    W = weight.shape[1]
    check_tensor("cu_seqlens", cu_seqlens, ndim=1, dtypes=(torch.int32,), device=x.device)
    B = cu_seqlens.shape[0] - 1
    C = x.shape[1]
    if B < 1:
        raise ValueError(f"cu_seqlens must hold B+1 >= 2 offsets, got shape {tuple(cu_seqlens.shape)}")
    check_cu_seqlens(cu_seqlens, x.shape[0], B, None)
    if initial_state is not None:
        check_tensor("initial_state", initial_state, shape=(B, W - 1, C), dtypes=(x.dtype,), device=x.device,
                     contiguous=False)  # fmt: skip
    if initial_state is None:
        initial_state = x.new_zeros(B, W - 1, C)
    y = torch.empty_like(x)
    final = x.new_empty(B, W - 1, C)
    cu = cu_seqlens.tolist()
    for i in range(B):
        xx = torch.cat([initial_state[i], x[cu[i] : cu[i + 1]]], 0).float()  # [W-1+T, C]
        out = F.conv1d(xx.t()[None], weight.float()[:, None, :], bias.float() if bias is not None else None, groups=C)
        y[cu[i] : cu[i + 1]] = F.silu(out[0].t()).to(x.dtype)
        final[i] = xx[-(W - 1) :].to(x.dtype)
    return y, final


def _check_update(x, conv_state, weight, slots, cu_seqlens, scratch, validate: bool) -> None:
    """Everything ``causal_conv1d_update`` needs, before it writes: shapes always; with ``validate`` (and not
    while a CUDA graph is captured) the values too: slot ids, and windows of 1..T_max tokens that fit scratch."""
    N, C = x.shape
    W = weight.shape[1]
    check_tensor("slots", slots, ndim=1, dtypes=(torch.int32,), device=x.device)
    B = slots.shape[0]
    check_tensor("cu_seqlens", cu_seqlens, shape=(B + 1,), dtypes=(torch.int32,), device=x.device)
    check_tensor("scratch", scratch, ndim=3, dtypes=(x.dtype,), device=x.device)
    if scratch.shape[0] < B or scratch.shape[1] < W or scratch.shape[2] != C:
        raise ValueError(f"scratch must have shape (>= {B}, W-1+T_max >= {W}, {C}), got {tuple(scratch.shape)}")
    if validate and values_checkable(slots, cu_seqlens):
        check_slots("slots", slots, conv_state.shape[0])
        check_cu_seqlens(cu_seqlens, N, B, scratch.shape[1] - (W - 1))


def causal_conv1d_update(x, conv_state, weight, bias, slots, cu_seqlens, scratch, *, impl: str = "auto",
                         split: tuple[int, int, int] | None = None, validate: bool = True):  # fmt: skip
    """One speculative window per row, state untouched; fills ``scratch`` for ``conv_commit``.

    x: [N, C] (unit last stride); conv_state: [S, W-1, C]; slots: [B] int32 (-1 padding); cu_seqlens: [B+1]
    int32 with windows of at most T_max tokens; scratch: [>=B, W-1+T_max, C] (x's dtype), written for
    rows 0..B-1. Returns y: [N, C] (padding rows' outputs are 0), or with ``split`` (three widths summing to
    C, e.g. the q, k, v channels) three contiguous [N, width] tensors. ``impl``: the Triton kernel
    (``ops.conv_update``, which writes the split outputs in place) on CUDA tensors, this PyTorch reference on
    CPU tensors. Every argument is checked before anything is written (``validate=False`` skips the checks
    that read values back, as the other ops do; they are skipped anyway while a CUDA graph is captured).
    """
    check_flags(validate=validate)
    _check_conv(x, weight, bias, conv_state)
    _check_update(x, conv_state, weight, slots, cu_seqlens, scratch, validate)
    check_no_overlap(
        named(scratch=scratch),
        named(x=x, conv_state=conv_state, weight=weight, bias=bias, slots=slots, cu_seqlens=cu_seqlens),
    )
    if split is not None and (
        not isinstance(split, (tuple, list))
        or len(split) != 3
        or any(not isinstance(w, int) or isinstance(w, bool) or w < 1 for w in split)
        or sum(split) != x.shape[1]
    ):
        raise ValueError(f"split must be three positive int widths summing to C={x.shape[1]}, got {split!r}")
    if use_triton(impl, x):
        return conv_update_triton(x, conv_state, weight, bias, slots, cu_seqlens, scratch, split)
    y = _update_reference(x, conv_state, weight, bias, slots, cu_seqlens, scratch)
    return y if split is None else tuple(t.contiguous() for t in y.split(list(split), dim=1))


def causal_conv1d_update_reference(x, conv_state, weight, bias, slots, cu_seqlens, scratch, *,
                                   split: tuple[int, int, int] | None = None, validate: bool = True):  # fmt: skip
    """``causal_conv1d_update`` with ``impl="reference"``: the PyTorch twin of its kernel, behind the same checks."""
    return causal_conv1d_update(x, conv_state, weight, bias, slots, cu_seqlens, scratch, impl="reference",
                                split=split, validate=validate)  # fmt: skip


def _update_reference(x, conv_state, weight, bias, slots, cu_seqlens, scratch):
    """The PyTorch twin of the conv update kernel (arguments already checked; plain tensor ops, graph-capturable)."""
    N, C = x.shape
    W = weight.shape[1]
    B = slots.shape[0]
    span = scratch.shape[1]  # W-1+T_max
    dev = x.device
    pos = torch.arange(span, device=dev)
    starts, lens = cu_seqlens[:-1].long(), (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    live = slots >= 0
    safe_slots = torch.where(live, slots, 0).long()
    tok = (starts[:, None] + pos[None, :] - (W - 1)).clamp(0, max(N - 1, 0))  # [B, span]
    from_x = (pos[None, :] >= W - 1) & (pos[None, :] - (W - 1) < lens[:, None])
    from_state = (pos < W - 1)[None, :] & live[:, None]
    st = conv_state[safe_slots][:, pos.clamp(max=W - 2)]  # [B, span, C]
    xx = torch.where(from_state[..., None], st, torch.where(from_x[..., None], x[tok], x.new_zeros(())))
    scratch[:B] = xx
    taps = xx.float().unfold(1, W, 1)  # [B, T_max, C, W]
    rows_y = (taps * weight.float()[None, None]).sum(-1)
    if bias is not None:
        rows_y = rows_y + bias.float()
    rows_y = F.silu(rows_y) * live[:, None, None]
    row = torch.searchsorted(cu_seqlens[1:].long(), torch.arange(N, device=dev), right=True)
    return rows_y[row, torch.arange(N, device=dev) - starts[row]].to(x.dtype)


def conv_commit(conv_state, scratch, slots, num_accepted, *, impl: str = "auto", validate: bool = True):
    """Roll ``conv_state`` of ``slots`` forward to the last accepted token of each row's window, all layers at once.

    conv_state: [NL, S, W-1, C] (or [S, W-1, C], one layer); scratch: [NL, >=B, W-1+T_max, C] (or
    [>=B, W-1+T_max, C]) from ``causal_conv1d_update``; slots: [B] int32, -1 rows skipped (their counts are never
    read); num_accepted: [B] int32 in [1, T_max] on live rows. One launch whatever the number of layers
    (``ops.conv_update``; the PyTorch reference on CPU tensors or with ``impl="reference"``). Shapes are always
    checked before anything is written; with ``validate`` (and not while a CUDA graph is captured) the values too
    (slot ids, accepted counts), which reads them back. Mutates ``conv_state``.
    """
    check_flags(validate=validate)
    if not isinstance(conv_state, torch.Tensor) or conv_state.dim() not in (3, 4):
        raise ValueError("conv_state must be a [NL, S, W-1, C] or [S, W-1, C] tensor")
    if conv_state.dim() == 3:
        conv_state, scratch = conv_state[None], scratch[None] if isinstance(scratch, torch.Tensor) else scratch
    NL, S, Wm1, C = conv_state.shape
    check_tensor("scratch", scratch, ndim=4, dtypes=(conv_state.dtype,), device=conv_state.device, contiguous=False)
    if scratch.shape[0] != NL or scratch.shape[2] < Wm1 + 1 or scratch.shape[3] != C:
        raise ValueError(f"scratch must have shape ({NL}, >= B, >= {Wm1 + 1}, {C}) to match conv_state, "
                         f"got {tuple(scratch.shape)}")  # fmt: skip
    check_tensor("slots", slots, ndim=1, dtypes=(torch.int32,), device=conv_state.device)
    B = slots.shape[0]
    check_tensor("num_accepted", num_accepted, shape=(B,), dtypes=(torch.int32,), device=conv_state.device)
    if scratch.shape[1] < B:
        raise ValueError(f"scratch holds {scratch.shape[1]} rows, the commit names {B}")
    check_no_overlap(named(conv_state=conv_state), named(scratch=scratch, slots=slots, num_accepted=num_accepted))
    if validate and values_checkable(slots, num_accepted):
        check_slots("slots", slots, S)
        t_max = scratch.shape[2] - Wm1
        bad = [n for s, n in zip(slots.tolist(), num_accepted.tolist()) if s >= 0 and not 1 <= n <= t_max]
        if bad:
            raise ValueError(f"num_accepted holds {bad}, outside [1, {t_max}] (the window the scratch records)")
    rows_contiguous = conv_state.stride()[2:] == (C, 1) and scratch.stride()[2:] == (C, 1)
    if use_triton(impl, conv_state) and rows_contiguous:
        conv_commit_triton(conv_state, scratch, slots, num_accepted)
    else:
        _commit_reference(conv_state, scratch, slots, num_accepted)


def conv_commit_reference(conv_state, scratch, slots, num_accepted, *, validate: bool = True):
    """``conv_commit`` with ``impl="reference"``: the PyTorch twin of its kernel, behind the same checks."""
    conv_commit(conv_state, scratch, slots, num_accepted, impl="reference", validate=validate)


def _commit_reference(conv_state, scratch, slots, num_accepted):
    """The PyTorch twin of the conv commit kernel for [NL, S, W-1, C] states and [NL, >=B, W-1+T_max, C] scratch
    (arguments already checked): one gather and one scatter (graph-capturable). A padding row's count is not read
    (it gathers at 1, then is skipped)."""
    NL, _, Wm1, C = conv_state.shape
    B = slots.shape[0]
    n = torch.where(slots >= 0, num_accepted, 1).long()
    idx = n[:, None] + torch.arange(Wm1, device=slots.device)[None, :]  # [B, W-1]
    kept = torch.gather(scratch[:, :B], 2, idx[None, :, :, None].expand(NL, B, Wm1, C))  # [NL, B, W-1, C]
    scatter_slots_(conv_state.transpose(0, 1), slots, kept.transpose(0, 1))
