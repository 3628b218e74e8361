"""The ModelRunner's slot book: which slots are allocated, their committed KV lengths on the host, and moving an idle
slot's whole state to the CPU and back (``offload`` / ``restore``). A base class of ``ModelRunner``
(``engine/runner.py``), which holds the pool, the KV cache and the steps in flight that these methods read."""

from __future__ import annotations

import torch

from ..ops._validate import check_count
from ..state.lockstep import LockstepPool
from .checks import check_slots, is_int
from .config import ParkedRequest


class SlotBook:
    """Slot allocation, idleness checks and parking for ``ModelRunner`` (which sets every attribute used here:
    ``pool``, ``kv``, ``drafter``, ``device``, ``cfg``, ``_lens``, ``_live``, ``lost``, ``_in_flight``, ``pending``)."""

    @property
    def num_free(self) -> int:
        return self.pool.num_free

    def alloc(self) -> int:
        slot = self.pool.alloc(1)
        self.kv.reset(slot)
        s = int(slot[0])
        self._lens[s] = 0
        self._live.add(s)
        return s

    def free(self, slot: int) -> None:
        """Give ``slot`` back: its GDN state slot and its KV cache pages (it must have no step in flight)."""
        if not is_int(slot):
            raise TypeError(f"slot must be an int, got {slot!r}")
        slot = int(slot)  # a NumPy integer: every part below takes Python ints
        if slot not in self._live:
            raise ValueError(f"slot {slot!r} is not allocated")
        self._check_idle([slot])
        self.pool.free(self._slots([slot]))
        self.kv.release([slot])
        self._live.discard(slot)
        self.lost.discard(slot)

    def _slots(self, ids: list[int]) -> torch.Tensor:
        return torch.tensor(ids, dtype=torch.int32, device=self.device)

    def _check_not_lost(self, slots) -> None:
        """No slot of ``slots`` lost its state in a failed step (``lost``): such a slot takes only ``free()``."""
        if self.lost & set(slots):
            raise ValueError(f"slots {sorted(self.lost & set(slots))} lost their state in a failed step; free() them")

    def _check_idle(self, slots) -> None:
        """No slot of ``slots`` is in a step in flight (``step`` not committed, or ``launch`` not finished)."""
        busy = set(self._in_flight[1]) if self._in_flight is not None else set()
        for p in self.pending:
            busy.update(p.slots)
        if busy & set(slots):
            raise RuntimeError(f"slots {sorted(busy & set(slots))} are in a step in flight; commit(), abort() or "
                               "finish() it first")  # fmt: skip

    def offload(self, slot: int) -> ParkedRequest:
        """Move an idle slot's state (GDN checkpoint, ring, cursors, conv; KV; drafter state) to the CPU; free it."""
        if not is_int(slot) or slot not in self._live:
            raise ValueError(f"slot={slot!r}: not an allocated slot")
        slot = int(slot)
        self._check_idle([slot])
        self._check_not_lost([slot])
        s = self._slots([slot])
        gdn = self.pool.offload(s)
        drafter = self.drafter.park(s) if self.drafter is not None else None
        parked = ParkedRequest(gdn, self.kv.gather(s), drafter)
        self.free(slot)
        return parked

    def check_restore(self, parked: ParkedRequest, room: bool = True) -> None:
        """Raise what ``restore(parked)`` would raise before it allocates (``ParkedRequest.check_fits``)."""
        ParkedRequest.check_fits(parked, self.pool, self.kv, self.drafter, room)

    def restore(self, parked: ParkedRequest) -> int:
        """A new slot holding ``parked``; it continues bit for bit where it stopped. Refused, with nothing allocated,
        when it does not fit (``check_restore``); if copying it in fails all the same, the new slot is freed."""
        self.check_restore(parked)
        slot = self.pool.restore(parked.gdn)
        s = int(slot[0])
        self._live.add(s)
        try:
            self.kv.scatter(slot, parked.kv)
            self._lens[s] = int(parked.kv["lens"][0])
            if self.drafter is not None:
                self.drafter.unpark(slot, parked.drafter)
        except BaseException:
            self.free(s)
            raise
        return s

    def states_equal(self, slots: list[int]) -> bool:
        """With ``shadow_backend``: the committed states of both pools are bitwise equal at every layer."""
        if not isinstance(self.pool, LockstepPool):
            raise ValueError("states_equal needs RunnerConfig(shadow_backend=...)")
        return self.pool.states_equal(self._slots(slots))

    def memory_report(self) -> dict[str, int]:
        """The GDN state pool's bytes (``GDNStatePool.memory_report``; the KV cache is ``self.kv.nbytes``)."""
        return self.pool.memory_report()

    def kv_len(self, slot: int) -> int:
        """Committed KV length of ``slot`` (host mirror; nothing is read back); ``slot`` must be allocated."""
        if not is_int(slot) or slot not in self._live:
            raise ValueError(f"slot={slot!r}: not an allocated slot")
        return self._lens[slot]

    def pad_kv(self, slots: list[int], n: int) -> None:
        """FOR BENCHMARKS ONLY: the slots (allocated, idle) pretend to hold ``n`` (>= 0) more committed tokens, whose
        keys and values are whatever their new pages hold: the memory and attention cost of a longer context
        without prefilling it; what the model computes from then on is meaningless."""
        slots = check_slots(slots, len(slots) if isinstance(slots, (list, tuple)) else 0, self._live)
        self._check_idle(slots)
        self._check_not_lost(slots)
        n = check_count("n", n, 0)
        self.kv.reserve(slots, [self._lens[s] + n + self.cfg.window for s in slots])
        self.kv.lens[self._slots(slots).long()] += n
        for s in slots:
            self._lens[s] += n
