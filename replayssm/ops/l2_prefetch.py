"""L2 prefetch of a later program's checkpoint tile: the verify's memory pipe kept busy while its programs fold.

A verify program streams its head's checkpoint through a few shared-memory stages (``verify_kernel``): the bytes
an SM has in flight are what its resident programs' stages hold. While a program folds (an FP32-bound loop of
``_update``s) its stages are idle, so in a step where many rows fold the HBM idles too, and the fold's arithmetic
adds to the step's traffic instead of hiding under it. With ``PF`` rows of prefetch, a program of row ``i`` first
asks L2 for the tile of the program at the same head ``PF`` rows later in the grid (``prefetch.global.L2``, one
128-byte line per instruction: no registers held, no shared memory, nothing waited on); when that program starts,
its tile comes from L2. Nothing read or written changes, only where the bytes come from: the states stay bitwise
what they were.

Programs start in grid order (the head fastest, then the row); a wave of four whole-head programs per SM covers
about ``4 * 132 / 64 = 8`` rows at HV=64, so ``PF`` rows ahead is ``PF / 8`` of a program's life ahead, and ``PF``
rows of tiles (``PF * HV * 64 KiB``) sit in L2 waiting for their programs.
"""

from __future__ import annotations

import os

import torch
import triton.language as tl  # noqa: F401  (the interpreter looks for it in a kernel's globals)

from ._gluon import INTERPRET, gl, jit

ENV = "REPLAYSSM_VERIFY_PREFETCH"
PREFETCH_ROWS = 0  # default rows ahead (0: off); see prefetch_rows
MIN_WAVES = 2  # a grid of fewer waves has no later programs worth a prefetch


def prefetch_rows(programs: int, wave: int, device: torch.device) -> int:
    """Rows ahead whose checkpoint tiles a verify program prefetches into L2 (0: none), for a main-kernel grid of
    ``programs`` programs of which ``wave`` are resident at once: ``PREFETCH_ROWS`` on a CUDA GPU where the grid is
    at least ``MIN_WAVES`` waves, else 0; never in the CPU interpreter (no inline PTX there).
    ``REPLAYSSM_VERIFY_PREFETCH=<rows>`` forces a distance (0 turns it off) at any grid size on a GPU; any other
    value than a non-negative integer raises ``ValueError``."""
    env = os.environ.get(ENV, "")
    if env and not (env.isdigit() and env.isascii()):
        raise ValueError(f"{ENV} must be a non-negative integer (rows ahead; 0 = off) or unset, got {env!r}")
    if INTERPRET or device.type != "cuda":
        return 0
    if env:
        return int(env)
    return PREFETCH_ROWS if programs >= MIN_WAVES * wave else 0


def prefetch_layout(nbytes: int, num_warps: int):
    """The 1-D layout of a tile's ``nbytes // 128`` line addresses, spread over every thread of the program."""
    lines = max(1, nbytes // 128)
    return gl.BlockedLayout([max(1, lines // (32 * num_warps))], [32], [num_warps], [0])


@jit
def _prefetch_l2(base, NBYTES: tl.constexpr, LAYOUT: tl.constexpr):
    """Ask L2 for the ``NBYTES`` bytes at ``base`` (a 128-byte aligned, contiguous tile), one line per element."""
    lines = gl.arange(0, NBYTES // 128, layout=LAYOUT).to(gl.int64) * 128
    addr = base.to(gl.int64) + lines
    gl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [addr], dtype=gl.int32,
                              is_pure=False, pack=1)  # fmt: skip
