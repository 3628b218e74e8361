"""Per-slot KV cache of the full-attention layers, with speculative truncation.

``k``, ``v``: [attention layers, S + 1, max_len, nKV, hd]; row S is a sink that padding rows write
into, so a padded CUDA-graph batch never touches a live slot. ``lens`` [S + 1] int32 holds each
slot's committed length on the device: a verify step writes its whole window after ``lens`` and
``commit`` advances ``lens`` by the accepted count, so rejected entries are simply overwritten later.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(self, num_layers: int, num_slots: int, max_len: int, num_kv_heads: int, head_dim: int, *, dtype,
                 device):  # fmt: skip
        shape = (num_layers, num_slots + 1, max_len, num_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.lens = torch.zeros(num_slots + 1, dtype=torch.int32, device=device)
        self.num_slots, self.max_len = num_slots, max_len

    @property
    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    def rows(self, slots: torch.Tensor) -> torch.Tensor:
        """KV rows of a batch: the slot, or the sink row for padding (-1)."""
        return torch.where(slots >= 0, slots, self.num_slots).long()

    def commit(self, slots: torch.Tensor, num_accepted: torch.Tensor) -> None:
        rows = self.rows(slots)
        self.lens.index_add_(0, rows, torch.where(slots >= 0, num_accepted, 0).to(torch.int32))
        self.lens[self.num_slots] = 0

    def reset(self, slots: torch.Tensor) -> None:
        self.lens[slots.long()] = 0

    def gather(self, slots: torch.Tensor) -> dict:
        idx = slots.long()
        n = int(self.lens[idx].max()) if idx.numel() else 0
        return {"k": self.k[:, idx, :n].cpu(), "v": self.v[:, idx, :n].cpu(), "lens": self.lens[idx].cpu()}

    def scatter(self, slots: torch.Tensor, data: dict) -> None:
        idx = slots.long()
        n = data["k"].shape[2]
        self.k[:, idx, :n] = data["k"].to(self.k.device)
        self.v[:, idx, :n] = data["v"].to(self.v.device)
        self.lens[idx] = data["lens"].to(self.lens.device)
