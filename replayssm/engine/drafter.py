"""The two kinds of drafter the engine runs (docs/drafters.md has the whole protocol).

A *host drafter* proposes tokens from the request's text on the CPU before the step (n-gram prompt
lookup, tests' oracles): the engine calls ``propose`` once per request per step and pads short
proposals. A *device drafter* lives in the ``ModelRunner`` (``RunnerConfig(device_drafter=...)``),
keeps per-slot state on the device next to the KV cache, and writes the drafts inside the runner's
step, in the same CUDA graph as the verify: the host only hands over each row's last token and gets
back the verified window with its logits.

Either way the drafts are deterministic functions of the context, so greedy acceptance reproduces
plain greedy decoding and ``accept_sampling`` (one-hot draft distribution) reproduces sampling.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class HostDrafter(Protocol):
    """A drafter the engine calls on the host: any object (an instance, not a class) with a callable
    ``propose(context, k)``; ``check_host_drafter`` is what ``Engine`` and ``LLM`` check of it."""

    def propose(self, context: list[int], k: int) -> list[int]:
        """Up to ``k`` tokens to follow ``context`` (prompt + generated so far); fewer (or none) is allowed."""
        ...


@runtime_checkable
class DeviceDrafter(Protocol):
    """Called by the runner only; every method may run inside CUDA-graph capture except ``prefill``,
    ``park`` and ``unpark``. Rows are a step's rows (``step.kv_rows``; padding rows use the sink row)."""

    window: int  # T: the verify window the drafts are for (T-1 drafts per row)

    def prefill(self, slot: int, ids: torch.Tensor, hidden: torch.Tensor) -> None:
        """After the main model's prefill of a fresh slot: prompt ids [P], final-norm hidden states [P, D]."""
        ...

    def propose(self, step, last: torch.Tensor) -> torch.Tensor:
        """Before the verify, inside the step: ``step`` the verify step, last [B] each row's last emitted
        token (the window's first). Returns drafts [B, T-1] long, all on the device."""
        ...

    def observe(self, step, window: torch.Tensor, hidden: torch.Tensor) -> None:
        """After the model's forward, inside the step: window [B, T'] the tokens run (T' = T, or 1 for a
        plain decode step), hidden [B*T', D] their final-norm hidden states."""
        ...

    def commit(self, slots: torch.Tensor, num_accepted: torch.Tensor) -> None:
        """With the runner's commit: slots [B] int32, num_accepted [B] int32 (1 for a decode step). Optional beside
        it, ``commit_counters() -> list[Tensor]``: every device tensor ``commit`` writes, which the runner saves before
        an eager step or commit and puts back to redo or undo one that failed part-way (without it, ``commit`` is
        taken to write nothing that a retry could not write again)."""
        ...

    def park(self, slots: torch.Tensor) -> dict:
        """The slots' drafter state copied to the CPU (preemption)."""
        ...

    def unpark(self, slots: torch.Tensor, parked: dict) -> None:
        """Put a ``park`` result back, possibly into other slots."""
        ...


def check_host_drafter(drafter, names: tuple[str, ...]) -> None:
    """``drafter`` (given where one of ``names`` was not) is a host drafter: an instance (not a class) whose
    ``propose`` is callable. Raises TypeError."""
    if isinstance(drafter, type):
        raise TypeError(f"drafter: pass an instance of {drafter.__name__} (e.g. {drafter.__name__}()), not the class")
    if not callable(getattr(drafter, "propose", None)):
        raise TypeError(f"drafter must be one of {names} or an object with propose(context, k), got "
                        f"{type(drafter).__name__}")  # fmt: skip
