"""The head geometry of one GDN layer."""

from __future__ import annotations

from dataclasses import dataclass

from ._ints import is_int


def head_dim_error(name: str, d) -> str | None:
    """Why ``d`` cannot be a GDN head dim (the kernels tile K and V in powers of two of at least 16), or None."""
    if not is_int(d) or d < 16 or d & (d - 1):
        return f"{name} must be a power of two >= 16 (the kernels' head dims), got {d!r}"
    return None


@dataclass(frozen=True)
class GDNShape:
    """``H`` key heads, ``HV`` value heads (a multiple of ``H``), key dim ``K``, value dim ``V`` (powers of two
    >= 16)."""

    H: int
    HV: int
    K: int
    V: int

    def __post_init__(self):
        for name in ("H", "HV", "K", "V"):
            val = getattr(self, name)
            if not is_int(val) or val < 1:
                raise ValueError(f"GDNShape.{name} must be a positive int, got {val!r}")
            object.__setattr__(self, name, int(val))  # (a NumPy integer taken as the int it is)
        for name in ("K", "V"):
            if err := head_dim_error(f"GDNShape.{name}", getattr(self, name)):
                raise ValueError(err)
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
