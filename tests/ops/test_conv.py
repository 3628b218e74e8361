"""Conv rollback against a reference that replays only the accepted tokens."""

import pytest
import torch
import torch.nn.functional as F

from replayssm.ops.conv import causal_conv1d_prefill, causal_conv1d_update, conv_commit


def _ref_outputs(history, xs, weight, bias):
    """Token-by-token causal conv: history [W-1, C] of earlier inputs, xs [T, C]."""
    W = weight.shape[1]
    buf, out = list(history), []
    for x in xs:
        buf.append(x)
        taps = torch.stack(buf[-W:])  # [W, C]
        out.append(F.silu((taps.t() * weight).sum(-1) + bias))
    return torch.stack(out), torch.stack(buf[-(W - 1) :])


def test_window_and_rollback_match_accepted_replay():
    g = torch.Generator().manual_seed(0)
    C, W, S, T = 10, 4, 4, 4
    weight, bias = torch.randn(C, W, generator=g), torch.randn(C, generator=g)
    state = torch.randn(S, W - 1, C, generator=g)
    accepted_inputs = {s: list(state[s].clone()) for s in range(S)}  # the inputs a reference would have seen
    for _ in range(20):
        slots = torch.randperm(S, generator=g)[:3].to(torch.int32)
        slots[int(torch.randint(0, 3, (1,), generator=g))] = -1
        lens = torch.randint(1, T + 1, (3,), generator=g)
        cu = torch.zeros(4, dtype=torch.int32)
        cu[1:] = lens.cumsum(0)
        x = torch.randn(int(cu[-1]), C, generator=g)
        window = torch.full((3, W - 1 + T, C), float("nan"))
        y = causal_conv1d_update(x, state, weight, bias, slots, cu, window)
        n = torch.stack([torch.randint(1, int(m) + 1, (1,), generator=g)[0] for m in lens]).to(torch.int32)
        before = state.clone()
        conv_commit(state, window, slots, n)
        for i, s in enumerate(slots.tolist()):
            rows = slice(int(cu[i]), int(cu[i + 1]))
            if s < 0:
                assert (y[rows] == 0).all()
                continue
            hist = torch.stack(accepted_inputs[s][-(W - 1) :])
            ref_y, _ = _ref_outputs(hist, x[rows], weight, bias)
            assert torch.allclose(y[rows], ref_y, atol=1e-6)  # fp32 sums in a different order
            accepted_inputs[s] += list(x[rows][: int(n[i])])
            assert torch.equal(state[s], torch.stack(accepted_inputs[s][-(W - 1) :]))
        untouched = [s for s in range(S) if s not in slots.tolist()]
        assert torch.equal(state[untouched], before[untouched])


def test_commit_of_all_layers_equals_one_commit_per_layer():
    g = torch.Generator().manual_seed(2)
    NL, S, B, C, W, T = 3, 5, 4, 6, 4, 3
    state = torch.randn(NL, S, W - 1, C, generator=g)
    scratch = torch.randn(NL, B + 1, W - 1 + T, C, generator=g)
    slots = torch.tensor([3, -1, 0, 4], dtype=torch.int32)
    n = torch.tensor([2, 1, 3, 1], dtype=torch.int32)
    per_layer = state.clone()
    for layer in range(NL):
        conv_commit(per_layer[layer], scratch[layer], slots, n)
    conv_commit(state, scratch, slots, n)
    assert torch.equal(state, per_layer)
    for i, s in ((0, 3), (2, 0), (3, 4)):  # the W-1 inputs ending at the last accepted token, in every layer
        assert torch.equal(state[:, s], scratch[:, i, int(n[i]) : int(n[i]) + W - 1])


def test_prefill_matches_token_by_token():
    g = torch.Generator().manual_seed(1)
    C, W = 6, 4
    weight, bias = torch.randn(C, W, generator=g), torch.randn(C, generator=g)
    x = torch.randn(9, C, generator=g)
    cu = torch.tensor([0, 2, 9], dtype=torch.int32)
    init = torch.randn(2, W - 1, C, generator=g)
    y, final = causal_conv1d_prefill(x, weight, bias, cu, init)
    for i in range(2):
        rows = slice(int(cu[i]), int(cu[i + 1]))
        ref_y, ref_state = _ref_outputs(init[i], x[rows], weight, bias)
        assert torch.allclose(y[rows], ref_y, atol=1e-6)
        assert torch.equal(final[i], ref_state)


