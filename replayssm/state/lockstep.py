"""Run a second ("shadow") state pool in lockstep with the one that drives the model.

Inside a model, every GDN layer's inputs depend on the previous layers' *outputs*, and the two
backends compute window outputs by different formulas (recurrence vs the ``(I + A)^-1`` transform),
so two independently run models drift apart by output rounding after the first layer. The bitwise
contract is about the *state given the same inputs*; ``LockstepPool`` checks it inside a real model:
every call is replayed on the shadow pool with exactly the primary's inputs (the primary's outputs
go on to the next layer), so after every commit the two pools' committed states can be compared
with ``torch.equal`` at every layer, through folds, preemption and forks.
"""

from __future__ import annotations

import torch

from ..ops._common import use_triton
from ..ops._gluon import check_interpretable
from .backend import GDNStateBackend
from .transfer import ParkedSlots


def _lockstep_fields(pool) -> dict:
    """What must agree between lockstep pools so that a call one accepts, every one accepts (each checks everything
    before it writes, so a refusal then leaves every pool as it was). Backend, ring length and ``u_dtype`` may
    differ: they change how a pool keeps its state, not which calls it takes. ``impl`` may not: the kernels and the
    references refuse different inputs (the kernels off a GPU without the interpreter, bf16 in the interpreter).
    What the backends still check differently is checked on every pool before any of them writes: ``verify`` (a
    recurrent pool of window 1 takes none) and ``write_prefill`` (a replay slot with history takes none)."""
    cfg = pool.cfg
    return dict(num_slots=cfg.num_slots, num_layers=cfg.num_layers, shape=cfg.shape, window=cfg.window,
                dtype=cfg.dtype, conv_kernel=cfg.conv_kernel, channels=cfg.channels, max_batch=cfg.batch_rows,
                validate=cfg.validate, impl=cfg.impl, device=pool.device)  # fmt: skip


def _same_call(a: tuple, b: tuple) -> bool:
    """Whether two ``(method, args, kw, parts)`` name the same call: equal values, tensors ``torch.equal`` (only
    compared when a call was interrupted part-way)."""

    def same(x, y) -> bool:
        if x is y:
            return True
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape
                    and x.dtype == y.dtype and x.device == y.device):  # fmt: skip
                return False
            if x.is_floating_point():  # NaN where the other has NaN counts as equal
                nan = torch.isnan(x)
                return torch.equal(nan, torch.isnan(y)) and torch.equal(x.masked_fill(nan, 0), y.masked_fill(nan, 0))
            return torch.equal(x, y)
        if isinstance(x, (tuple, list)) and isinstance(y, (tuple, list)):
            return type(x) is type(y) and len(x) == len(y) and all(same(u, v) for u, v in zip(x, y))
        if isinstance(x, dict) and isinstance(y, dict):
            return x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
        if isinstance(x, ParkedSlots) and isinstance(y, ParkedSlots):
            return x is y
        return type(x) is type(y) and x == y

    return same(a, b)


