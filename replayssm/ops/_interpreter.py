"""Whether Triton kernels run in its CPU interpreter (``TRITON_INTERPRET=1``, read when ops is imported).

The interpreter computes a ``tl.dot`` of bf16 operands on their raw 16-bit patterns, so kernels that take the
``F32_DOTS`` switch upcast their operands first there (bf16 x bf16 products are exact in fp32).
"""

import os

INTERPRETER = os.environ.get("TRITON_INTERPRET") == "1"
