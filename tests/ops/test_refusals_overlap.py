"""A fourth misuse review of the ops (2026-12-05, reference against interpreted kernels): outputs overlapping any
tensor the op reads or writes, cursors edited out of range after the ring was built, unchecked ``*_reference`` calls.
Each is refused on both paths before anything is written; each test failed before its fix."""

import re

import pytest
import torch

from replayssm.ops import (
    Ring,
    RingCursors,
    RingLayers,
    commit_snapshots,
    gdn_exact_fold,
    gdn_fold_ahead,
    gdn_recurrent,
    gdn_replay_verify,
    ring_commit,
    ring_commit_reference,
    ring_mark_folded,
    ring_mark_folded_reference,
)
from tests.helpers.inputs import make_gdn_inputs, random_state, slot_tensor

H, HV, K, V, T, L, S = 1, 2, 16, 16, 2, 8, 2
IMPLS = ["reference", "triton"]


def overlap(a: str, b: str) -> str:
    """The refusal naming both tensors, in either order (the one written first)."""
    a, b = re.escape(a), re.escape(b)
    return rf"^({a} must not overlap {b}|{b} must not overlap {a}) in memory"


def _ring(impl, steps=1):
    """A ring whose slot 0 holds ``steps`` committed windows of random inputs, and its checkpoints."""
    ring = Ring.allocate(S, H, HV, K, V, L=L, window=T, dtype=torch.float32)
    state = random_state(S, HV, V, K)
    g = torch.Generator().manual_seed(5)
    for _ in range(steps):
        x = make_gdn_inputs([T], H, HV, K, V, gen=g)
        _verify(x, state, ring, impl)
        ring_commit(ring, slot_tensor([0]), slot_tensor([T]), impl=impl)
    return ring, state


def _verify(x, state, ring, impl, out=None, validate=True):
    args = [x[n] for n in "qkvab"]
    kw = dict(A_log=x["A_log"], dt_bias=x["dt_bias"], cu_seqlens=x["cu_seqlens"], impl=impl, validate=validate)
    return gdn_replay_verify(*args, checkpoint=state, ring=ring, slots=slot_tensor([0]), out=out, **kw)


def _snapshot(ring, state, *more):
    c = ring.cursors
    ts = (state, ring.k, ring.v, ring.g, ring.beta, ring.u, ring.folded, *c.tensors(), *more)
    return [t.clone().nan_to_num() for t in ts]


def _unchanged(before, ring, state, *more):
    return all(torch.equal(a, b) for a, b in zip(before, _snapshot(ring, state, *more)))


def _as(t, like):
    """A view of ``t``'s first bytes shaped like ``like`` (in its dtype)."""
    n = like.numel() * like.element_size()
    return t.view(-1).view(torch.uint8)[:n].view(like.dtype).view(like.shape)


@pytest.mark.parametrize("impl", IMPLS)
def test_a_verify_output_over_the_ring_or_its_cursors_is_refused(impl):
    """Finding 1a: ``out`` over ``ring.k`` or the cursors was accepted (the paths then disagreed; the reference raised
    mid-way after writing ``ring.k``)."""
    ring, state = _ring(impl)
    x = make_gdn_inputs([T], H, HV, K, V, gen=torch.Generator().manual_seed(6))
    for name, target in (("ring.k", ring.k), ("ring.u", ring.u)):
        before = _snapshot(ring, state)
        with pytest.raises(ValueError, match=overlap("out", name)):
            _verify(x, state, ring, impl, out=_as(target, x["v"]))
        assert _unchanged(before, ring, state)
    n = x["v"].numel()
    ws = torch.zeros(n + 5 * S)  # out, then the cursors from its last row on: write_pos inside out's bytes
    cur = ws[n - S :].view(torch.int32)[: 5 * S].view(5, S)
    cur.copy_(torch.stack(ring.cursors.tensors()))
    shared = Ring(ring.k, ring.v, ring.g, ring.beta, ring.u, ring.folded, RingCursors(*cur.unbind(0), L=L, window=T))
    before = _snapshot(shared, state)
    with pytest.raises(ValueError, match=overlap("out", "ring cursors (write_pos)")):
        _verify(x, state, shared, impl, out=ws[:n].view(x["v"].shape))
    assert _unchanged(before, shared, state)


