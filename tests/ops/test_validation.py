"""Every bad input raises a clear error naming the argument, and leaves every tensor as it was."""

import pytest
import torch

from replayssm.ops import Ring, gdn_exact_fold, gdn_recurrent, gdn_replay_verify, ring_commit
from tests.helpers.inputs import make_gdn_inputs, random_state, slot_tensor

H, HV, K, V, T, L, S = 2, 4, 16, 16, 4, 8, 3


def _setup():
    x = make_gdn_inputs([2, 3], H, HV, K, V, dtype=torch.float16)
    ring = Ring.allocate(S, H, HV, K, V, L=L, window=T, dtype=torch.float16)
    ring.cursors.pending[:] = 0
    state = random_state(S, HV, V, K)
    snaps = torch.full((2, T, HV, V, K), float("nan"))
    return x, ring, state, snaps, slot_tensor([2, 0])


def _snapshot(*objs):
    out = []
    for o in objs:
        if isinstance(o, Ring):
            c = o.cursors
            out += [o.k, o.v, o.g, o.beta, o.u, c.write_pos, c.base, c.flush, c.pending]
        else:
            out.append(o)
    return [t.clone() for t in out]


def _same(a, b):
    return all(torch.equal(x.nan_to_num(), y.nan_to_num()) for x, y in zip(a, b))


BAD_ACTIVATIONS = [
    ("q", lambda x: x["q"][:, :, :8].contiguous(), ValueError, "k must have shape"),
    ("q", lambda x: x["q"][0], ValueError, "q must have 3 dimensions"),
    ("k", lambda x: x["k"].float(), TypeError, "k must have dtype"),
    ("v", lambda x: x["v"][:4], ValueError, "v must have 5 tokens"),
    ("v", lambda x: x["v"].transpose(1, 2).contiguous().transpose(1, 2), ValueError, "v must be contiguous"),
    ("a", lambda x: x["a"][:, :2].contiguous(), ValueError, "a must have shape"),
    ("b", lambda x: x["b"].int(), TypeError, "b must have dtype"),
    ("A_log", lambda x: x["A_log"][:2], ValueError, "A_log must have shape"),
    ("dt_bias", lambda x: x["dt_bias"].to("meta"), ValueError, "dt_bias must be on cpu"),
    ("cu_seqlens", lambda x: torch.tensor([0, 2, 4], dtype=torch.int32), ValueError, "end at the token count 5"),
    ("cu_seqlens", lambda x: torch.tensor([0, 0, 5], dtype=torch.int32), ValueError, "at least one token"),
    ("cu_seqlens", lambda x: torch.tensor([0, 2, 5]), TypeError, "cu_seqlens must have dtype"),
    ("cu_seqlens", lambda x: torch.tensor([0, 5], dtype=torch.int32), ValueError, "cu_seqlens must have shape"),
]
BAD_IDS = [f"{b[0]}{i}" for i, b in enumerate(BAD_ACTIVATIONS)]
BAD_SLOTS = [
    (slot_tensor([3, 0]), ValueError, r"ids \[3\] outside \[-1, 3\)"),
    (slot_tensor([-2, 0]), ValueError, "outside"),
    (slot_tensor([1, 1]), ValueError, r"slot ids \[1\] more than once"),
    (torch.tensor([2, 0]), TypeError, "slots must have dtype"),
]


def _verify(x, ring, state, slots, **kw):
    args = {n: x[n] for n in "qkvab"}
    return gdn_replay_verify(*args.values(), A_log=x["A_log"], dt_bias=x["dt_bias"], checkpoint=state, ring=ring,
                             slots=slots, cu_seqlens=x["cu_seqlens"], impl="triton", **kw)  # fmt: skip


def _recurrent(x, ring, state, slots, snaps=None, **kw):
    args = {n: x[n] for n in "qkvab"}
    return gdn_recurrent(*args.values(), A_log=x["A_log"], dt_bias=x["dt_bias"], state=state, slots=slots,
                         cu_seqlens=x["cu_seqlens"], snapshots=snaps, impl="triton", **kw)  # fmt: skip


@pytest.mark.parametrize("op", [_verify, _recurrent], ids=["verify", "recurrent"])
@pytest.mark.parametrize("name,make,exc,msg", BAD_ACTIVATIONS, ids=BAD_IDS)
def test_bad_activations(op, name, make, exc, msg):
    x, ring, state, snaps, slots = _setup()
    before = _snapshot(ring, state, snaps)
    x[name] = make(x)
    with pytest.raises(exc, match=msg):
        op(x, ring, state, slots)
    assert _same(before, _snapshot(ring, state, snaps))


