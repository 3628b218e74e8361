"""A third misuse review of the ops (2026-12-04): what it found, each refused before anything is written. Each test
failed before its fix."""

import pytest
import torch

from replayssm.ops import (
    Ring,
    gdn_exact_fold,
    gdn_recurrent,
    gdn_replay_verify,
    ring_commit,
    ring_mark_folded,
)
from replayssm.ops._gluon import INTERPRET
from replayssm.ops.norms import rms_norm
from replayssm.ops.paged_attention import paged_attention
from tests.helpers.inputs import make_gdn_inputs, random_state, slot_tensor

H, HV, K, V, T, L, S = 1, 2, 16, 16, 2, 8, 2


def _verify(x, state, ring, impl):
    """The verify of slot 0's window of inputs ``x``."""
    args = [x[n] for n in "qkvab"]
    kw = dict(A_log=x["A_log"], dt_bias=x["dt_bias"], cu_seqlens=x["cu_seqlens"], impl=impl)
    return gdn_replay_verify(*args, checkpoint=state, ring=ring, slots=slot_tensor([0]), **kw)


def _verified(impl):
    """A ring whose slot 0 has a verified window not committed yet (its history holds one committed step)."""
    ring = Ring.allocate(S, H, HV, K, V, L=L, window=T, dtype=torch.float32)
    state = random_state(S, HV, V, K)
    g = torch.Generator().manual_seed(4)
    for n in (2, None):
        x = make_gdn_inputs([T], H, HV, K, V, gen=g)
        _verify(x, state, ring, impl)
        if n is not None:
            ring_commit(ring, slot_tensor([0]), slot_tensor([n]), impl=impl)
    return ring, state


def _all(ring, state):
    c = ring.cursors
    return [t.clone().nan_to_num() for t in (state, ring.k, ring.v, ring.folded, c.write_pos, c.base, c.pending)]


@pytest.mark.parametrize("impl", ["reference", "triton"])
def test_emptying_a_history_with_a_verified_window_pending_is_refused(impl):
    """Finding 5: ``gdn_exact_fold`` (emptying the history) and ``ring_mark_folded`` set ``pending`` to 0, silently
    dropping the window a verify had written; the next ``ring_commit`` then failed. Refused, as ``gdn_fold_ahead``
    does; materialising into ``out`` or folding without emptying stays allowed."""
    ring, state = _verified(impl)
    before = _all(ring, state)
    for call in (
        lambda: gdn_exact_fold(state, ring, slot_tensor([0, -1]), impl=impl),
        lambda: ring_mark_folded(ring, slot_tensor([0]), impl=impl),
    ):
        with pytest.raises(ValueError, match=r"slots \[0\] have a verified window not committed yet"):
            call()
        assert all(torch.equal(a, b) for a, b in zip(before, _all(ring, state)))
    out = torch.empty(1, HV, V, K)
    gdn_exact_fold(state, ring, slot_tensor([0]), out=out, impl=impl)  # the committed state, read only
    assert all(torch.equal(a, b) for a, b in zip(before, _all(ring, state)))
    ring_commit(ring, slot_tensor([0]), slot_tensor([1]), impl=impl)  # the window is still there to commit
    gdn_exact_fold(state, ring, slot_tensor([0]), impl=impl)


def test_flags_must_be_bools():
    """Finding 9: ``update_state="False"`` updated the state; ``empty_history="no"``, ``validate="yes"`` read as
    true."""
    x = make_gdn_inputs([T], H, HV, K, V)
    state = random_state(S, HV, V, K)
    ring = Ring.allocate(S, H, HV, K, V, L=L, window=T, dtype=torch.float32)
    before = state.clone()
    args = (x["q"], x["k"], x["v"], x["a"], x["b"])
    kw = dict(A_log=x["A_log"], dt_bias=x["dt_bias"], slots=slot_tensor([1]), cu_seqlens=x["cu_seqlens"])
    for call, name in (
        (lambda: gdn_recurrent(*args, **kw, state=state, update_state="False"), "update_state"),
        (lambda: gdn_recurrent(*args, **kw, state=state, validate=1), "validate"),
        (lambda: gdn_replay_verify(*args, **kw, checkpoint=state, ring=ring, validate="yes"), "validate"),
        (lambda: gdn_exact_fold(state, ring, slot_tensor([1]), empty_history="no"), "empty_history"),
        (lambda: rms_norm(x["v"], torch.zeros(V), eps=1e-6, zero_centred=0), "zero_centred"),
    ):
        with pytest.raises(TypeError, match=f"{name} must be a bool"):
            call()
    assert torch.equal(state, before) and bool(ring.cursors.pending.eq(0).all())