@pytest.mark.parametrize("impl", IMPLS)
def test_a_recurrent_output_over_cu_seqlens_or_snapshots_over_the_state_is_refused(impl):
    """Findings 1c and 6: ``out`` holding ``cu_seqlens`` in its last words, and ``snapshots`` over ``state``, were
    accepted (the reference zeroed ``out`` before reading ``cu_seqlens``; the kernel raced)."""
    x = make_gdn_inputs([T, 1], H, HV, K, V, gen=torch.Generator().manual_seed(7))
    state = random_state(S, HV, V, K)
    before = state.clone()
    args = [x[k] for k in "qkvab"]
    kw = dict(A_log=x["A_log"], dt_bias=x["dt_bias"], slots=slot_tensor([0, 1]), state=state, impl=impl)
    n = x["v"].numel()
    ws = torch.zeros(n)
    cu = ws[n - 3 :].view(torch.int32)  # cu_seqlens in out's last three words
    cu.copy_(x["cu_seqlens"])
    with pytest.raises(ValueError, match=overlap("out", "cu_seqlens")):
        gdn_recurrent(*args, cu_seqlens=cu, out=ws.view(x["v"].shape), **kw)
    with pytest.raises(ValueError, match=overlap("snapshots", "state")):  # rows 0 and 1's snapshots are slots 0 and 1
        gdn_recurrent(*args, cu_seqlens=x["cu_seqlens"], snapshots=state.view(S, 1, HV, V, K), **kw)
    assert torch.equal(state, before)


@pytest.mark.parametrize("impl", IMPLS)
def test_a_fold_output_over_the_checkpoint_or_the_ring_is_refused(impl):
    """Finding 1b: ``gdn_exact_fold(out=...)`` had no overlap check; ``out`` over ``ring.v`` folded differently on
    the two paths."""
    ring, state = _ring(impl)
    for name, out in (("checkpoint", state[:1]), ("ring.v", _as(ring.v, torch.empty(1, HV, V, K)))):
        before = _snapshot(ring, state)
        with pytest.raises(ValueError, match=overlap("out", name)):
            gdn_exact_fold(state, ring, slot_tensor([0]), out=out, impl=impl)
        assert _unchanged(before, ring, state)


@pytest.mark.parametrize("impl", IMPLS)
def test_commit_snapshots_into_its_own_snapshots_is_refused(impl):
    """Finding 6: ``commit_snapshots`` with ``state`` and ``snapshots`` sharing bytes."""
    snaps = torch.randn(1, 2, T, HV, V, K)
    state = snaps.view(1, 2 * T, HV, V, K)[:, :S]  # the first snapshots are the state
    before = snaps.clone()
    with pytest.raises(ValueError, match=overlap("state", "snapshots")):
        commit_snapshots(state, snaps, slot_tensor([1]), slot_tensor([2]), impl=impl)
    assert torch.equal(snaps, before)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name, bad", [("write_pos", 100), ("base", L), ("pending", T + 1), ("flush", 2)])
def test_cursors_edited_out_of_range_are_refused_under_validate(impl, name, bad):
    """Finding 2: ``RingCursors`` checked its values only when built; ``write_pos = 100`` at L=8 later made the
    interpreted verify fail mid-launch (an out-of-bounds read on a GPU) after writing ``pending`` and records, while
    the reference wrapped it. With ``validate=True`` every op that reads the cursors re-checks them first."""
    x = make_gdn_inputs([T], H, HV, K, V, gen=torch.Generator().manual_seed(8))
    ring, state = _ring(impl)
    getattr(ring.cursors, name)[0] = bad
    calls = [
        lambda: _verify(x, state, ring, impl),
        lambda: gdn_exact_fold(state, ring, slot_tensor([0]), out=torch.empty(1, HV, V, K), impl=impl),
        lambda: ring_mark_folded(ring, slot_tensor([1]), impl=impl),
        lambda: ring_commit(ring, slot_tensor([0]), slot_tensor([1]), impl=impl),
    ]
    for call in calls[: 4 if name == "pending" else 3]:  # (ring_commit refuses a row with nothing pending first)
        before = _snapshot(ring, state)
        with pytest.raises(ValueError, match=f"RingCursors.{name} must hold values in"):
            call()
        assert _unchanged(before, ring, state)


