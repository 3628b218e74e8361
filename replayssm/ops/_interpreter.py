"""Whether Triton kernels run in its CPU interpreter (``TRITON_INTERPRET``, read when ops is imported).

Read the way Triton reads it (``1``, ``true``, ``on``, ``yes`` or ``y``, in any case), so that every place in
replayssm that asks agrees with what ``@triton.jit`` does: ``INTERPRET`` for the kernels, ``interpreter_requested``
for the CLI's checks before ops is imported.

The interpreter computes a ``tl.dot`` of bf16 operands on their raw 16-bit patterns, so kernels that take the
``F32_DOTS`` switch upcast their operands first there (bf16 x bf16 products are exact in fp32).
"""

import os

TRUTHY = ("1", "true", "on", "yes", "y")


def interpreter_requested(environ=os.environ) -> bool:
    """Whether ``TRITON_INTERPRET`` in ``environ`` asks for Triton's interpreter."""
    return environ.get("TRITON_INTERPRET", "").lower() in TRUTHY


INTERPRET = interpreter_requested()
