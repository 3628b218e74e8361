"""Frozen configuration of a GDN state pool."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..ops.ring import check_ring_geometry
from ..ops.shape import GDNShape

BACKENDS = ("replay", "recurrent")


@dataclass(frozen=True)
class PoolConfig:
    """Geometry and policy of a ``GDNStatePool`` (all GDN layers of one model, one device).

    ``window`` is T (last accepted token + drafts); ``ring_len`` L (replay backend only; a power
    of two >= 2T); ``max_batch`` bounds the rows of one step (default ``num_slots``) and sizes the
    recurrent backend's snapshot scratch and both backends' conv scratch. ``conv_channels``
    defaults to the q/k/v width (``GDNShape.conv_channels``). ``validate`` turns on the host-side checks of slot
    ids and the step protocol (they read slot ids back to the host; engines that capture CUDA
    graphs turn them off).
    """

    num_slots: int
    num_layers: int
    H: int
    HV: int
    K: int
    V: int
    window: int = 4
    ring_len: int = 16
    backend: str = "replay"
    dtype: torch.dtype = torch.bfloat16
    u_dtype: torch.dtype | None = None
    conv_kernel: int = 4
    conv_channels: int | None = None
    max_batch: int | None = None
    device: str | torch.device = "cpu"
    validate: bool = True
    impl: str = field(default="auto")

    def __post_init__(self):
        for name in ("num_slots", "num_layers", "H", "HV", "K", "V", "window", "conv_kernel"):
            val = getattr(self, name)
            if not isinstance(val, int) or val < 1:
                raise ValueError(f"PoolConfig.{name} must be a positive int, got {val!r}")
        if self.HV % self.H:
            raise ValueError(f"PoolConfig.HV={self.HV} must be a multiple of H={self.H}")
        if self.backend not in BACKENDS:
            raise ValueError(f"PoolConfig.backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.backend == "replay":
            check_ring_geometry(self.ring_len, self.window)
        if self.max_batch is not None and (not isinstance(self.max_batch, int) or self.max_batch < 1):
            raise ValueError(f"PoolConfig.max_batch must be a positive int or None, got {self.max_batch!r}")
        if self.conv_kernel < 2:
            raise ValueError(f"PoolConfig.conv_kernel must be >= 2, got {self.conv_kernel}")

    @property
    def shape(self) -> GDNShape:
        return GDNShape(self.H, self.HV, self.K, self.V)

    @property
    def channels(self) -> int:
        return self.conv_channels if self.conv_channels is not None else self.shape.conv_channels

    @property
    def batch_rows(self) -> int:
        return self.max_batch if self.max_batch is not None else self.num_slots