def test_fold_ahead_rechecks_the_cursors_and_names_a_non_tensor_checkpoint():
    """Findings 2 and 5: ``gdn_fold_ahead`` with a list for ``checkpoint`` raised a ValueError whose message dumped
    every tensor (3,646 characters); now a TypeError like every other op's."""
    rings = RingLayers.allocate(2, S, H, HV, K, V, L=L, window=T, dtype=torch.float32)
    ckpt = torch.randn(2, S, HV, V, K)
    with pytest.raises(TypeError, match=r"^checkpoint must be a torch.Tensor, got list$"):
        gdn_fold_ahead([ckpt[0], ckpt[1]], rings, slot_tensor([0]), impl="reference")
    rings.cursors.base[1] = -1
    before = ckpt.clone()
    with pytest.raises(ValueError, match="RingCursors.base must hold values in"):
        gdn_fold_ahead(ckpt, rings, slot_tensor([0]), impl="reference")
    assert torch.equal(ckpt, before)


def test_the_exported_references_check_their_arguments():
    """Finding 3: ``ring_commit_reference(c, slots=[0, 9], ...)`` advanced row 0 and then raised an IndexError; the
    exported references checked nothing. Each is now its op with ``impl="reference"``."""
    ring, state = _ring("reference")
    before = _snapshot(ring, state)
    with pytest.raises(ValueError, match=r"slots holds ids \[9\] outside"):
        ring_commit_reference(ring, slot_tensor([0, 9]), slot_tensor([1, 1]))
    with pytest.raises(ValueError, match=r"slots holds ids \[9\] outside"):
        ring_mark_folded_reference(ring, slot_tensor([9]))
    assert _unchanged(before, ring, state)


def test_zero_key_heads_are_a_named_error():
    """Finding 4: ``q`` of shape (N, 0, K) hit ``HV % H``: a ZeroDivisionError."""
    x = make_gdn_inputs([T], H, HV, K, V)
    q = x["q"][:, :0]
    kw = dict(A_log=x["A_log"], dt_bias=x["dt_bias"], slots=slot_tensor([0]), cu_seqlens=x["cu_seqlens"])
    with pytest.raises(ValueError, match="q must have at least one key head"):
        gdn_recurrent(q, q, x["v"], x["a"], x["b"], state=random_state(S, HV, V, K), **kw)


@pytest.mark.parametrize("impl", IMPLS)
def test_cursor_ops_refuse_slots_over_the_cursors(impl):
    """A review of the fix: ``ring_commit(c, c.epoch, ...)`` (slots read from the cursors it writes) was accepted,
    and the two paths disagreed (slot 1 committed twice, slot 0 left pending)."""
    c = RingCursors.allocate(2, L=8, window=2)
    c.pending[:] = 2
    c.epoch.copy_(torch.tensor([1, 0], dtype=torch.int32))
    before = [t.clone() for t in c.tensors()]
    with pytest.raises(ValueError, match=overlap("ring cursors (epoch)", "slots")):
        ring_commit(c, c.epoch, torch.tensor([2, 1], dtype=torch.int32), impl=impl)
    with pytest.raises(ValueError, match=overlap("ring cursors (flush)", "slots")):
        ring_mark_folded(c, c.flush, impl=impl)
    assert all(torch.equal(a, b) for a, b in zip(before, c.tensors()))


def test_fold_ahead_and_a_ring_built_over_itself_are_refused():
    """The same for ``gdn_fold_ahead`` (slots inside the checkpoint it writes), and a ``Ring`` whose own buffers
    share bytes (its ops would write one record over another)."""
    rings = RingLayers.allocate(2, S, H, HV, K, V, L=L, window=T, dtype=torch.float32)
    ckpt = torch.randn(2, S, HV, V, K)
    slots = ckpt.view(-1)[:1].view(torch.int32)
    slots.zero_()
    before = ckpt.clone()
    with pytest.raises(ValueError, match=overlap("checkpoint", "slots")):
        gdn_fold_ahead(ckpt, rings, slots, impl="reference")
    assert torch.equal(ckpt, before)
    one = rings.layers[0]
    with pytest.raises(ValueError, match=overlap("ring.u", "ring.v")):
        Ring(one.k, one.v, one.g, one.g.clone(), one.v, one.folded, one.cursors)  # u over v


