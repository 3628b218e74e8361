"""The per-slot circular ring of per-token inputs, and its cursors (docs/design.md, "ring protocol").

What one layer's ring stores per slot and logical position:

- ``k``    [S, H, L, K]  normalised key ``k^``, fp32 (one per *key* head, shared by its value heads);
  bitwise the key the baseline normalises itself, so the fold never normalises again
- ``v``    [S, HV, L, V] raw value, activation dtype
- ``g``    [S, HV, L]    fp32 log-decay, bitwise what the baseline computes from ``a``
- ``beta`` [S, HV, L]    fp32 write strength, bitwise what the baseline computes from ``b``
- ``u``    [S, HV, L, V] update vector of the window transform (``u_dtype``, default the activation
  dtype); only the *outputs* read it, so its rounding never reaches the checkpoint.

plus ``folded`` [S, HV, V // 4] int32, per 4-row block of every head: the ``epoch`` in which that
block's history was folded into the checkpoint. A verify that folds a flushing slot marks its blocks;
a second verify or fold of the same uncommitted step sees the mark and does not fold again, so a
retry is harmless and nothing has to be read back to the host (CUDA-graph safe).

Cursors are per slot and shared by all GDN layers (``RingCursors``): ``write_pos`` committed,
unfolded records; ``base`` the rotating origin (physical index of logical ``i`` is
``(base + i) & (L - 1)``); ``flush`` fold at the next verify; ``pending`` the length of the window
written by the last verify and not yet committed (0 = nothing pending); ``epoch`` a per-slot
counter that every commit, fold-reset and reset advances.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from ._ints import is_int
from ._validate import ACT_DTYPES, byte_spans, check_no_overlap, values_checkable
from .shape import head_dim_error

RECORDS = ("k", "v", "g", "beta", "u", "folded")  # a ring's buffers, in the order its constructor takes them
MARK_ROWS = 4  # rows per fold marker; equals _pinned.ROW_LANES (the rows of the smallest tile a kernel loads)


@dataclass(frozen=True)
class RingCursors:
    """Per-slot cursors, int32 [S] each, shared by every layer's ``Ring``. ``window`` is T, the longest
    window a step may verify; ``L`` the ring length (a power of two >= 2 * window)."""

    write_pos: torch.Tensor
    base: torch.Tensor
    flush: torch.Tensor
    pending: torch.Tensor
    epoch: torch.Tensor
    L: int
    window: int

    def __post_init__(self):
        check_ring_geometry(self.L, self.window)
        first = self.write_pos
        for name in ("write_pos", "base", "flush", "pending", "epoch"):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != 1:
                raise TypeError(f"RingCursors.{name} must be a 1-D int32 tensor, got {t!r:.60}")
            if t.shape != first.shape or t.device != first.device:
                raise ValueError(f"RingCursors.{name} must have shape {tuple(first.shape)} on {first.device}, "
                                 f"got {tuple(t.shape)} on {t.device}")  # fmt: skip
            if not t.is_contiguous():
                raise ValueError(f"RingCursors.{name} must be contiguous")
        if first.shape[0] < 1:
            raise ValueError("RingCursors need at least one slot")
        self.check_values()

    def check_values(self) -> None:
        """Every cursor within its range (``epoch`` wraps and is not checked): checked at construction, and again
        by the ops called with ``validate=True``, since the tensors stay writable. Reads them back to the host, so
        it does nothing on the meta device or under CUDA-graph capture."""
        if self.write_pos.device.type == "meta" or not values_checkable(self.write_pos):
            return
        limits = {"write_pos": self.L, "base": self.L - 1, "flush": 1, "pending": self.window}
        values = torch.stack([getattr(self, name) for name in limits]).cpu()  # one read back
        for (name, hi), t in zip(limits.items(), values):
            if bool(((t < 0) | (t > hi)).any()):
                raise ValueError(f"RingCursors.{name} must hold values in [0, {hi}] (L={self.L}, window="
                                 f"{self.window}), got {t.tolist()[:16]}")  # fmt: skip

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The five cursor tensors."""
        return self.write_pos, self.base, self.flush, self.pending, self.epoch

    @cached_property
    def written_spans(self) -> list:
        """The cursors' byte spans as tensors the ops write (``_validate.byte_spans``), computed once: what an op's
        other tensors must not overlap (``check_no_overlap``)."""
        names = ("write_pos", "base", "flush", "pending", "epoch")  # (``tensors()``'s order)
        return byte_spans((f"ring cursors ({n})", t) for n, t in zip(names, self.tensors()))

    def __repr__(self) -> str:
        return f"RingCursors(slots={self.num_slots}, L={self.L}, window={self.window}, device={self.device})"

    @property
    def num_slots(self) -> int:
        return self.write_pos.shape[0]

    @property
    def device(self) -> torch.device:
        return self.write_pos.device

    def clone(self) -> RingCursors:
        """An independent copy (the cursors of a parked slot or a what-if run)."""
        return RingCursors(self.write_pos.clone(), self.base.clone(), self.flush.clone(), self.pending.clone(),
                           self.epoch.clone(), self.L, self.window)  # fmt: skip

    @classmethod
    def allocate(cls, num_slots: int, *, L: int, window: int, device=None) -> RingCursors:
        """Cursors of ``num_slots`` empty slots for rings of ``L`` records and windows of up to ``window`` tokens."""
        check_ring_geometry(L, window)
        if not is_int(num_slots) or num_slots < 1:
            raise ValueError(f"num_slots must be a positive int, got {num_slots!r}")
        num_slots, L, window = int(num_slots), int(L), int(window)

        def z():
            return torch.zeros(num_slots, dtype=torch.int32, device=device)

        return cls(z(), z(), z(), z(), z(), L, window)


