"""Frozen configuration of a GDN state pool."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..ops.ring import check_ring_geometry
from ..ops.verify import DOT_PRECISIONS

BACKENDS = ("replay", "recurrent")


@dataclass(frozen=True)
class PoolConfig:
    """Geometry and policy of a ``GDNStatePool`` (all GDN layers of one model, one device).

    ``max_window`` is T (last accepted token + drafts); ``ring_len`` L (replay backend only; a power
    of two >= 2T); ``max_batch`` bounds the rows of one step (default ``num_slots``) and sizes the
    recurrent backend's snapshot scratch and both backends' conv-window scratch. ``conv_channels``
    defaults to the q/k/v width 2*H*K + HV*V. ``validate`` turns on the host-side checks of slot
    ids and the step protocol (they read slot ids back to the host; engines that capture CUDA
    graphs turn them off).
    """

    num_slots: int
    num_layers: int
    H: int
    HV: int
    K: int
    V: int
    max_window: int = 4
    ring_len: int = 16
    backend: str = "replay"
    dtype: torch.dtype = torch.bfloat16
    u_dtype: torch.dtype | None = None
    conv_kernel: int = 4
    conv_channels: int | None = None
    max_batch: int | None = None
    device: str | torch.device = "cpu"
    validate: bool = True
    dot_precision: str = "tf32"
    impl: str = field(default="auto")

    def __post_init__(self):
        for name in ("num_slots", "num_layers", "H", "HV", "K", "V", "max_window", "conv_kernel"):
            val = getattr(self, name)
            if not isinstance(val, int) or val < 1:
                raise ValueError(f"PoolConfig.{name} must be a positive int, got {val!r}")
        if self.HV % self.H:
            raise ValueError(f"PoolConfig.HV={self.HV} must be a multiple of H={self.H}")
        if self.backend not in BACKENDS:
            raise ValueError(f"PoolConfig.backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.backend == "replay":
            check_ring_geometry(self.ring_len, self.max_window)
        if self.dot_precision not in DOT_PRECISIONS:
            raise ValueError(f"PoolConfig.dot_precision must be one of {DOT_PRECISIONS}, got {self.dot_precision!r}")
        if self.max_batch is not None and (not isinstance(self.max_batch, int) or self.max_batch < 1):
            raise ValueError(f"PoolConfig.max_batch must be a positive int or None, got {self.max_batch!r}")
        if self.conv_kernel < 2:
            raise ValueError(f"PoolConfig.conv_kernel must be >= 2, got {self.conv_kernel}")

    @property
    def channels(self) -> int:
        return self.conv_channels if self.conv_channels is not None else 2 * self.H * self.K + self.HV * self.V

    @property
    def batch_rows(self) -> int:
        return self.max_batch if self.max_batch is not None else self.num_slots

    def geometry(self) -> tuple:
        """What a snapshot must match to be restored into a pool of this config."""
        return (self.backend, self.num_layers, self.H, self.HV, self.K, self.V, self.max_window,
                self.ring_len if self.backend == "replay" else None, self.dtype, self.u_dtype or self.dtype,
                self.conv_kernel, self.channels)  # fmt: skip
