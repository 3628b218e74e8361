"""Whether Triton kernels run in its CPU interpreter: ``INTERPRET``, ``TRITON_INTERPRET`` read when ops is imported,
the way Triton reads it (``replayssm._env.interpreter_requested``).

The interpreter computes a ``tl.dot`` of bf16 operands on their raw 16-bit patterns, so kernels that take the
``F32_DOTS`` switch upcast their operands first there (bf16 x bf16 products are exact in fp32).
"""

from .._env import interpreter_requested

INTERPRET = interpreter_requested()