@pytest.mark.parametrize("C", [6, 1100])  # 1100: two blocks of channels in the kernel, the last partial
def test_commit_kernel_matches_reference(C):
    """The Triton commit (interpreter on CPU) writes bitwise what the gather/scatter reference writes, and only
    the live rows' slots."""
    g = torch.Generator().manual_seed(C)
    NL, S, W, T = 3, 6, 4, 4
    state = torch.randn(NL, S, W - 1, C, generator=g).to(torch.bfloat16)
    scratch = torch.randn(NL, 5, W - 1 + T, C, generator=g).to(torch.bfloat16)
    slots = torch.tensor([5, -1, 0, 3], dtype=torch.int32)
    n = torch.tensor([4, 2, 1, 3], dtype=torch.int32)
    out = {}
    for impl in ("reference", "triton"):
        out[impl] = state.clone()
        conv_commit(out[impl], scratch, slots, n, impl=impl)
    assert torch.equal(out["triton"], out["reference"])
    assert torch.equal(out["triton"][:, [1, 2, 4]], state[:, [1, 2, 4]])  # slots no live row names
    assert torch.equal(out["triton"][:, 5], scratch[:, 0, 4 : 4 + W - 1])


@pytest.mark.parametrize("impl", ["reference", "triton"])
def test_commit_refuses_bad_arguments_before_writing(impl):
    g = torch.Generator().manual_seed(5)
    NL, S, W, T, C = 2, 4, 4, 3, 8
    state = torch.randn(NL, S, W - 1, C, generator=g)
    scratch = torch.randn(NL, 3, W - 1 + T, C, generator=g)
    slots, n = torch.tensor([2, -1, 0], dtype=torch.int32), torch.tensor([1, 2, 3], dtype=torch.int32)
    i32 = lambda *v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    bad = [
        (dict(n=i32(1, 2, 4)), r"num_accepted holds \[4\], outside \[1, 3\]"),
        (dict(n=i32(0, 2, 3)), r"num_accepted holds \[0\]"),
        (dict(slots=i32(2, 4, 0)), r"outside \[-1, 4\)"),
        (dict(slots=i32(2, 2, 0)), "more than once"),
        (dict(scratch=scratch[:1]), r"scratch must have shape \(2, >= B"),
        (dict(scratch=scratch[:, :2]), "scratch holds 2 rows, the commit names 3"),
        (dict(n=i32(1, 2)), "num_accepted must have shape"),
        (dict(scratch=scratch.to(torch.bfloat16)), "scratch must have dtype"),
    ]
    for change, message in bad:
        kw = dict(scratch=scratch, slots=slots, n=n) | change
        before = state.clone()
        with pytest.raises((ValueError, TypeError), match=message):
            conv_commit(state, kw["scratch"], kw["slots"], kw["n"], impl=impl)
        assert torch.equal(state, before)
    conv_commit(state, scratch, slots, n, impl=impl)  # the good call still works after the refusals
    assert torch.equal(state[:, 2], scratch[:, 0, 1:W])


def test_prefill_refuses_offsets_and_initial_states_that_do_not_fit():
    """An eighth misuse review: offsets ending before the last token returned the rest as uninitialised memory,
    decreasing or float offsets and an initial state of the wrong shape gave bare torch errors."""
    g = torch.Generator().manual_seed(2)
    C, W = 8, 4
    x, w, b = torch.randn(6, C, generator=g), torch.randn(C, W, generator=g), torch.randn(C, generator=g)
    i32 = lambda *v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    for cu, init, err, msg in (
        (i32(0, 3), None, ValueError, "must start at 0 and end at the token count 6"),
        (i32(0, 9), None, ValueError, "must start at 0 and end at the token count 6"),
        (i32(0, 4, 2, 6), None, ValueError, "at least one token"),
        (torch.tensor([0.0, 6.0]), None, TypeError, "cu_seqlens"),
        (i32(0), None, ValueError, "B\\+1 >= 2 offsets"),
        (i32(0, 6), torch.zeros(1, W, C), ValueError, "initial_state must have shape"),
    ):
        with pytest.raises(err, match=msg):
            causal_conv1d_prefill(x, w, b, cu, init)