MAX_RING_LEN = 1 << 16  # a ring's records, at most (the CLI's --ring takes the same; cursors count in int32)


def ring_length_for(window: int, at_least: int = 16) -> int:
    """The ring length a pool uses for windows of ``window`` tokens: the smallest power of two that is
    >= 2 * window and >= ``at_least`` (itself rounded up to a power of two)."""
    if not is_int(window) or window < 1:
        raise ValueError(f"window must be an int >= 1, got {window!r}")
    L = 2
    while L < max(2 * window, at_least):
        L *= 2
    return L


def check_ring_geometry(L: int, window: int) -> None:
    if not is_int(window) or window < 1:
        raise ValueError(f"window must be an int >= 1, got {window!r}")
    if not is_int(L) or L < 2 or L & (L - 1):
        raise ValueError(f"ring length L must be a power of two >= 2, got {L!r}")
    if L < 2 * window:
        raise ValueError(f"ring length L={L} must be >= 2 * window = {2 * window} (a window of {window} tokens)")


@dataclass(frozen=True)
class Ring:
    """One GDN layer's ring buffers plus the (shared) cursors. See the module docstring for layouts.

    Construction checks every buffer against the cursors (slots, L) and against each other (heads,
    head dims, dtypes, device), so a ring whose kernels would read out of bounds cannot be built."""

    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    u: torch.Tensor
    folded: torch.Tensor
    cursors: RingCursors

    def __post_init__(self):
        if not isinstance(self.cursors, RingCursors):
            raise TypeError(f"Ring.cursors must be RingCursors, got {type(self.cursors).__name__}")
        S, L, dev = self.cursors.num_slots, self.cursors.L, self.cursors.device
        for name in RECORDS:
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"Ring.{name} must be a tensor, got {type(t).__name__}")
            if t.device != dev:
                raise ValueError(f"Ring.{name} is on {t.device}, the cursors on {dev}")
            if not t.is_contiguous():
                raise ValueError(f"Ring.{name} must be contiguous")
        if self.k.dim() != 4 or self.v.dim() != 4:
            raise ValueError(f"Ring.k must be [S, H, L, K] and Ring.v [S, HV, L, V], got {tuple(self.k.shape)}, "
                             f"{tuple(self.v.shape)}")  # fmt: skip
        H, K, HV, V = self.k.shape[1], self.k.shape[3], self.v.shape[1], self.v.shape[3]
        want = {
            "k": (S, H, L, K),
            "v": (S, HV, L, V),
            "g": (S, HV, L),
            "beta": (S, HV, L),
            "u": (S, HV, L, V),
            "folded": (S, HV, max(1, V // MARK_ROWS)),
        }
        for name, shape in want.items():
            if tuple(getattr(self, name).shape) != shape:
                raise ValueError(f"Ring.{name} must have shape {shape} for {S} slots and L={L}, "
                                 f"got {tuple(getattr(self, name).shape)}")  # fmt: skip
        if H < 1 or HV % H:
            raise ValueError(f"Ring: value heads HV={HV} must be a multiple of key heads H={H}")
        for name, d in (("K", K), ("V", V)):
            if err := head_dim_error(f"Ring: head dim {name}", d):
                raise ValueError(err)
        dtypes = {"k": (torch.float32,), "v": ACT_DTYPES, "g": (torch.float32,), "beta": (torch.float32,),
                  "u": ACT_DTYPES, "folded": (torch.int32,)}  # fmt: skip
        for name, allowed in dtypes.items():
            if getattr(self, name).dtype not in allowed:
                raise TypeError(f"Ring.{name} must have dtype in {allowed}, got {getattr(self, name).dtype}")
        check_no_overlap((), (), spans=self.written_spans)  # (its buffers are written: no two may share a byte)

    def __repr__(self) -> str:
        S, H, L, K = self.k.shape
        return (f"Ring(slots={S}, H={H}, HV={self.v.shape[1]}, K={K}, V={self.v.shape[3]}, L={L}, window="
                f"{self.window}, dtype={self.v.dtype}, device={self.k.device})")  # fmt: skip

    @property
    def L(self) -> int:
        """Records per slot (the ring length; ``ring_len`` in the configs)."""
        return self.cursors.L

    @property
    def window(self) -> int:
        """The most tokens one verify window may hold (T)."""
        return self.cursors.window

    @property
    def num_slots(self) -> int:
        """Slots the ring has records for (the checkpoint's S)."""
        return self.k.shape[0]

    @property
    def dtype(self) -> torch.dtype:
        """The activation dtype of the raw value records (the dtype the verify's inputs must have)."""
        return self.v.dtype

    def clone(self, cursors: RingCursors | None = None) -> Ring:
        """An independent copy of the records, with ``cursors`` (default: a copy of this ring's cursors)."""
        return Ring(self.k.clone(), self.v.clone(), self.g.clone(), self.beta.clone(), self.u.clone(),
                    self.folded.clone(), cursors if cursors is not None else self.cursors.clone())  # fmt: skip

    def records(self) -> tuple[torch.Tensor, ...]:
        """The record buffers and the fold markers (``RECORDS``)."""
        return tuple(getattr(self, name) for name in RECORDS)

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The record buffers, the fold markers and the cursors."""
        return *self.records(), *self.cursors.tensors()

    @cached_property
    def written_spans(self) -> list:
        """The byte spans of ``tensors()`` as tensors the ops write, computed once (``RingCursors.written_spans``)."""
        return ring_spans(self, "ring")

    @property
    def nbytes(self) -> int:
        """Bytes of this layer's record buffers and fold markers (cursors excluded: they are shared)."""
        return sum(t.numel() * t.element_size() for t in self.records())

    @classmethod
    def allocate(
        cls,
        num_slots: int,
        H: int,
        HV: int,
        K: int,
        V: int,
        *,
        L: int,
        window: int,
        dtype: torch.dtype = torch.bfloat16,
        u_dtype: torch.dtype | None = None,
        device=None,
        cursors: RingCursors | None = None,
    ) -> Ring:
        """Allocate an empty ring. Pass ``cursors`` to share one set of cursors across layers.

        ``L`` must be a power of two and ``>= 2 * window``; ``dtype`` is the activation dtype of the
        raw ``v`` records, ``u_dtype`` (default ``dtype``) that of the update vectors. Records are
        filled with NaN so that reading a never-written record cannot go unnoticed."""
        check_ring_geometry(L, window)
        for n, x in (("num_slots", num_slots), ("H", H), ("HV", HV), ("K", K), ("V", V)):
            if not is_int(x) or x < 1:
                raise ValueError(f"{n} must be a positive int, got {x!r}")
        num_slots, H, HV, K, V, L, window = (int(x) for x in (num_slots, H, HV, K, V, L, window))
        if HV % H:
            raise ValueError(f"HV={HV} must be a multiple of H={H}")
        if dtype not in ACT_DTYPES:
            raise TypeError(f"dtype must be one of {ACT_DTYPES}, got {dtype}")
        u_dtype = dtype if u_dtype is None else u_dtype
        if u_dtype not in ACT_DTYPES:
            raise TypeError(f"u_dtype must be one of {ACT_DTYPES}, got {u_dtype}")
        if cursors is None:
            cursors = RingCursors.allocate(num_slots, L=L, window=window, device=device)
        elif (cursors.num_slots, cursors.L, cursors.window) != (num_slots, L, window):
            raise ValueError(
                f"cursors are for (slots, L, window)={(cursors.num_slots, cursors.L, cursors.window)}, "
                f"ring asks {(num_slots, L, window)}"
            )
        device = cursors.device

        def nan(*shape, dt):
            return torch.full(shape, float("nan"), dtype=dt, device=device)

        return cls(
            k=nan(num_slots, H, L, K, dt=torch.float32),
            v=nan(num_slots, HV, L, V, dt=dtype),
            g=nan(num_slots, HV, L, dt=torch.float32),
            beta=nan(num_slots, HV, L, dt=torch.float32),
            u=nan(num_slots, HV, L, V, dt=u_dtype),
            folded=torch.full((num_slots, HV, max(1, V // MARK_ROWS)), -1, dtype=torch.int32, device=device),
            cursors=cursors,
        )


def ring_spans(rings, name: str) -> list:
    """The byte spans of a ``Ring``'s or ``RingLayers``' buffers (``RECORDS``) and of its cursors, as tensors the ops
    write, under ``name``."""
    return byte_spans((f"{name}.{kind}", getattr(rings, kind)) for kind in RECORDS) + rings.cursors.written_spans
