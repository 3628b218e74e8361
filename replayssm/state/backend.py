"""What the model and the engine need from a GDN state backend: the ``GDNStateBackend`` protocol.

Implemented by ``GDNStatePool`` (one backend, "replay" or "recurrent"), ``LockstepPool`` (a primary pool
with shadows fed the same inputs) and the drift study's open-loop pool. One step, for a batch of slots:

    for each GDN layer:
        y = backend.conv_update(layer, x, ...)       # causal conv; the conv state moves only at commit
        o = backend.verify(layer, q, k, v, a, b, ...) # or backend.decode(...) for one plain token per slot
    backend.commit(slots, num_accepted)              # once, after every layer: SSM and conv state of all layers
    # or, when something failed half-way: backend.abort(slots) drops the step

Slots are int32 tensors on the backend's device (-1 = a padding row, skipped by the per-step calls).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from .config import PoolConfig
from .transfer import ParkedSlots

# What ``offload`` returns and ``restore`` takes: a ``ParkedSlots``, or one per pool for a lockstep pool.
Parked = ParkedSlots | tuple[ParkedSlots, ...]


@runtime_checkable
class GDNStateBackend(Protocol):
    """Per-slot GDN state of every GDN layer of one model: slots, the speculative step, committed state."""

    cfg: PoolConfig
    device: torch.device

    @property
    def num_free(self) -> int: ...

    @property
    def verifies(self) -> bool:
        """Whether ``verify`` is taken (a recurrent pool of window 1 only decodes)."""
        ...

    def alloc(self, n: int) -> torch.Tensor:
        """``n`` fresh slots (zero state, empty history) as an int32 tensor."""
        ...

    def free(self, slots: torch.Tensor) -> None: ...

    def write_prefill(self, layer: int, slots: torch.Tensor, state: torch.Tensor, conv_state: torch.Tensor) -> None:
        """Committed state of fresh ``slots`` after a prompt: state [n, HV, V, K] fp32, conv_state [n, W-1, C]."""
        ...

    def check_write_prefill(self, layer: int, slots: torch.Tensor, state: torch.Tensor, conv_state: torch.Tensor):
        """Raise what ``write_prefill`` would raise before changing anything."""
        ...

    def conv_update(self, layer: int, x: torch.Tensor, *, weight: torch.Tensor, bias: torch.Tensor | None,
                    slots: torch.Tensor, cu_seqlens: torch.Tensor,
                    split: tuple[int, int, int] | None = None):  # fmt: skip
        """Causal conv1d + SiLU of the step's tokens x [N, C] -> [N, C]; with ``split`` (three widths summing to
        C) three contiguous [N, width] tensors instead (q, k, v without a copy)."""
        ...

    def verify(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor,
               b: torch.Tensor, *, A_log: torch.Tensor, dt_bias: torch.Tensor, slots: torch.Tensor,
               cu_seqlens: torch.Tensor, scale: float | None = None) -> torch.Tensor:  # fmt: skip
        """Outputs o [N, HV, V] of windows of 1..window tokens; the state moves only at ``commit``."""
        ...

    def decode(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor,
               b: torch.Tensor, *, A_log: torch.Tensor, dt_bias: torch.Tensor, slots: torch.Tensor,
               cu_seqlens: torch.Tensor | None = None, scale: float | None = None) -> torch.Tensor:  # fmt: skip
        """Outputs of one plain token per slot (commit with ``num_accepted`` all 1)."""
        ...

    def commit(self, slots: torch.Tensor, num_accepted: torch.Tensor) -> None:
        """End the step: keep ``num_accepted`` [B] int32 tokens (bonus included) of every row, in every layer."""
        ...

    def step_in_flight(self) -> bool | None:
        """Whether a step is in flight; None where the backend keeps no books (``state/commit.py``)."""
        ...

    def abort(self, slots: torch.Tensor) -> list[int]:
        """Drop the step in flight over ``slots`` (after a failure half-way through it): nothing of it is kept.
        Returns the slots whose state the failed step destroyed (an in-place update): they can only be freed."""
        ...

    def committed_state(self, layer: int, slots: torch.Tensor) -> torch.Tensor:
        """fp32 [n, HV, V, K] committed SSM state, materialised without changing anything."""
        ...

    def committed_conv_state(self, layer: int, slots: torch.Tensor) -> torch.Tensor: ...

    def flush(self, slots: torch.Tensor) -> None:
        """Fold pending history into the checkpoints (a no-op where there is none)."""
        ...

    def offload(self, slots: torch.Tensor) -> Parked:
        """CPU copy of ``slots`` (everything needed to continue bit for bit); the slots stay allocated."""
        ...

    def restore(self, parked: Parked) -> torch.Tensor:
        """New slots holding what ``offload`` returned."""
        ...

    def check_restore(self, parked: Parked, room: bool = True) -> None:
        """Raise what ``restore(parked)`` would raise, changing nothing."""
        ...

    def fork(self, slots: torch.Tensor) -> torch.Tensor:
        """New slots with the same committed state and history as ``slots``."""
        ...

    def memory_report(self) -> dict[str, int]: ...
