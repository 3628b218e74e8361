"""The engine's requests, and what it checks of a host drafter's proposals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .runner import ModelRunner, ParkedRequest


@dataclass
class Request:
    """One request of an ``Engine`` (``Engine.add``): its prompt, what it generated so far, where it is (a slot,
    parked on the CPU, waiting, or ``done``) and, when it was given up, why (``error``)."""

    id: int
    prompt: list[int]
    max_new_tokens: int
    arrival: int = 0
    generated: list[int] = field(default_factory=list)
    slot: int | None = None
    done: bool = False
    steps: int = 0
    accepted: list[int] = field(default_factory=list)  # num_accepted of every verify step
    parked: ParkedRequest | None = None  # its state on the CPU while preempted
    error: str | None = None  # why the request was given up (then ``done`` is set and it holds nothing)
    auto_resume: bool = False  # preempted by the engine for KV pages (parked): it resumes by itself when room comes

    @property
    def context(self) -> list[int]:
        return self.prompt + self.generated


def proposal(drafter, d, k: int, runner: ModelRunner) -> list[int]:
    """A host drafter's ``propose`` result -> at most ``k`` checked token ids (extra tokens are dropped). A list
    or tuple of ints, a 1-d integer NumPy array or torch tensor are accepted."""
    name = type(drafter).__name__
    ndim = d.dim() if isinstance(d, torch.Tensor) else getattr(d, "ndim", 1)
    ordered = isinstance(d, (list, tuple, torch.Tensor)) or hasattr(d, "tolist")  # not a set, dict or generator
    if not ordered or isinstance(d, (str, bytes)) or ndim != 1:
        kind = f"a {ndim}-d {type(d).__name__}" if ndim != 1 else type(d).__name__
        raise TypeError(f"{name}.propose() must return a list of ints (up to k={k} token ids), got {kind}")
    d = d[:k] if isinstance(d, torch.Tensor) else list(d)[:k]
    runner.check_token_ids(d, f"{name}.propose() draft token ids")
    return [int(t) for t in (d.tolist() if isinstance(d, torch.Tensor) else d)]
