"""The per-slot circular ring of raw per-token inputs, and its cursors (DESIGN §3).

What one layer's ring stores per slot and logical position (five buffers, SGLang's port keeps six):

- ``k``    [S, H, L, K]  raw key, activation dtype (one per *key* head, shared by its value heads)
- ``v``    [S, HV, L, V] raw value, activation dtype
- ``g``    [S, HV, L]    fp32 log-decay, bitwise what the baseline computes from ``a``
- ``beta`` [S, HV, L]    fp32 write strength, bitwise what the baseline computes from ``b``
- ``u``    [S, HV, L, V] update vector of the window transform (``u_dtype``, default the activation
  dtype); only the *outputs* read it, so its rounding never reaches the checkpoint.

The exact fold replays ``k, v, g, beta`` through the baseline's own update, so the folded checkpoint
is bitwise the baseline's state; ``u`` and ``k`` give the verify step ``S_prev q`` without ever
materialising ``S_prev``.

Cursors are per slot and shared by all GDN layers (``RingCursors``): ``write_pos`` committed,
unfolded records; ``base`` the rotating origin (physical index of logical ``i`` is
``(base + i) & (L - 1)``); ``flush`` fold at the next verify; ``pending`` the length of the window
written by the last verify and not yet committed (0 = nothing pending).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._validate import ACT_DTYPES


@dataclass(frozen=True)
class RingCursors:
    """Per-slot cursors, int32 [S] each, shared by every layer's ``Ring``."""

    write_pos: torch.Tensor
    base: torch.Tensor
    flush: torch.Tensor
    pending: torch.Tensor
    L: int
    window: int

    @property
    def num_slots(self) -> int:
        return self.write_pos.shape[0]

    def clone(self) -> RingCursors:
        """An independent copy (the cursors of parked slots or of a what-if run)."""
        return RingCursors(self.write_pos.clone(), self.base.clone(), self.flush.clone(), self.pending.clone(),
                           self.L, self.window)  # fmt: skip

    @classmethod
    def allocate(cls, num_slots: int, *, L: int, window: int, device=None) -> RingCursors:
        check_ring_geometry(L, window)
        if not isinstance(num_slots, int) or num_slots < 1:
            raise ValueError(f"num_slots must be a positive int, got {num_slots!r}")

        def z():
            return torch.zeros(num_slots, dtype=torch.int32, device=device)

        return cls(z(), z(), z(), z(), L, window)


def check_ring_geometry(L: int, window: int) -> None:
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an int >= 1, got {window!r}")
    if not isinstance(L, int) or L < 2 or L & (L - 1):
        raise ValueError(f"ring length L must be a power of two, got {L!r}")
    if L < 2 * window:
        raise ValueError(f"ring length L={L} must be >= 2 * window = {2 * window}")


@dataclass(frozen=True)
class Ring:
    """One GDN layer's ring buffers plus the (shared) cursors. See the module docstring for layouts."""

    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    u: torch.Tensor
    cursors: RingCursors

    @property
    def L(self) -> int:
        return self.cursors.L

    @property
    def window(self) -> int:
        return self.cursors.window

    @property
    def num_slots(self) -> int:
        return self.k.shape[0]

    def clone(self, cursors: RingCursors | None = None) -> Ring:
        """An independent copy of the records, with ``cursors`` (default: a copy of this ring's cursors)."""
        return Ring(self.k.clone(), self.v.clone(), self.g.clone(), self.beta.clone(), self.u.clone(),
                    cursors if cursors is not None else self.cursors.clone())  # fmt: skip

    @property
    def nbytes(self) -> int:
        """Bytes of this layer's record buffers (cursors excluded: they are shared)."""
        return sum(t.numel() * t.element_size() for t in (self.k, self.v, self.g, self.beta, self.u))

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

        ``L`` must be a power of two and ``>= 2 * window``; ``dtype`` is the activation dtype
        of the raw ``k``/``v`` records, ``u_dtype`` (default ``dtype``) that of the update vectors.
        Records are filled with NaN so that reading a never-written record cannot go unnoticed.
        """
        check_ring_geometry(L, window)
        for n, x in (("H", H), ("HV", HV), ("K", K), ("V", V)):
            if not isinstance(x, int) or x < 1:
                raise ValueError(f"{n} must be a positive int, got {x!r}")
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

        def nan(*shape, dt):
            return torch.full(shape, float("nan"), dtype=dt, device=device)

        return cls(
            k=nan(num_slots, H, L, K, dt=dtype),
            v=nan(num_slots, HV, L, V, dt=dtype),
            g=nan(num_slots, HV, L, dt=torch.float32),
            beta=nan(num_slots, HV, L, dt=torch.float32),
            u=nan(num_slots, HV, L, V, dt=u_dtype),
            cursors=cursors,
        )