def _ops():
    """Every public ``X_reference`` of every module of ``replayssm.ops`` whose module has the op ``X`` (not only
    the names ``ops.__all__`` exports: the conv, norm, attention and MoE ops live in modules of their own)."""
    import importlib
    import pkgutil

    from replayssm import ops

    found = {}
    for info in pkgutil.iter_modules(ops.__path__):
        mod = importlib.import_module(f"replayssm.ops.{info.name}")
        for name, ref in vars(mod).items():
            op = getattr(mod, name.removesuffix("_reference"), None)
            if name.endswith("_reference") and not name.startswith("_") and ref.__module__ == mod.__name__ and op:
                found[name.removesuffix("_reference")] = (op, ref)
    assert len(found) >= 15, sorted(found)
    return [(name, op, ref) for name, (op, ref) in sorted(found.items())]


@pytest.mark.parametrize("name, op, ref", _ops(), ids=[o[0] for o in _ops()])
def test_every_reference_is_its_op_with_the_reference_impl(name, op, ref):
    """A review of the fix: three of the new ``*_reference`` wrappers ran in no CPU test; a wrapper that dropped a
    keyword would go unnoticed. Each takes its op's parameters less ``impl`` (``ring_mark_folded_reference`` also
    ``reset``, as ``ring_reset``'s too), with the same defaults."""
    import inspect

    want = {k: p for k, p in inspect.signature(op).parameters.items() if k != "impl"}
    got = dict(inspect.signature(ref).parameters)
    if name == "ring_mark_folded":
        assert got.pop("reset").default is False
    assert [(k, p.kind, p.default) for k, p in got.items()] == [(k, p.kind, p.default) for k, p in want.items()]


def test_every_reference_gives_its_ops_reference_results():
    """A wrapper check, not a reference test (each wrapper calls its op with ``impl="reference"``, so this only
    catches one that drops or renames a keyword): results and effects on random inputs. The references are tested
    against the kernels in each op's own test file."""
    from replayssm.ops import (
        commit_snapshots_reference,
        gdn_exact_fold_reference,
        gdn_gating,
        gdn_gating_reference,
        gdn_recurrent_reference,
        gdn_replay_verify_reference,
    )

    x = make_gdn_inputs([T, 1], H, HV, K, V, gen=torch.Generator().manual_seed(9))
    args = [x[n] for n in "qkvab"]
    kw = dict(A_log=x["A_log"], dt_bias=x["dt_bias"], slots=slot_tensor([1, 0]), cu_seqlens=x["cu_seqlens"])
    g1, g2 = (
        gdn_gating(x["a"], x["b"], A_log=x["A_log"], dt_bias=x["dt_bias"], impl="reference"),
        gdn_gating_reference(x["a"], x["b"], A_log=x["A_log"], dt_bias=x["dt_bias"]),
    )
    assert all(torch.equal(a, b) for a, b in zip(g1, g2))
    s1 = random_state(S, HV, V, K)
    s2 = s1.clone()
    o1 = gdn_recurrent(*args, state=s1, scale=0.5, impl="reference", **kw)
    o2 = gdn_recurrent_reference(*args, state=s2, scale=0.5, **kw)
    assert torch.equal(o1, o2) and torch.equal(s1, s2)
    r1, c1 = _ring("reference", steps=3)
    r2, c2 = r1.clone(), c1.clone()
    o1 = gdn_replay_verify(*args, checkpoint=c1, ring=r1, impl="reference", **kw)
    o2 = gdn_replay_verify_reference(*args, checkpoint=c2, ring=r2, **kw)
    assert torch.equal(o1, o2) and all(torch.equal(a, b) for a, b in zip(_snapshot(r1, c1), _snapshot(r2, c2)))
    ring_commit(r1, kw["slots"], slot_tensor([2, 1]), impl="reference")
    ring_commit_reference(r2, kw["slots"], slot_tensor([2, 1]))
    gdn_exact_fold(c1, r1, slot_tensor([0, 1]), impl="reference")
    gdn_exact_fold_reference(c2, r2, slot_tensor([0, 1]))
    assert all(torch.equal(a, b) for a, b in zip(_snapshot(r1, c1), _snapshot(r2, c2)))
    snaps, st1 = torch.randn(1, 2, T, HV, V, K), torch.randn(1, S, HV, V, K)
    st2 = st1.clone()
    commit_snapshots(st1, snaps, slot_tensor([1, -1]), slot_tensor([2, 7]), impl="reference")
    commit_snapshots_reference(st2, snaps, slot_tensor([1, -1]), slot_tensor([2, 7]))
    assert torch.equal(st1, st2) and torch.equal(st1[0, 1], snaps[0, 0, 1])
