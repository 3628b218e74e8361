"""The interpreter's stand-in for ``cp.async`` (ops/_gluon.py) orders copies as the GPU does: a copy lands in
shared memory only when a ``wait_group`` covers its commit group, so a kernel that reads a buffer before waiting
for the copy into it fails on the CPU too (bench/NOTES.md, fifteenth session)."""

import pytest
import torch
import triton.language as tl

from replayssm.ops._gluon import INTERPRET, async_copy, gl, jit

pytestmark = pytest.mark.skipif(not INTERPRET, reason="the stand-in runs in the Triton interpreter only")


@jit
def _copies_kernel(src, out, N: tl.constexpr):
    """Three copies of ``src`` (plus 0, 1 and 2) into three buffers, two commit groups (the third copy never
    committed); ``out`` rows: buffer 0 before any wait, after ``wait_group(1)``, buffers 0 and 1 after
    ``wait_group(0)``, buffer 2 after it (never committed: still its initial contents)."""
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    i = gl.arange(0, N, layout=lay)
    bufs = gl.allocate_shared_memory(gl.float32, [3, N], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    b0 = bufs.index(0)
    b1 = bufs.index(1)
    b2 = bufs.index(2)
    async_copy.async_copy_global_to_shared(b0, src + i)
    async_copy.commit_group()
    async_copy.async_copy_global_to_shared(b1, src + N + i)
    async_copy.commit_group()
    async_copy.async_copy_global_to_shared(b2, src + 2 * N + i)
    gl.store(out + i, b0.load(lay))
    async_copy.wait_group(1)
    gl.store(out + N + i, b0.load(lay))
    gl.store(out + 2 * N + i, b1.load(lay))
    async_copy.wait_group(0)
    gl.store(out + 3 * N + i, b1.load(lay))
    gl.store(out + 4 * N + i, b2.load(lay))


def test_a_copy_lands_only_when_its_group_is_waited_for():
    N = 32
    src = torch.randn(3 * N)
    out = torch.zeros(5 * N)
    _copies_kernel[(1,)](src, out, N)
    rows = out.view(5, N)
    assert torch.isnan(rows[0]).all()  # read before any wait: the fresh buffer's NaN, not the copy
    assert torch.equal(rows[1], src[:N])  # wait_group(1): the older group has landed ...
    assert torch.isnan(rows[2]).all()  # ... the newer one not yet
    assert torch.equal(rows[3], src[N : 2 * N])  # wait_group(0): every committed group
    assert torch.isnan(rows[4]).all()  # a copy never committed is never waited for
