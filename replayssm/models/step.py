"""What one forward pass of the model is about: which slots, which tokens, which kind of step."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Step:
    """A batch of B requests, each with ``T`` new tokens (uniform; prefill runs one request at a time).

    kind: "prefill" (a whole prompt, fresh slot), "verify" (a speculative window) or "decode" (one
    plain token). slots: [B] int32 (-1 = padding row). cu_seqlens: [B+1] int32. start: [B] int64,
    the committed length of each row before this step (KV position of its first new token).
    positions: [B*T] int64 absolute positions. kv_rows: [B] int64 rows of the KV cache (sink for
    padding). contiguous: the live slots are exactly 0..B-1 in order (the KV cache can be sliced).
    """

    kind: str
    slots: torch.Tensor
    cu_seqlens: torch.Tensor
    start: torch.Tensor
    positions: torch.Tensor
    kv_rows: torch.Tensor
    T: int
    contiguous: bool = False

    @property
    def B(self) -> int:
        return self.slots.shape[0]

    @classmethod
    def build(cls, kind: str, slots: torch.Tensor, T: int, kv, *, contiguous: bool = False) -> Step:
        """Positions from the KV cache's committed lengths; everything stays on the device."""
        B = slots.shape[0]
        dev = slots.device
        rows = kv.rows(slots)
        start = kv.lens[rows].long()
        positions = (start[:, None] + torch.arange(T, device=dev)[None, :]).reshape(-1)
        cu = torch.arange(0, B * T + 1, T, dtype=torch.int32, device=dev)
        return cls(kind, slots, cu, start, positions, rows, T, contiguous)
