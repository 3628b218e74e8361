"""Environment switches read in more than one layer, each read one way.

The kernels' switches (``SWITCHES``: forced paths for benchmarks and tests, docs/kernels.md) take the listed values
or are unset; ``switch`` reads one and refuses anything else, and the CLI checks all of them
(``check_switches``) before a command that runs kernels does any work.

``TRITON_INTERPRET`` is read as Triton reads it (``1``, ``true``, ``on``, ``yes`` or ``y``, in any case), so that
every place in replayssm that asks agrees with what ``@triton.jit`` does. This module imports nothing of replayssm,
so the CLI can ask before ``replayssm.ops`` (whose import defines the kernels) is imported.
"""

import os

TRUTHY = ("1", "true", "on", "yes", "y")


def interpreter_requested(environ=os.environ) -> bool:
    """Whether ``TRITON_INTERPRET`` in ``environ`` asks for Triton's interpreter."""
    return environ.get("TRITON_INTERPRET", "").lower() in TRUTHY


SWITCHES = {
    "REPLAYSSM_VERIFY_ONE_LAUNCH": ("0", "1"),
    "REPLAYSSM_VERIFY_PDL": ("0", "1"),
    "REPLAYSSM_VERIFY_DIF": ("0", "1", "2", "3"),
    "REPLAYSSM_VERIFY_TC": ("0", "1"),
    "REPLAYSSM_FOLD_PHASE": ("0", "1"),
    "REPLAYSSM_FOLD_AHEAD": ("0", "1"),
}


def switch(name: str, environ=os.environ) -> str:
    """A kernels' switch: its value, "" when unset; ``ValueError`` naming it and what it takes for any other."""
    val = environ.get(name, "")
    if val and val not in SWITCHES[name]:
        raise ValueError(f"{name} must be {', '.join(SWITCHES[name])} or unset, got {val!r}")
    return val


def check_switches(environ=os.environ) -> None:
    """Every kernels' switch that is set takes one of its values (``switch``)."""
    for name in SWITCHES:
        switch(name, environ)
