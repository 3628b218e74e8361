"""Environment switches read in more than one layer, each read one way.

``TRITON_INTERPRET`` is read as Triton reads it (``1``, ``true``, ``on``, ``yes`` or ``y``, in any case), so that
every place in replayssm that asks agrees with what ``@triton.jit`` does. This module imports nothing of replayssm,
so the CLI can ask before ``replayssm.ops`` (whose import defines the kernels) is imported.
"""

import os

TRUTHY = ("1", "true", "on", "yes", "y")


def interpreter_requested(environ=os.environ) -> bool:
    """Whether ``TRITON_INTERPRET`` in ``environ`` asks for Triton's interpreter."""
    return environ.get("TRITON_INTERPRET", "").lower() in TRUTHY
