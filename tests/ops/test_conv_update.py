"""The conv update kernel (interpreter on CPU) against the PyTorch reference: outputs, scratch, padding rows."""

import pytest
import torch

from replayssm.ops.conv import causal_conv1d_update


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("T, C", [(3, 40), (4, 1100), (1, 1100)])  # 1100: two blocks of channels, the last partial
def test_kernel_matches_reference(dtype, bias, T, C):
    g = torch.Generator().manual_seed(int(bias) + 10 * T)
    S, W = 5, 4
    lens = [min(n, T) for n in (3, 1, 2, 4)]  # windows of 1..T tokens
    slots = torch.tensor([4, -1, 0, 2], dtype=torch.int32)  # one padding row
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    wide = torch.randn(sum(lens), C + 7, generator=g).to(dtype)  # x as a slice of a wider projection
    x = wide[:, :C]
    state = torch.randn(S, W - 1, C, generator=g).to(dtype)
    weight = torch.randn(C, W, generator=g).to(dtype)
    b = torch.randn(C, generator=g).to(dtype) if bias else None
    outs = {}
    for impl in ("reference", "triton"):
        scratch = torch.full((6, W - 1 + T, C), float("nan"), dtype=dtype)  # rows past B stay untouched
        y = causal_conv1d_update(x, state.clone(), weight, b, slots, cu, scratch, impl=impl)
        outs[impl] = (y, scratch)
    (y_ref, s_ref), (y, s) = outs["reference"], outs["triton"]
    assert torch.equal(s[:4], s_ref[:4]) and s[4:].isnan().all()  # recorded inputs are copies: bitwise
    assert (y[int(cu[1]) : int(cu[2])] == 0).all()  # the padding row's output
    tol = 1e-5 if dtype == torch.float32 else 3 * 2**-7
    assert ((y.float() - y_ref.float()).abs() <= tol * (1 + y_ref.float().abs())).all()


def test_split_outputs_are_the_channel_ranges():
    """split=(a, b, c): three contiguous [N, width] tensors, the reference's y in three column ranges."""
    g = torch.Generator().manual_seed(7)
    C, W, T = 24, 4, 2
    x = torch.randn(4, C, generator=g)
    state = torch.randn(3, W - 1, C, generator=g)
    weight = torch.randn(C, W, generator=g)
    slots = torch.tensor([2, 0], dtype=torch.int32)
    cu = torch.tensor([0, 2, 4], dtype=torch.int32)
    scratch = torch.empty(2, W - 1 + T, C)
    y = causal_conv1d_update(x, state, weight, None, slots, cu, scratch, impl="reference")
    for impl in ("reference", "triton"):
        parts = causal_conv1d_update(x, state, weight, None, slots, cu, scratch, impl=impl, split=(8, 8, 8))
        assert all(p.is_contiguous() and p.shape == (4, 8) for p in parts)
        assert (torch.cat(parts, 1) - y).abs().max() < 1e-5
    for bad in ((8, 8), (2.5, 13.5, 8), (8, True, 15), "888"):  # two widths; floats (sum and minimum right); ...
        scratch.fill_(7.0)
        with pytest.raises(ValueError, match="split must be three positive int widths"):
            causal_conv1d_update(x, state, weight, None, slots, cu, scratch, split=bad)
        assert bool((scratch == 7.0).all())  # refused before anything was written


@pytest.mark.parametrize("impl", ["reference", "triton"])
def test_bad_arguments_write_nothing(impl):
    """Issue 11, finding 9 (op half): a window longer than the scratch holds wrote scratch, then raised an
    IndexError (reference) or ran on (kernel). Every argument is now checked before anything is written."""
    g = torch.Generator().manual_seed(8)
    C, W, T, S = 8, 4, 2, 3
    x, state, weight = torch.randn(5, C, generator=g), torch.randn(S, W - 1, C, generator=g), torch.randn(C, W)
    slots, cu = torch.tensor([0, 1], dtype=torch.int32), torch.tensor([0, 2, 4], dtype=torch.int32)
    i32 = lambda *v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    bad = [
        (dict(cu=i32(0, 1, 5)), r"window lengths \[1, 4\], longer than the window T=2"),
        (dict(cu=i32(0, 0, 5)), "at least one token"),
        (dict(cu=i32(0, 2, 4)), "end at the token count 5"),  # x has 5 tokens here
        (dict(cu=i32(0, 5)), r"cu_seqlens must have shape \(3,\)"),
        (dict(slots=i32(0, 3)), r"ids \[3\] outside \[-1, 3\)"),
        (dict(slots=i32(1, 1)), "more than once"),
        (dict(slots=torch.tensor([0, 1])), "slots must have dtype"),
        (dict(scratch=torch.zeros(1, W - 1 + T, C)), r"scratch must have shape \(>= 2"),
        (dict(scratch=torch.zeros(2, W - 1 + T, C, dtype=torch.bfloat16)), "scratch must have dtype"),
    ]
    for change, message in bad:
        kw = dict(cu=i32(0, 2, 5), slots=slots, scratch=torch.zeros(2, W - 1 + T, C)) | change
        before, st = kw["scratch"].clone(), state.clone()
        with pytest.raises((ValueError, TypeError), match=message):
            causal_conv1d_update(x, state, weight, None, kw["slots"], kw["cu"], kw["scratch"], impl=impl)
        assert torch.equal(kw["scratch"], before) and torch.equal(state, st)
    assert causal_conv1d_update(x[:4], state, weight, None, slots, cu, torch.zeros(2, W - 1 + T, C), impl=impl).shape