def test_out_may_not_alias_an_input():
    """Finding 11: with ``out`` aliasing ``v`` the reference zeroed it before reading v (outputs unlike the
    kernel's). Refused when the bytes overlap; an ``out`` elsewhere in the same buffer, or an empty batch's, is
    fine (a review found a storage-identity check refusing both)."""
    x = make_gdn_inputs([T, 1], H, HV, K, V)
    state = random_state(S, HV, V, K)
    ws = torch.empty(2, *x["v"].shape)  # one workspace: v in its first half, out in the second
    ws[0] = x["v"]
    kw = dict(A_log=x["A_log"], dt_bias=x["dt_bias"], slots=slot_tensor([0, 1]), cu_seqlens=x["cu_seqlens"])

    def run(v, out, st):
        return gdn_recurrent(x["q"], x["k"], v, x["a"], x["b"], state=st, out=out, **kw)

    before = (state.clone(), x["v"].clone())
    shifted = ws.view(-1)[V : V + x["v"].numel()].view(x["v"].shape)
    for v, out in ((x["v"], x["v"]), (ws[0], ws[0]), (ws[0], shifted)):
        with pytest.raises(ValueError, match="out must not overlap v in memory"):
            run(v, out, state)  # (the last: out starts one row into v)
        assert torch.equal(state, before[0]) and torch.equal(x["v"], before[1])
    want = run(x["v"], None, state.clone())
    assert torch.equal(run(ws[0], ws[1], state.clone()), want) and torch.equal(ws[1], want)
    empty = dict(A_log=x["A_log"], dt_bias=x["dt_bias"], slots=slot_tensor([]), cu_seqlens=slot_tensor([0]))
    e = torch.empty(0, H, K)
    got = gdn_recurrent(e, e, torch.empty(0, HV, V), torch.empty(0, HV), torch.empty(0, HV), state=state,
                        out=torch.empty(0, HV, V), **empty)  # fmt: skip
    assert got.shape == (0, HV, V)


def test_numbers_and_switches_that_made_nonsense():
    """Finding 10: ``rms_norm(eps=-1)`` returned NaN; ``paged_attention(T=True)`` ran as T=1; a mistyped
    ``REPLAYSSM_IMPL`` was ignored silently."""
    xs = torch.randn(3, 16)
    for eps in (-1.0, 0, float("nan"), True, "1e-6"):
        with pytest.raises(ValueError, match="eps must be a finite number > 0"):
            rms_norm(xs, torch.zeros(16), eps=eps)
    q = torch.randn(2, 2, 16)
    kc = torch.randn(3, 16, 1, 16)
    with pytest.raises(ValueError, match="T must be an int >= 1"):
        paged_attention(
            q,
            kc,
            kc.clone(),
            torch.zeros(2, 1, dtype=torch.int32),
            torch.arange(2),
            torch.zeros(2, dtype=torch.long),
            T=True,
            scale=0.25,
        )
    mp = pytest.MonkeyPatch()
    mp.setenv("REPLAYSSM_IMPL", "tritn")
    try:
        with pytest.raises(ValueError, match="REPLAYSSM_IMPL must be unset or one of"):
            rms_norm(xs, torch.zeros(16), eps=1e-6)
    finally:
        mp.undo()


@pytest.mark.skipif(not INTERPRET, reason="the interpreter's limit (a GPU runs bf16)")
def test_bf16_in_the_interpreter_is_refused_with_a_reason():
    """The researcher's trial: bf16 through the interpreted verify died with ``KeyError(triton.language.bfloat16)``
    deep inside the launch. Now a TypeError before it, naming the fix."""
    ring = Ring.allocate(S, H, HV, K, V, L=L, window=T)  # bf16 by default
    x = make_gdn_inputs([T], H, HV, K, V, dtype=torch.bfloat16)
    state = random_state(S, HV, V, K)
    with pytest.raises(TypeError, match="v is bfloat16, which this kernel cannot take in Triton's CPU interpreter"):
        _verify(x, state, ring, "triton")
    assert bool(ring.cursors.pending.eq(0).all())