class LockstepPool:
    """A ``GDNStateBackend`` over several pools: ``primary`` answers, ``shadow`` mirrors every state change.

    ``extra`` shadows (e.g. the experimental open-loop pool of the drift study) are fed the same way. The pools
    must be distinct objects that accept the same calls (slots, layers, head shape, window, dtype, conv geometry,
    batch rows, validation, ``impl`` and device equal; backend, ring length and ``u_dtype`` may differ); anything
    else is refused here, before any call.

    Every method is the ``GDNStatePool`` method of the same name (docs/state.md), run on every pool, the primary
    first, with the same arguments: what it returns is the primary's (``alloc``, ``restore`` and ``fork`` check
    that every pool handed out the same slots; ``offload`` returns one ``ParkedSlots`` per pool, which ``restore``
    takes back as they are). Reads (``committed_state``, ``memory_report``) are the primary's.
    """

    def __init__(self, primary: GDNStateBackend, shadow: GDNStateBackend, *extra: GDNStateBackend):
        pools = (primary, shadow, *extra)
        if len({id(p) for p in pools}) != len(pools):
            raise ValueError("lockstep pools must be distinct pool objects (the same pool was passed twice)")
        want = _lockstep_fields(primary)
        for i, other in enumerate(pools[1:], 1):
            got = _lockstep_fields(other)
            diff = [f"{k} {want[k]!r} vs {got[k]!r}" for k in want if want[k] != got[k]]
            if diff:
                raise ValueError(f"lockstep pools must accept the same calls: pool {i} differs from the primary in "
                                 + ", ".join(diff))  # fmt: skip
        self.primary, self.shadow, self.extra = primary, shadow, list(extra)
        self.cfg, self.device = primary.cfg, primary.device
        self._partial: tuple | None = None  # (call, results of the pools that finished it): ``_each``

    @property
    def _followers(self) -> list[GDNStateBackend]:
        return [self.shadow, *self.extra]

    @property
    def _all(self) -> list[GDNStateBackend]:
        return [self.primary, self.shadow, *self.extra]

    @property
    def num_free(self) -> int:
        """Free slots (the same in every pool)."""
        return self.primary.num_free

    def _same_slots(self, slots: torch.Tensor, others: list[torch.Tensor], what: str) -> torch.Tensor:
        if any(not torch.equal(slots, o) for o in others):
            raise RuntimeError(f"lockstep pools {what} different slots")
        return slots

    def _each(self, method: str, *args, parts: tuple | None = None, **kw) -> list:
        """``method`` on every pool, the primary first (pool ``i`` gets ``parts[i]`` as its first argument, where
        given). Each pool checks everything before it writes, and all of them keep the same books, so when the
        primary refuses nothing moved anywhere; a shadow refusing what the primary accepted means the pools
        disagree, which is a bug and is said so.

        A call that fails part-way through the pools (an interrupt, a failed launch) leaves the ones that finished
        it noted: the same call again (same method, equal arguments) runs it on the others only and returns what one
        call would have; any other call is refused until then, but ``abort``, which drops an interrupted call of the
        step (``conv_update``, ``verify``, ``decode``) or marks the rows of an interrupted ``commit`` lost."""
        key = (method, args, kw, parts)
        done = self._resumed(key)
        out = list(done)
        for i, p in enumerate(self._all[len(done) :], len(done)):
            a = args if parts is None else (parts[i], *args)
            try:
                out.append(getattr(p, method)(*a, **kw))
            except Exception as e:
                if i == 0:
                    raise
                raise RuntimeError(f"lockstep pools disagree: pool {i} ({p.cfg.backend}) raised in {method} after "
                                   f"the primary succeeded: {e!r}") from e  # fmt: skip
            self._partial = (key, list(out)) if len(out) < len(self._all) else None
        return out

    def _resumed(self, key: tuple) -> list:
        """The results of the pools that finished ``key`` before it was interrupted (none if it was not); raises if
        another call was interrupted part-way."""
        if self._partial is None:
            return []
        if not _same_call(self._partial[0], key):
            name, n = self._partial[0][0].lstrip("_"), len(self._partial[1])
            raise RuntimeError(f"an interrupted {name} ran on {n} of the {len(self._all)} lockstep pools; call "
                               f"{name} again with the same arguments to finish it")  # fmt: skip
        return self._partial[1]

    def alloc(self, n: int) -> torch.Tensor:
        """``n`` fresh slots in every pool (the same ids)."""
        slots, *others = self._each("alloc", n)
        return self._same_slots(slots, others, "handed out")

    def free(self, slots: torch.Tensor) -> None:
        """Free ``slots`` in every pool."""
        self._each("free", slots)

    def check_write_prefill(self, layer: int, slots: torch.Tensor, state: torch.Tensor, conv_state: torch.Tensor):
        """Every pool's ``check_write_prefill`` (a replay pool refuses slots with ring history; a recurrent one
        keeps none)."""
        for p in self._all:
            p.check_write_prefill(layer, slots, state, conv_state)

    def write_prefill(self, layer: int, slots: torch.Tensor, state: torch.Tensor, conv_state: torch.Tensor) -> None:
        """A prompt's final state and conv state into fresh ``slots`` of every pool (checked on all first)."""
        key = ("_write_prefill", (layer, slots, state, conv_state), {}, None)
        if not self._resumed(key):  # (an interrupted write_prefill: the pools that wrote would pass the checks too)
            self.check_write_prefill(layer, slots, state, conv_state)  # every pool, before any of them writes
        self._each("_write_prefill", layer, slots, state, conv_state)  # (checked: each pool's reads once)

    def conv_update(self, layer: int, x: torch.Tensor, **kw) -> torch.Tensor:
        """Every pool's causal conv over the window; returns the primary's output."""
        return self._each("conv_update", layer, x, **kw)[0]

    @property
    def verifies(self) -> bool:
        """Whether every pool takes ``verify`` (a recurrent pool of window 1 only decodes)."""
        return all(p.verifies for p in self._all)

    def _check_interpretable(self, q) -> None:
        """The replay kernels refuse bf16 in Triton's interpreter, the recurrent one takes it: refuse it for every
        pool before the primary runs."""
        replay = any(p.cfg.backend == "replay" for p in self._all)
        if replay and isinstance(q, torch.Tensor) and use_triton(self.cfg.impl, q):
            check_interpretable(q=q)

    def verify(self, layer: int, q, k, v, a, b, **kw) -> torch.Tensor:
        """Every pool's verify of the same inputs; returns the primary's output."""
        if not self.verifies:  # before the primary verifies: a recurrent pool of window 1 takes no verify
            raise ValueError("a pool of this lockstep pair has window=1 and keeps no snapshots: it can only decode()")
        self._check_interpretable(q)
        return self._each("verify", layer, q, k, v, a, b, **kw)[0]

    def decode(self, layer: int, q, k, v, a, b, **kw) -> torch.Tensor:
        """Every pool's plain decode of the same inputs; returns the primary's output."""
        self._check_interpretable(q)
        return self._each("decode", layer, q, k, v, a, b, **kw)[0]

    def commit(self, slots: torch.Tensor, num_accepted: torch.Tensor) -> None:
        """Commit the step in every pool (an interrupted one is finished by the same call again)."""
        self._each("commit", slots, num_accepted)

    def abort(self, slots: torch.Tensor) -> list[int]:
        """Abort on every pool; the slots any of them lost (see ``GDNStatePool.abort``). A layer's call of the step
        that ran on some of the pools only (interrupted) is dropped with the step; a commit that ran on some only
        cannot be dropped from those, so its rows are lost in all (the pools that had not committed abort, the
        others mark them lost), as a pool's own commit that took the step and then failed; any other interrupted
        call is not dropped (``_each``)."""
        saved = self._partial
        if saved is not None and saved[0][0] == "commit" and _same_call(saved[0][1][:1], (slots,)):
            done = len(saved[1])
            for p in self._all[done:]:
                p.abort(slots)
            live = [s for s in slots.tolist() if s >= 0]
            for p in self._all[:done]:
                p.tracker.torn.update(live)
            self._partial = None
            return live
        if saved is not None and saved[0][0] in ("conv_update", "verify", "decode"):
            self._partial = None  # each pool's books know how far its step got
        try:
            return sorted({s for lost in self._each("abort", slots) for s in lost})
        except BaseException:
            if self._partial is None:  # no pool aborted: the interrupted call is still there to finish
                self._partial = saved
            raise

    def committed_state(self, layer: int, slots: torch.Tensor) -> torch.Tensor:
        """The primary's committed state of ``slots`` at ``layer``."""
        return self.primary.committed_state(layer, slots)

    def step_in_flight(self) -> bool | None:
        """Whether any of the pools has a step in flight (True while a commit that ran on some of them only is
        unfinished); None where they keep no books."""
        answers = [p.step_in_flight() for p in self._all]
        return None if None in answers else any(answers)

    def committed_conv_state(self, layer: int, slots: torch.Tensor) -> torch.Tensor:
        """The primary's committed conv state of ``slots`` at ``layer``."""
        return self.primary.committed_conv_state(layer, slots)

    def flush(self, slots: torch.Tensor) -> None:
        """Fold ``slots``' ring history into their checkpoints now, in every pool."""
        self._each("flush", slots)

    def offload(self, slots: torch.Tensor) -> tuple[ParkedSlots, ...]:
        """One ``ParkedSlots`` per pool, primary first."""
        return tuple(self._each("offload", slots))

    def check_restore(self, parked: tuple[ParkedSlots, ...], room: bool = True) -> None:
        """Raise what ``restore(parked)`` would, before anything is allocated in any pool."""
        if not isinstance(parked, tuple) or len(parked) != len(self._all):
            raise TypeError(f"parked must be a tuple of {len(self._all)} ParkedSlots (one per lockstep pool, from "
                            f"offload), got {type(parked).__name__}")  # fmt: skip
        for p, one in zip(self._all, parked):
            p.check_restore(one, room)

    def restore(self, parked: tuple[ParkedSlots, ...]) -> torch.Tensor:
        """``offload``'s tuple back into new slots (the same ids in every pool)."""
        if not self._resumed(("restore", (), {}, parked)):
            self.check_restore(parked)  # every pool refuses before any of them allocates
        slots, *others = self._each("restore", parts=parked)
        return self._same_slots(slots, others, "restored into")

    def fork(self, slots: torch.Tensor) -> torch.Tensor:
        """New slots holding copies of ``slots``' committed states, in every pool."""
        new, *others = self._each("fork", slots)
        return self._same_slots(new, others, "forked into")

    def memory_report(self) -> dict[str, int]:
        """The primary pool's bytes (the shadows exist only to check it)."""
        return self.primary.memory_report()

    def states_equal(self, slots: torch.Tensor) -> bool:
        """Committed GDN and conv states of ``slots`` are bitwise equal in the primary and the shadow, at every
        layer (``extra`` shadows are not compared: the drift study's open-loop pool differs by design)."""
        return all(
            torch.equal(self.primary.committed_state(i, slots), self.shadow.committed_state(i, slots))
            and torch.equal(self.primary.committed_conv_state(i, slots), self.shadow.committed_conv_state(i, slots))
            for i in range(self.cfg.num_layers)
        )