@pytest.mark.parametrize("op", [_verify, _recurrent], ids=["verify", "recurrent"])
@pytest.mark.parametrize("slots,exc,msg", BAD_SLOTS)
def test_bad_slots(op, slots, exc, msg):
    x, ring, state, snaps, _ = _setup()
    before = _snapshot(ring, state, snaps)
    with pytest.raises(exc, match=msg):
        op(x, ring, state, slots)
    assert _same(before, _snapshot(ring, state, snaps))


def test_bad_state_and_ring():
    x, ring, state, snaps, slots = _setup()
    before = _snapshot(ring, state, snaps)
    with pytest.raises(TypeError, match="checkpoint must have dtype"):
        _verify(x, ring, state.half(), slots)
    with pytest.raises(ValueError, match="checkpoint must be contiguous"):
        _verify(x, ring, state.transpose(2, 3), slots)
    with pytest.raises(ValueError, match="state must have shape"):
        _recurrent(x, ring, state[:, :2].contiguous(), slots)
    other = Ring.allocate(S, 1, HV, K, V, L=16, window=T, dtype=torch.float16)
    with pytest.raises(ValueError, match="ring was allocated for"):
        _verify(x, other, state, slots)
    more_slots = Ring.allocate(S + 1, H, HV, K, V, L=L, window=T, dtype=torch.float16)
    with pytest.raises(ValueError, match="ring was allocated for"):
        _verify(x, more_slots, state, slots)
    with pytest.raises(ValueError, match="checkpoint has 3 slots, ring has 4"):
        gdn_exact_fold(state, more_slots, slots)
    wrong_dtype = Ring.allocate(S, H, HV, K, V, L=L, window=T, dtype=torch.float32)
    with pytest.raises(TypeError, match="ring records are"):
        _verify(x, wrong_dtype, state, slots)
    short = Ring.allocate(S, H, HV, K, V, L=L, window=2, dtype=torch.float16)
    with pytest.raises(ValueError, match="longer than the window T=2"):
        _verify(x, short, state, slots)
    with pytest.raises(TypeError, match="scale must be a Python float"):
        _verify(x, ring, state, slots, scale=torch.tensor(0.25))
    with pytest.raises(ValueError, match="scale must be a finite positive number"):
        _verify(x, ring, state, slots, scale=float("nan"))
    with pytest.raises(ValueError, match="out must have shape"):
        _verify(x, ring, state, slots, out=torch.empty(5, HV, V + 1, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"snapshots must have shape \(2, T_max"):
        _recurrent(x, ring, state, slots, snaps=snaps[:1])
    with pytest.raises(ValueError, match="longer than the window T=2"):
        _recurrent(x, ring, state, slots, snaps=snaps[:, :2].contiguous())
    with pytest.raises(ValueError, match="out must have shape"):
        gdn_exact_fold(state, ring, slots, out=torch.empty(3, HV, V, K))
    with pytest.raises(TypeError, match="ring must be a Ring"):
        gdn_exact_fold(state, ring.cursors, slots)
    assert _same(before, _snapshot(ring, state, snaps))


def test_bad_commit():
    x, ring, state, snaps, slots = _setup()
    n = torch.tensor([1, 1], dtype=torch.int32)
    with pytest.raises(ValueError, match="slot 2 has no verified window"):
        ring_commit(ring, slots, n)
    _verify(x, ring, state, slots)  # windows of 2 and 3 tokens pending
    before = _snapshot(ring, state)
    for bad, msg in [([0, 1], r"num_accepted=0 for slot 2 is outside \[1, 2\]"), ([1, 4], r"outside \[1, 3\]")]:
        with pytest.raises(ValueError, match=msg):
            ring_commit(ring, slots, torch.tensor(bad, dtype=torch.int32))
    with pytest.raises(TypeError, match="num_accepted must have dtype"):
        ring_commit(ring, slots, torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="num_accepted must have shape"):
        ring_commit(ring, slots, torch.tensor([1], dtype=torch.int32))
    assert _same(before, _snapshot(ring, state))


@pytest.mark.parametrize(
    "kw,exc,msg",
    [
        (dict(L=12, window=4), ValueError, "power of two"),
        (dict(L=8, window=5), ValueError, r"must be >= 2 \* window = 10"),
        (dict(L=8, window=0), ValueError, "window must be an int >= 1"),
        (dict(L=8, window=4, dtype=torch.int8), TypeError, "dtype must be one of"),
    ],
)
def test_ring_geometry(kw, exc, msg):
    with pytest.raises(exc, match=msg):
        Ring.allocate(S, H, HV, K, V, **kw)
