import pytest
import torch

from replayssm.ops import gdn_recurrent, gdn_recurrent_reference
from tests.helpers.gdn64 import rel_err, run64
from tests.helpers.inputs import make_gdn_inputs, random_state, slot_tensor


def _call(fn, x, state, slots, **kw):
    return fn(x["q"], x["k"], x["v"], x["a"], x["b"], A_log=x["A_log"], dt_bias=x["dt_bias"], state=state,
              slots=slots, cu_seqlens=x["cu_seqlens"], **kw)  # fmt: skip


@pytest.mark.parametrize("group", [1, 2, 4])
def test_reference_matches_float64(group):
    lens, H, K, V = [3, 1, 4], 2, 16, 32
    x = make_gdn_inputs(lens, H, H * group, K, V)
    state = random_state(5, H * group, V, K)
    slots = [4, 0, 2]
    snaps = torch.full((3, 4, H * group, V, K), float("nan"))
    new = state.clone()
    o = _call(gdn_recurrent_reference, x, new, slot_tensor(slots), snapshots=snaps)
    cu = x["cu_seqlens"].tolist()
    for i, s in enumerate(slots):
        t = slice(cu[i], cu[i + 1])
        o64, st64 = run64(state[s], *(x[n][t] for n in "qkvab"), x["A_log"], x["dt_bias"])
        assert rel_err(o[t], o64) < 1e-5  # fp32 vs fp64 over <= 4 steps
        assert rel_err(new[s], st64[-1]) < 1e-5
        assert rel_err(snaps[i, : lens[i]], st64) < 1e-5
        assert torch.isnan(snaps[i, lens[i] :]).all()  # nothing written past the window
    assert torch.equal(new[[1, 3]], state[[1, 3]])  # slots outside the batch untouched


@pytest.mark.parametrize(
    "group,lens,slots,dtype",
    [
        (1, [1, 1, 1], [2, -1, 0], torch.float32),  # plain decode with a padding row
        (2, [2, 4, 1], [3, 1, -1], torch.float16),
        (4, [4, 3], [1, 4], torch.float32),
    ],
)
def test_kernel_matches_reference(device, group, lens, slots, dtype):
    H, K, V = 2, 16, 32
    x = make_gdn_inputs(lens, H, H * group, K, V, dtype=dtype, device=device)
    state = random_state(5, H * group, V, K, device=device)
    s = slot_tensor(slots, device)
    res = {}
    for impl in ("triton", "reference"):
        st = state.clone()
        snaps = torch.full((len(lens), 4, H * group, V, K), float("nan"), device=device)
        out = torch.full_like(x["v"], float("nan"))
        o = _call(gdn_recurrent, x, st, s, snapshots=snaps, out=out, impl=impl)
        assert o is out
        res[impl] = (o, st, snaps)
    (o, st, sn), (o_r, st_r, sn_r) = res["triton"], res["reference"]
    bound = 1e-5 if dtype == torch.float32 else 2e-3  # fp16 outputs: one rounding of the result
    assert not torch.isnan(o).any()
    assert rel_err(o, o_r) < bound
    assert rel_err(st, st_r) < 1e-5
    live = [i for i, x_ in enumerate(slots) if x_ >= 0]
    for i in live:
        assert rel_err(sn[i, : lens[i]], sn_r[i, : lens[i]]) < 1e-5
    cu = x["cu_seqlens"].tolist()
    for i, x_ in enumerate(slots):
        if x_ < 0:
            assert (o[cu[i] : cu[i + 1]] == 0).all()  # padding rows: zero outputs
            assert torch.isnan(sn[i]).all()  # and no snapshot written
    untouched = [j for j in range(5) if j not in slots]
    assert torch.equal(st[untouched], state[untouched])


def test_update_state_false_leaves_state(device):
    x = make_gdn_inputs([3, 2], 1, 2, 16, 16, device=device)
    state = random_state(3, 2, 16, 16, device=device)
    before = state.clone()
    snaps = torch.full((2, 3, 2, 16, 16), float("nan"), device=device)
    _call(gdn_recurrent, x, state, slot_tensor([1, 2], device), snapshots=snaps, update_state=False, impl="triton")
    assert torch.equal(state, before)
    assert not torch.isnan(snaps[0]).any() and not torch.isnan(snaps[1, :2]).any()
