import pytest
import torch

from replayssm.ops import gdn_replay_verify
from tests.helpers.chain import Chain, call
from tests.helpers.gdn64 import rel_err, run64
from tests.helpers.inputs import make_gdn_inputs, slot_tensor


@pytest.mark.parametrize("group", [1, 2, 4])
def test_reference_outputs_match_float64_recurrence(group):
    """Through several steps (history, folds): verify outputs == float64 recurrence from the committed state."""
    H, K, V, T, L = 2, 16, 32, 4, 8
    c = Chain(3, H, H * group, K, V, T=T, L=L, dtype=torch.float32, device="cpu", impl="reference", seed=group)
    state64 = c.state.double().clone()
    rng = torch.Generator().manual_seed(5)
    for _ in range(12):
        slots, lens = [2, 0, 1], [int(torch.randint(1, T + 1, (1,), generator=rng)) for _ in range(3)]
        c.verify(slots, lens)
        o, xin = c.last_out, c.last_inputs
        cu = xin["cu_seqlens"].tolist()
        acc = [int(torch.randint(1, n + 1, (1,), generator=rng)) for n in lens]
        for i, s in enumerate(slots):
            t = slice(cu[i], cu[i + 1])
            o64, st64 = run64(state64[s], *(xin[n][t] for n in "qkvab"), c.A_log, c.dt_bias)
            assert rel_err(o[t], o64) < 1e-5  # fp32 window transform vs fp64 recurrence
            state64[s] = st64[acc[i] - 1]
        c.commit(acc)
    assert c.flushes >= 3


@pytest.mark.parametrize(
    "T,L,dtype", [(4, 8, torch.float16), (2, 16, torch.float32), (1, 8, torch.float32), (2, 64, torch.float32)]
)
def test_kernel_matches_reference_with_history_and_flush(device, T, L, dtype):
    H, HV, K, V = 2, 4, 16, 32
    c = Chain(5, H, HV, K, V, T=T, L=L, dtype=dtype, device=device, impl="reference", seed=3)
    rng = torch.Generator().manual_seed(1)
    for _ in range(5):  # build up history on every slot, some of them due to flush
        lens = [int(torch.randint(1, T + 1, (1,), generator=rng)) for _ in range(5)]
        c.verify([0, 1, 2, 3, 4], lens)
        c.commit([int(torch.randint(1, n + 1, (1,), generator=rng)) for n in lens])
    cur = c.ring.cursors
    cur.flush[3] = 1  # force a mix: slot 3 folds in this call, slot 0 reconstructs from its history
    cur.flush[0] = int(int(cur.write_pos[0]) + T > L)
    flushing = cur.flush.tolist()
    assert flushing[3] == 1 and flushing[0] == 0 and int(cur.write_pos[0]) > 0 and int(cur.write_pos[3]) > 0
    slots, lens = [3, -1, 0, 4], [T, max(1, T - 1), 1, T]
    x = make_gdn_inputs(lens, H, HV, K, V, dtype=dtype, device=device)
    res = {}
    for impl in ("triton", "reference"):
        ckpt, ring = c.checkpoint.clone(), c.ring.clone()
        out = torch.full_like(x["v"], float("nan"))
        call(gdn_replay_verify, x, checkpoint=ckpt, ring=ring, slots=slot_tensor(slots, device), out=out, impl=impl)
        res[impl] = (out, ckpt, ring)
    (o, ck, rg), (o_r, ck_r, rg_r) = res["triton"], res["reference"]
    assert not torch.isnan(o).any()
    assert rel_err(o, o_r) < (1e-5 if dtype == torch.float32 else 3e-3)
    assert (o[lens[0] : lens[0] + lens[1]] == 0).all()  # padding row
    assert rel_err(ck, ck_r) < 1e-5  # folded rows: same update, different exp implementation
    for s in (1, 2):  # not in the call: bitwise untouched
        assert torch.equal(ck[s], c.checkpoint[s])
        for name in ("k", "v", "u", "g", "beta"):
            assert torch.equal(getattr(rg, name)[s].nan_to_num(), getattr(c.ring, name)[s].nan_to_num())
    for s in (3, 0, 4):
        if not flushing[s]:
            assert torch.equal(ck[s], c.checkpoint[s])  # non-flush rows write no state
    assert rel_err(rg.k.nan_to_num(), rg_r.k.nan_to_num()) < 1e-6  # normalised keys: two reduction orders
    assert torch.equal(rg.v.nan_to_num(), rg_r.v.nan_to_num())
    assert rel_err(rg.g.nan_to_num(), rg_r.g.nan_to_num()) < 1e-6
    assert rel_err(rg.beta.nan_to_num(), rg_r.beta.nan_to_num()) < 1e-6
    assert rel_err(rg.u.nan_to_num(), rg_r.u.nan_to_num()) < (1e-5 if dtype == torch.float32 else 3e-3)
    assert torch.equal(rg.cursors.pending, rg_r.cursors.pending)
    assert rg.cursors.pending[[3, 0, 4]].tolist() == [lens[0], lens[2], lens[3]]
    for name in ("write_pos", "base", "flush"):  # verify reads the cursors, never moves them
        assert torch.equal(getattr(rg.cursors, name), getattr(c.ring.cursors, name))
