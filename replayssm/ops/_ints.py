"""The one test of "an integer argument" across replayssm (ops, state, engine, CLI-facing configs)."""

from __future__ import annotations

import numbers


def is_int(val) -> bool:
    """An int, Python or NumPy (callers store ``int(val)``), and not a bool."""
    return isinstance(val, numbers.Integral) and not isinstance(val, bool)
