"""``SGLangPeer``: the one base of every SGLang peer (shared construction, buffers, checks)."""

from __future__ import annotations

import types
from typing import ClassVar

import torch

from ...steps import StepCase


class SGLangPeer:
    """One SGLang release's kernels driven over every layer of a ``StepCase`` the way that release's
    engine drives them; a bench step (``steps.Step``): ``build(case, kernels=...)``, a call is one
    multi-layer step into ``outputs`` [layers, N, HV, V], ``committed(layer)`` for the gates.

    Buffers are allocated layer-major with one extra slot, as SGLang's pool does
    (``[layers, slots + 1, ...]``, the last slot being its padding slot); layer ``l``'s kernels get the
    contiguous view ``[l]``. Slot ids are the case's (``-1`` = padding row, SGLang's ``null_block_id``).
    Subclasses name their ``role`` and the ``releases`` whose engine call sequence they reproduce.
    Every call only launches kernels and device-side torch ops (capturable in a CUDA graph); on the
    CPU the kernels run in the Triton interpreter (set ``TRITON_INTERPRET=1`` before loading them).
    """

    role: ClassVar[str]
    releases: ClassVar[tuple[str, ...]]

    def __init__(self, case: StepCase, kernels: types.SimpleNamespace):
        if kernels.version not in self.releases:
            raise ValueError(f"{type(self).__name__} reproduces SGLang {self.releases}, not {kernels.version}")
        geo = case.geo
        self.case, self.kernels, self.x = case, kernels, case.inputs
        self.geo, self.T, self.L, self.dtype, self.device = geo, case.T, case.L, case.dtype, case.device
        self.layers, self.num_slots, self.B = case.layers, case.num_slots, case.B
        self.scale = geo.K**-0.5
        self.outputs = torch.empty(self.layers, *self.x["v"].shape, dtype=self.dtype, device=self.device)

    @classmethod
    def build(cls, case: StepCase, *, kernels: types.SimpleNamespace):
        return cls(case, kernels)

    @property
    def label(self) -> str:
        return f"sglang-{self.kernels.version}/{self.role}"

    def pool(self, *shape: int, dtype: torch.dtype) -> torch.Tensor:
        """Zeros [layers, slots + 1, *shape] (SGLang's per-layer pool with its padding slot)."""
        return torch.zeros(self.layers, self.num_slots + 1, *shape, dtype=dtype, device=self.device)

    def state_pool(self) -> torch.Tensor:
        """[layers, slots + 1, HV, V, K] fp32 holding ``case.state0`` (SGLang's ``temporal``)."""
        geo = self.geo
        state = self.pool(geo.HV, geo.V, geo.K, dtype=torch.float32)
        state[:, : self.num_slots].copy_(self.case.state0)
        return state

    def cursor(self, dtype: torch.dtype) -> torch.Tensor:
        """Zeros [slots + 1]: a per-slot cursor shared by every layer."""
        return torch.zeros(self.num_slots + 1, dtype=dtype, device=self.device)

    def live_rows(self) -> torch.Tensor:
        """[B, 1, 1, 1] bool: rows with a slot."""
        return (self.x["slots"] >= 0).view(-1, 1, 1, 1)
