"""Every GDN layer's ring in one allocation per record kind, on one set of cursors (``RingLayers``): what a pool keeps
and what an op over all layers at once (``gdn_fold_ahead``) reads. Layer i's slice is a ``Ring`` (ring.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import torch

from ._ints import is_int
from .ring import RECORDS, Ring, RingCursors, ring_spans


@dataclass(frozen=True)
class RingLayers:
    """Every GDN layer's ring in one allocation per record kind, sharing one set of cursors: ``k`` [NL, S, H, L, K],
    ``v`` and ``u`` [NL, S, HV, L, V], ``g`` and ``beta`` [NL, S, HV, L], ``folded`` [NL, S, HV, V // 4] (layer i's
    slice has ``Ring``'s layout). ``layers[i]`` is layer i's ``Ring``, a view. What an op over all layers at once
    (``gdn_fold_ahead``) reads; a pool keeps its rings this way."""

    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    u: torch.Tensor
    folded: torch.Tensor
    cursors: RingCursors
    layers: tuple[Ring, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        for name in RECORDS:
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.dim() < 2:
                raise TypeError(f"RingLayers.{name} must be a tensor with a leading layer dim, got {t!r:.60}")
        for name in RECORDS:  # the kernels index a layer's slot as ``layer * S + slot``: one dense allocation
            if not getattr(self, name).is_contiguous():
                raise ValueError(f"RingLayers.{name} must be contiguous (every layer's ring in one allocation)")
        n = self.k.shape[0]
        if n < 1 or any(getattr(self, name).shape[0] != n for name in RECORDS):
            raise ValueError(f"RingLayers: every record kind needs the same number of layers >= 1, got "
                             f"{[tuple(getattr(self, x).shape) for x in RECORDS]}")  # fmt: skip
        # Ring checks each layer's slice against the cursors and the others (shapes, dtypes, device, contiguity)
        object.__setattr__(self, "layers", tuple(Ring(*(getattr(self, x)[i] for x in RECORDS), self.cursors)
                                                 for i in range(n)))  # fmt: skip

    def __repr__(self) -> str:
        return f"RingLayers(layers={self.num_layers}, {repr(self.layers[0]).removeprefix('Ring(')}"

    @cached_property
    def written_spans(self) -> list:
        """Every layer's record buffers, fold markers and the cursors as byte spans the ops write, computed once
        (``Ring.written_spans``)."""
        return ring_spans(self, "rings")

    @property
    def num_layers(self) -> int:
        return self.k.shape[0]

    @classmethod
    def allocate(cls, num_layers: int, num_slots: int, H: int, HV: int, K: int, V: int, *, L: int, window: int,
                 dtype: torch.dtype = torch.bfloat16, u_dtype: torch.dtype | None = None, device=None,
                 cursors: RingCursors | None = None) -> RingLayers:  # fmt: skip
        """``num_layers`` empty rings (``Ring.allocate``'s arguments and checks, records NaN) on one set of cursors."""
        if not is_int(num_layers) or num_layers < 1:
            raise ValueError(f"num_layers must be a positive int, got {num_layers!r}")
        num_layers = int(num_layers)
        one = Ring.allocate(num_slots, H, HV, K, V, L=L, window=window, dtype=dtype, u_dtype=u_dtype, device=device,
                            cursors=cursors)  # fmt: skip
        stacked = (t.unsqueeze(0).repeat((num_layers,) + (1,) * t.dim()) for t in one.records())
        return cls(*stacked, one.cursors)
