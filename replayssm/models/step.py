"""What one forward pass of the model is about: which kind of step, which slots, which tokens."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch

from ..state.kv import KVCache


class StepKind(enum.Enum):
    """PREFILL: a whole prompt into a fresh slot. VERIFY: a speculative window of T tokens per row (state kept
    until the commit picks the accepted prefix). DECODE: one plain token per row."""

    PREFILL = "prefill"
    VERIFY = "verify"
    DECODE = "decode"


@dataclass(frozen=True)
class Step:
    """A batch of B requests, each with ``T`` new tokens (uniform; prefill runs one request at a time).

    slots: [B] int32 (-1 = padding row). cu_seqlens: [B+1] int32. start: [B] int64, the committed length of
    each row before this step (KV position of its first new token). positions: [B*T] int64 absolute
    positions. kv_rows: [B] int64 rows of the KV cache (sink for padding). contiguous: the live slots are
    exactly 0..B-1 in order. kv_index: [B*T] int64 where each new token's key and value go in the paged KV
    cache (``KVCache.token_index``; computed once per step for all attention layers; None: each layer
    computes it). All tensors are on the model's device.
    """

    kind: StepKind
    slots: torch.Tensor
    cu_seqlens: torch.Tensor
    start: torch.Tensor
    positions: torch.Tensor
    kv_rows: torch.Tensor
    T: int
    contiguous: bool = False
    kv_index: torch.Tensor | None = None

    @property
    def B(self) -> int:
        return self.slots.shape[0]

    @classmethod
    def build(cls, kind: StepKind, slots: torch.Tensor, T: int, kv: KVCache, *, contiguous: bool = False) -> Step:
        """Positions from the KV cache's committed lengths; everything stays on the device."""
        if not isinstance(kind, StepKind):
            raise TypeError(f"kind must be a StepKind, got {kind!r}")
        B = slots.shape[0]
        dev = slots.device
        rows = kv.rows(slots)
        start = kv.lens[rows].long()
        positions = (start[:, None] + torch.arange(T, device=dev)[None, :]).reshape(-1)
        cu = torch.arange(0, B * T + 1, T, dtype=torch.int32, device=dev)
        return cls(kind, slots, cu, start, positions, rows, T, contiguous, kv.token_index(rows, positions))
