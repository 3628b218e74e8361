"""Host-side bookkeeping of slot lifecycles: free/live slots and the step -> commit protocol.

The published ports lose data at exactly these seams (a commit skipped on an early return, pending
ring records dropped on preemption, conv scratch of one batch committed into another). The tracker
makes them errors. A *step* is one batch of rows (slot ids by row, -1 padding, one window length per
row): its first ``conv_update``/``verify``/``decode`` fixes the rows, every later call of the step
must name the same rows in the same order with the same windows, every layer must run both its conv
and its verify (or decode) once, and ``commit`` must name exactly those rows. Nothing may read, fold,
move or free a slot of a step in flight; ``abort`` drops the step. Every check runs before any tensor
is written, and the tracker changes only once the call it records can no longer fail on its arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..ops._ints import is_int


class SlotError(ValueError):
    """A slot was used against its lifecycle (free, double free, uncommitted step, ...)."""


class PoolExhaustedError(RuntimeError):
    """``alloc`` asked for more slots than are free."""


@dataclass
class StepInFlight:
    """The batch the layers are running now (host copy; the device state is in the pool)."""

    rows: tuple[int, ...]  # slot id of every row, -1 = padding
    windows: tuple[int, ...]  # window length of every row
    kind: str | None = None  # "verify" or "decode" once a layer ran one
    conv: set[int] = field(default_factory=set)  # layers whose conv_update ran
    ssm: set[int] = field(default_factory=set)  # layers whose verify/decode ran
    failed: bool = False  # an op failed while writing (not on its arguments) in this step
    # A commit that began writing: its accepted counts and what it needs to run again from the start (``commit``)
    committing: tuple[int, ...] | None = None
    saved: object = field(default=None, compare=False)
    wrote_state: bool = False  # the recurrent commit may have copied snapshots into the state

    @property
    def live(self) -> list[int]:
        return [s for s in self.rows if s >= 0]


class SlotTracker:
    def __init__(self, cfg):
        self.cfg = cfg
        self._free = list(range(cfg.num_slots - 1, -1, -1))  # pop() hands out 0, 1, 2, ...
        self.live: set[int] = set()
        self.step: StepInFlight | None = None
        # Slots whose state an aborted in-place decode (recurrent backend) left half-advanced: only free().
        self.torn: set[int] = set()
        self.ahead_owed: tuple | None = None  # (rows, counts) of a commit whose fold ahead failed (state/commit.py)

    @property
    def num_free(self) -> int:
        return len(self._free)

    def check_alloc(self, n: int) -> None:
        if not is_int(n) or n < 1:
            raise ValueError(f"n must be a positive int, got {n!r}")
        if n > len(self._free):
            raise PoolExhaustedError(f"asked for {n} slots, {len(self._free)} of {self.cfg.num_slots} are free")

    def peek(self, n: int) -> list[int]:
        """The ids ``alloc(n)`` will hand out (after ``check_alloc(n)``)."""
        return self._free[::-1][: int(n)]

    def alloc(self, n: int) -> list[int]:
        self.check_alloc(n)
        self.ahead_owed = None
        ids = [self._free.pop() for _ in range(int(n))]
        self.live.update(ids)
        return ids

    def unalloc(self, ids: list[int]) -> None:
        """Undo ``alloc`` of ``ids`` (what it returned): the next ``alloc`` hands them out again, in that order."""
        for s in reversed(ids):
            self.live.discard(s)
            self._free.append(s)

    def check_free(self, ids: list[int]) -> None:
        self.check_idle(ids, "free", allow_torn=True)

    def free(self, ids: list[int]) -> None:
        self.check_free(ids)
        self.ahead_owed = None
        for s in ids:
            self.live.discard(s)
            self.torn.discard(s)
            self._free.append(s)

    def check_ids(self, slots: torch.Tensor, name: str, padding: bool) -> list[int]:
        ids = slots.tolist()
        bad = [s for s in ids if not (-1 <= s < self.cfg.num_slots) or (s == -1 and not padding)]
        if bad:
            lo = -1 if padding else 0
            why = " (-1 marks padding, which only a step's calls take: name live slots here)" if -1 in bad else ""
            raise SlotError(f"{name} holds ids {bad} outside [{lo}, {self.cfg.num_slots}){why}")
        live = [s for s in ids if s >= 0]
        if len(set(live)) != len(live):
            raise SlotError(f"{name} holds slot ids {sorted({s for s in live if live.count(s) > 1})} more than once")
        dead = [s for s in live if s not in self.live]
        if dead:
            raise SlotError(f"{name}: slots {dead} are not allocated (free, or never allocated)")
        return ids

    def check_idle(self, ids: list[int], what: str, *, allow_torn: bool = False) -> None:
        busy = [s for s in ids if self.step is not None and s in self.step.rows and s >= 0]
        if busy:
            raise SlotError(f"{what}: slots {busy} are in a step that is not committed yet (begun by a conv_update, "
                            "verify or decode since the last commit); commit() or abort() it first")  # fmt: skip
        self.check_not_torn(ids, what, allow_torn=allow_torn)

    def check_not_torn(self, ids: list[int], what: str, *, allow_torn: bool = False) -> None:
        torn = [s for s in ids if s in self.torn]
        if torn and not allow_torn:
            raise SlotError(f"{what}: slots {torn} lost their state when an in-place decode step was aborted "
                            "half-way through the layers; free() them")  # fmt: skip

    def _windows(self, ids: list[int], cu_seqlens: torch.Tensor) -> tuple[int, ...]:
        cu = cu_seqlens.tolist()
        if not isinstance(cu, list) or len(cu) != len(ids) + 1:
            raise ValueError(f"cu_seqlens must have {len(ids) + 1} entries for {len(ids)} rows, got {cu}")
        lens = tuple(cu[i + 1] - cu[i] for i in range(len(ids)))
        bad = [n for s, n in zip(ids, lens) if s >= 0 and not 1 <= n <= self.cfg.window]
        if bad:
            raise ValueError(f"cu_seqlens gives windows {list(lens)}; every live row needs 1..{self.cfg.window} "
                             f"tokens (PoolConfig.window={self.cfg.window})")  # fmt: skip
        return lens

    def check_call(self, part: str, layer: int, ids: list[int], cu_seqlens: torch.Tensor, kind: str | None) -> None:
        """Check that ``part`` ("conv" or "ssm", of ``kind``) of ``layer`` may run on rows ``ids`` now."""
        windows = self._windows(ids, cu_seqlens)
        self.check_not_torn(ids, kind or "conv_update")
        st = self.step
        if st is None:
            return
        if st.rows != tuple(ids) or st.windows != windows:
            raise SlotError(f"a step over rows {list(st.rows)} with windows {list(st.windows)} is in flight; "
                            f"this call has rows {ids} with windows {list(windows)}: commit() or abort() it "
                            "first")  # fmt: skip
        if kind is not None and st.kind is not None and st.kind != kind:
            raise SlotError(f"cannot {kind} while a {st.kind} step is in flight; commit() it first")
        done = st.conv if part == "conv" else st.ssm
        if layer in done:
            what = "conv_update" if part == "conv" else st.kind
            raise SlotError(f"slots {st.live} already ran {what} of layer {layer} in this step; commit() before "
                            "the next step")  # fmt: skip

    def record(self, part: str, layer: int, ids: list[int], cu_seqlens: torch.Tensor, kind: str | None) -> None:
        """Note that ``part`` of ``layer`` ran (call after ``check_call`` passed and the op succeeded)."""
        if self.step is None:
            self.step = StepInFlight(tuple(ids), self._windows(ids, cu_seqlens))
            self.ahead_owed = None  # a fold ahead that failed: this step's verify folds those rows
        if kind is not None:
            self.step.kind = kind
        (self.step.conv if part == "conv" else self.step.ssm).add(layer)

    def record_failure(self, ids: list[int], cu_seqlens: torch.Tensor, kind: str, *, torn: bool) -> None:
        """An op of this step failed after it may have written: the step exists (``abort`` settles it); with
        ``torn`` the rows' states were being updated in place and are lost."""
        if self.step is None:
            self.step = StepInFlight(tuple(ids), self._windows(ids, cu_seqlens))
            self.ahead_owed = None
        self.step.failed = True
        self.step.kind = self.step.kind or kind
        if torn:
            self.torn.update(s for s in ids if s >= 0)

    def check_commit(self, ids: list[int], num_accepted: torch.Tensor) -> tuple[StepInFlight, list[int]]:
        """Check that ``ids`` are exactly the rows of the step in flight, that every layer ran its conv and
        its verify, and that every live row accepts 1..window tokens; returns the step and the counts (host)."""
        st = self.step
        if st is None:
            live = [s for s in ids if s >= 0]
            raise SlotError(f"commit: slots {live} have no verified step to commit")
        if tuple(ids) != st.rows:
            raise SlotError(f"commit must name exactly the rows of the step in flight, {list(st.rows)} (same order, "
                            f"padding included), got {ids}")  # fmt: skip
        all_layers = set(range(self.cfg.num_layers))
        for part, done in ((st.kind or "verify", st.ssm), ("conv_update", st.conv)):
            if done != all_layers:
                raise SlotError(f"commit: slots {st.live} have not run {part} of layers {sorted(all_layers - done)} "
                                "in this step")  # fmt: skip
        counts = num_accepted.tolist()
        for s, n, w in zip(ids, counts, st.windows):
            if s >= 0 and not 1 <= n <= w:
                raise SlotError(f"num_accepted={n} for slot {s} is outside [1, {w}] (its window)")
        if st.committing is not None and tuple(counts) != st.committing:
            raise SlotError(f"a commit of this step with num_accepted={list(st.committing)} was interrupted; call "
                            f"commit again with those counts to finish it (or abort it), got {counts}")  # fmt: skip
        return st, counts

    def end_step(self) -> None:
        self.step = None
