"""The head geometry of one GDN layer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GDNShape:
    """``H`` key heads, ``HV`` value heads (a multiple of ``H``), key dim ``K``, value dim ``V``."""

    H: int
    HV: int
    K: int
    V: int

    def __post_init__(self):
        for name in ("H", "HV", "K", "V"):
            val = getattr(self, name)
            if not isinstance(val, int) or val < 1:
                raise ValueError(f"GDNShape.{name} must be a positive int, got {val!r}")
        if self.HV % self.H:
            raise ValueError(f"GDNShape.HV={self.HV} must be a multiple of H={self.H}")

    @property
    def group(self) -> int:
        """Value heads per key head (HV // H)."""
        return self.HV // self.H

    @property
    def state_bytes(self) -> int:
        """Bytes of one slot's fp32 state ``[HV, V, K]``."""
        return self.HV * self.V * self.K * 4

    @property
    def conv_channels(self) -> int:
        """Channels of the causal conv in front of the layer: q, k (``H * K`` each) and v (``HV * V``)."""
        return 2 * self.H * self.K + self.HV * self.V
