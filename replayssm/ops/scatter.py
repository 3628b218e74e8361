"""Device-side row scatter that skips padding rows without a host sync or a sink row."""

from __future__ import annotations

import torch


def scatter_slots_(dst: torch.Tensor, slots: torch.Tensor, values: torch.Tensor) -> None:
    """``dst[slots[i]] = values[i]`` for every row with ``slots[i] >= 0``; -1 rows are ignored.

    Padding rows are redirected to the first live row's slot *with that row's value*, so every
    duplicate index writes identical data and the result is deterministic; with no live row at all
    they rewrite slot 0 with its own contents. No value leaves the device (CUDA-graph capturable).
    dst: [R, ...]; slots: [B] integer; values: [B, ...] with ``dst``'s trailing shape.
    """
    live = slots >= 0
    first = torch.argmax(live.to(torch.int32)).view(1)  # 0 when no row is live; stays on the device
    any_live = live.index_select(0, first)  # [1]; tensor indexing would read the index back to the host
    fallback_slot = torch.where(any_live, slots.index_select(0, first), 0).long()
    target = torch.where(live, slots.long(), fallback_slot)
    shape1 = (1,) + (1,) * (values.dim() - 1)
    ref = torch.where(any_live.view(shape1), values.index_select(0, first), dst[:1])[0]  # what padding rows write
    shape = (-1,) + (1,) * (values.dim() - 1)
    vals = torch.where(live.view(shape), values, ref.unsqueeze(0))
    dst.index_copy_(0, target, vals)
