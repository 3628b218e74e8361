"""Field checks of the bench configs (``KernelBenchConfig``, ``E2EConfig``, ``DriftConfig``): each names its field
(``E2EConfig.steps``) and what is allowed, before anything is built or run."""

from __future__ import annotations

import math

from ..ops._validate import check_count


def count(owner: str, name: str, val, least: int = 1) -> None:
    """An int >= ``least`` (``ops._validate.check_count``)."""
    check_count(f"{owner}.{name}", val, least)


def counts(owner: str, name: str, vals, least: int = 1) -> None:
    """A non-empty tuple or list of distinct ints >= ``least``."""
    if not isinstance(vals, (tuple, list)) or not vals:
        raise ValueError(f"{owner}.{name} must be a non-empty tuple of ints, got {vals!r}")
    for v in vals:
        count(owner, name, v, least)
    if len(set(vals)) != len(vals):
        raise ValueError(f"{owner}.{name} lists a value twice: {tuple(vals)}")


def number(owner: str, name: str, val, *, positive: bool = True, optional: bool = False) -> None:
    """A finite number (> 0 with ``positive``); None too with ``optional``."""
    if val is None and optional:
        return
    ok = not isinstance(val, bool) and isinstance(val, (int, float)) and math.isfinite(val)
    if not ok or (positive and val <= 0):
        what = "a finite number" + (" > 0" if positive else "") + (" or None" if optional else "")
        raise ValueError(f"{owner}.{name} must be {what}, got {val!r}")


def flag(owner: str, name: str, val) -> None:
    if not isinstance(val, bool):
        raise TypeError(f"{owner}.{name} must be a bool, got {val!r}")


def choices(owner: str, name: str, vals, allowed: tuple[str, ...]) -> None:
    """A non-empty tuple of distinct values from ``allowed``."""
    if not isinstance(vals, (tuple, list)) or not vals or any(v not in allowed for v in vals):
        raise ValueError(f"{owner}.{name} must be a non-empty tuple of {allowed}, got {vals!r}")
    if len(set(vals)) != len(vals):
        raise ValueError(f"{owner}.{name} lists a value twice: {tuple(vals)}")
