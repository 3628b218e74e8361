"""Frozen configuration of a GDN state pool."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..ops._common import IMPLS
from ..ops._ints import is_int
from ..ops._validate import ACT_DTYPES
from ..ops.ring import MAX_RING_LEN, ring_length_for
from ..ops.shape import GDNShape, head_dim_error

BACKENDS = ("replay", "recurrent")


@dataclass(frozen=True)
class PoolConfig:
    """Geometry and policy of a ``GDNStatePool`` (all GDN layers of one model, one device).

    ``K`` and ``V`` are powers of two >= 16 (the kernels' head dims). ``window`` is T (last accepted token +
    drafts); ``ring_len`` L (replay backend only; a power of two from 2T to ``MAX_RING_LEN``, 65,536; default
    ``ring_length_for(window)``, the smallest such length >= 16); ``max_batch`` bounds the
    rows of one step (default ``num_slots``: a step's calls and its ``commit``/``abort``; the calls outside a step,
    ``free``, ``flush``, ``fork`` and the like, take any number of slots) and sizes the recurrent backend's
    snapshot scratch and both backends' conv scratch. ``conv_channels`` defaults to the q/k/v width
    (``GDNShape.conv_channels``).
    ``validate`` turns on the host-side checks of slot ids and the step protocol (they read slot ids back
    to the host; engines that capture CUDA graphs turn them off). ``device`` defaults to "cpu", where the ops run
    their PyTorch references: pass "cuda" for the Triton kernels (``LLM`` and ``RunnerConfig`` pick the GPU
    themselves). Every field is checked on construction; errors name the field (``PoolConfig.ring_len``, ...).
    The ops name the ring length ``L`` (``Ring.allocate(..., L=...)``, the glossary's "ring, L").
    """

    num_slots: int
    num_layers: int
    H: int
    HV: int
    K: int
    V: int
    window: int = 4
    ring_len: int | None = None
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
            object.__setattr__(self, name, _positive_int(name, getattr(self, name)))
        for name in ("conv_channels", "max_batch", "ring_len"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _positive_int(name, getattr(self, name), "or None"))
        for name in ("K", "V"):
            if err := head_dim_error(f"PoolConfig.{name}", getattr(self, name)):
                raise ValueError(err)
        if self.HV % self.H:
            raise ValueError(f"PoolConfig.HV={self.HV} must be a multiple of H={self.H}")
        if self.conv_kernel < 2:
            raise ValueError(f"PoolConfig.conv_kernel must be >= 2, got {self.conv_kernel}")
        if not isinstance(self.backend, str) or self.backend not in BACKENDS:
            raise ValueError(f"PoolConfig.backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.ring_len is None:  # derived, so equal configs compare equal however they were written
            object.__setattr__(self, "ring_len", ring_length_for(self.window))
        _positive_int("ring_len", self.ring_len, "or None")
        L, lo = self.ring_len, 2 * self.window
        if L & (L - 1) or not lo <= L <= MAX_RING_LEN:
            why = "is not a power of two" if L & (L - 1) else "is below 2 * window" if L < lo else "is too long"
            raise ValueError(f"PoolConfig.ring_len={L} {why}: it must be a power of two from 2 * window = {lo} to "
                             f"{MAX_RING_LEN} (leave it None to derive it from the window)")  # fmt: skip
        if self.dtype not in ACT_DTYPES:
            raise TypeError(f"PoolConfig.dtype must be one of {_names(ACT_DTYPES)} (the activation dtype), "
                            f"got {self.dtype!r}")  # fmt: skip
        if self.u_dtype is not None and self.u_dtype not in ACT_DTYPES:
            raise TypeError(f"PoolConfig.u_dtype must be None or one of {_names(ACT_DTYPES)}, got {self.u_dtype!r}")
        if not isinstance(self.device, (str, torch.device)):
            raise TypeError(f"PoolConfig.device must be a str or torch.device, got {type(self.device).__name__}")
        try:
            dev = torch.device(self.device)
        except (RuntimeError, ValueError) as e:
            raise ValueError(f"PoolConfig.device {self.device!r} is not a device: {e}") from None
        if dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()):
            have = torch.cuda.device_count() if torch.cuda.is_available() else 0
            raise ValueError(f"PoolConfig.device {self.device!r}: this machine has {have} CUDA devices "
                             "(the default is 'cpu', where the ops run their PyTorch references)")  # fmt: skip
        if not isinstance(self.validate, bool):
            raise TypeError(f"PoolConfig.validate must be a bool, got {self.validate!r}")
        if self.impl not in IMPLS:
            raise ValueError(f"PoolConfig.impl must be one of {IMPLS}, got {self.impl!r}")

    @property
    def shape(self) -> GDNShape:
        """The head geometry (H, HV, K, V) as a ``GDNShape``."""
        return GDNShape(self.H, self.HV, self.K, self.V)

    @property
    def channels(self) -> int:
        """The conv's channels: ``conv_channels``, or the q/k/v width ``H*K + H*K + HV*V``."""
        return self.conv_channels if self.conv_channels is not None else self.shape.conv_channels

    @property
    def batch_rows(self) -> int:
        """The most rows one step may name: ``max_batch``, or ``num_slots``."""
        return self.max_batch if self.max_batch is not None else self.num_slots


def _positive_int(name: str, val, alt: str = "") -> int:
    """A positive integer (a NumPy one too, returned as the Python int it is; a bool is not one)."""
    if not is_int(val) or val < 1:
        raise ValueError(f"PoolConfig.{name} must be a positive int{' ' + alt if alt else ''}, got {val!r}")
    return int(val)


def _names(dtypes) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)
