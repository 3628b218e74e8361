"""The recurrent baseline's commit: copy each row's accepted snapshot back into the state pool.

One pass over the accepted snapshots (read once, written once), all layers in one launch; the
``[V, K]`` states stream through in ``BLOCK``-element chunks. Padding rows (slot -1) are skipped.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import use_triton
from ._validate import check_flags, check_no_overlap, check_slots, check_tensor, named, values_checkable


@triton.jit
def _commit_snapshots_kernel(state, snapshots, slots, num_accepted, S, B_SNAP, T: tl.constexpr, E: tl.constexpr,
                             BLOCK: tl.constexpr):  # fmt: skip
    i_b, i_c, i_l = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    slot = tl.load(slots + i_b)
    if slot >= 0:
        n = tl.load(num_accepted + i_b)
        offs = i_c * BLOCK + tl.arange(0, BLOCK)
        mask = offs < E
        src = snapshots + ((i_l.to(tl.int64) * B_SNAP + i_b) * T + n - 1) * E + offs
        dst = state + (i_l.to(tl.int64) * S + slot) * E + offs
        tl.store(dst, tl.load(src, mask=mask), mask=mask)


def commit_snapshots_reference(state, snapshots, slots, num_accepted, *, validate: bool = True):
    """``commit_snapshots`` with ``impl="reference"``: the PyTorch twin of its kernel, behind the same checks."""
    return commit_snapshots(state, snapshots, slots, num_accepted, validate=validate, impl="reference")


def _commit_reference(state, snapshots, slots, num_accepted):
    """The PyTorch twin of ``_commit_snapshots_kernel`` (arguments already checked)."""
    for i, (slot, n) in enumerate(zip(slots.tolist(), num_accepted.tolist())):
        if slot >= 0:
            state[:, slot] = snapshots[:, i, n - 1]


def commit_snapshots(
    state: torch.Tensor,
    snapshots: torch.Tensor,
    slots: torch.Tensor,
    num_accepted: torch.Tensor,
    *,
    validate: bool = True,
    impl: str = "auto",
) -> None:
    """``state[l, slots[i]] = snapshots[l, i, num_accepted[i] - 1]`` for every layer l and live row i.

    state: [NL, S, HV, V, K] fp32; snapshots: [NL, B_max, T, HV, V, K] fp32 (rows 0..B-1 used);
    slots: [B] int32 (-1 skipped); num_accepted: [B] int32 in [1, T]. Mutates ``state``.
    """
    check_flags(validate=validate)
    for name, t, want in (("state", state, "[NL, S, HV, V, K]"), ("snapshots", snapshots, "[NL, B_max, T, HV, V, K]")):
        if isinstance(t, torch.Tensor) and t.dim() != len(want.split(",")):
            raise ValueError(f"{name} must be a {want} tensor, every layer's at once (layers first, unlike "
                             f"gdn_recurrent's), got shape {tuple(t.shape)}")  # fmt: skip
    check_tensor("state", state, ndim=5, dtypes=(torch.float32,))
    check_tensor("snapshots", snapshots, ndim=6, dtypes=(torch.float32,), device=state.device)
    NL, S = state.shape[:2]
    if snapshots.shape[0] != NL or tuple(snapshots.shape[3:]) != tuple(state.shape[2:]):
        raise ValueError(f"snapshots must have shape ({NL}, B_max, T, {', '.join(map(str, state.shape[2:]))}), "
                         f"got {tuple(snapshots.shape)}")  # fmt: skip
    check_tensor("slots", slots, ndim=1, dtypes=(torch.int32,), device=state.device)
    B = slots.shape[0]
    check_tensor("num_accepted", num_accepted, shape=(B,), dtypes=(torch.int32,), device=state.device)
    if B > snapshots.shape[1]:
        raise ValueError(f"slots has {B} rows, snapshots only {snapshots.shape[1]}")
    T = snapshots.shape[2]
    check_no_overlap(named(state=state), named(snapshots=snapshots, slots=slots, num_accepted=num_accepted))
    if validate and values_checkable(slots, num_accepted):
        check_slots("slots", slots, S)
        bad = [n for s, n in zip(slots.tolist(), num_accepted.tolist()) if s >= 0 and not 1 <= n <= T]
        if bad:
            raise ValueError(f"num_accepted holds {bad}, outside [1, {T}]")
    if not use_triton(impl, state):
        return _commit_reference(state, snapshots, slots, num_accepted)
    E = state[0, 0].numel()
    BLOCK = min(8192, triton.next_power_of_2(E))
    if B:
        _commit_snapshots_kernel[(B, triton.cdiv(E, BLOCK), NL)](
            state, snapshots, slots, num_accepted, S, snapshots.shape[1], T=T, E=E, BLOCK=BLOCK, num_warps=8
        )
