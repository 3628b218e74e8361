"""Host-side bookkeeping of slot lifecycles: free/live slots and the verify -> commit protocol.

The published ports lose data at exactly these seams (a commit skipped on an early return, pending
ring records dropped on preemption). The tracker makes them errors: every layer must verify a slot
before ``commit``, nothing may read, fold or move a slot with an uncommitted step, and a slot must
be live to be used. All checks run before any tensor is written.
"""

from __future__ import annotations

import torch


class SlotError(ValueError):
    """A slot was used against its lifecycle (free, double free, uncommitted step, ...)."""


class PoolExhaustedError(RuntimeError):
    """``alloc`` asked for more slots than are free."""


class SlotTracker:
    def __init__(self, cfg):
        self.cfg = cfg
        self._free = list(range(cfg.num_slots - 1, -1, -1))  # pop() hands out 0, 1, 2, ...
        self.live: set[int] = set()
        self.pending: dict[int, set[int]] = {}  # slot -> layers that ran this step
        self.windows: dict[int, int] = {}  # slot -> window length of this step
        self.kind: str | None = None  # "verify" or "decode": what the layers of the latest step ran

    @property
    def num_free(self) -> int:
        return len(self._free)

    def alloc(self, n: int) -> list[int]:
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive int, got {n!r}")
        if n > len(self._free):
            raise PoolExhaustedError(f"asked for {n} slots, {len(self._free)} of {self.cfg.num_slots} are free")
        ids = [self._free.pop() for _ in range(n)]
        self.live.update(ids)
        return ids

    def free(self, ids: list[int]) -> None:
        self.check_idle(ids, "free")
        for s in ids:
            self.live.discard(s)
            self._free.append(s)

    def check_ids(self, slots: torch.Tensor, name: str, padding: bool) -> list[int]:
        ids = slots.tolist()
        bad = [s for s in ids if not (-1 <= s < self.cfg.num_slots) or (s == -1 and not padding)]
        if bad:
            lo = -1 if padding else 0
            raise SlotError(f"{name} holds ids {bad} outside [{lo}, {self.cfg.num_slots})")
        live = [s for s in ids if s >= 0]
        if len(set(live)) != len(live):
            raise SlotError(f"{name} holds slot ids {sorted({s for s in live if live.count(s) > 1})} more than once")
        dead = [s for s in live if s not in self.live]
        if dead:
            raise SlotError(f"{name}: slots {dead} are not allocated (free, or never allocated)")
        return ids

    def check_idle(self, ids: list[int], what: str) -> None:
        busy = [s for s in ids if s in self.pending]
        if busy:
            raise SlotError(f"{what}: slots {busy} have a verified step that is not committed yet; commit() first")

    def begin(self, layer: int, kind: str, ids: list[int], cu_seqlens: torch.Tensor) -> None:
        if self.pending and self.kind != kind:
            raise SlotError(f"cannot {kind} while a {self.kind} step is in flight; commit() it first")
        live = [s for s in ids if s >= 0]
        again = [s for s in live if layer in self.pending.get(s, ())]
        if again:
            raise SlotError(f"slots {again} already ran layer {layer} in this step; commit() before the next step")
        cu = cu_seqlens.tolist()
        lens = {s: cu[i + 1] - cu[i] for i, s in enumerate(ids) if s >= 0 and i + 1 < len(cu)}
        other = [s for s in live if s in self.windows and self.windows[s] != lens.get(s)]
        if other:
            raise SlotError(f"slots {other} changed window length between layers of one step")
        for s in live:
            self.pending.setdefault(s, set()).add(layer)
            self.windows[s] = lens.get(s, 0)

    def undo(self, layer: int, ids: list[int]) -> None:
        for s in ids:
            if s in self.pending:
                self.pending[s].discard(layer)
                if not self.pending[s]:
                    del self.pending[s]
                    self.windows.pop(s, None)

    def check_commit(self, ids: list[int], num_accepted: torch.Tensor) -> None:
        """Check that every live row finished all layers and accepts 1..window tokens."""
        all_layers = set(range(self.cfg.num_layers))
        for s, n in zip(ids, num_accepted.tolist()):
            if s < 0:
                continue
            done = self.pending.get(s)
            if not done:
                raise SlotError(f"commit: slot {s} has no verified step to commit")
            if done != all_layers:
                raise SlotError(f"commit: slot {s} has not run layers {sorted(all_layers - done)} in this step")
            if not 1 <= n <= self.windows[s]:
                raise SlotError(f"num_accepted={n} for slot {s} is outside [1, {self.windows[s]}] (its window)")

    def end_step(self, ids: list[int]) -> None:
        for s in ids:
            self.pending.pop(s, None)
            self.windows.pop(s, None)
