"""The kernels on the GPU at real shapes: against their references, and 1,000-step bitwise chains."""

import pytest
import torch

from replayssm.ops import gdn_recurrent, gdn_recurrent_reference, gdn_replay_verify, gdn_replay_verify_reference
from tests.helpers.chain import Chain, LayerChain, call
from tests.helpers.gdn64 import rel_err, run64
from tests.helpers.inputs import make_gdn_inputs, random_state

H, HV, K, V = 16, 64, 128, 128  # Qwen3.5-122B TP1 GDN geometry
DT = torch.bfloat16
# bf16 outputs (~2^-9 rounding) and bf16 update vectors u; every product is fp32 FMA.
OUT_BOUND = 5e-3


def _chain_with_history(S, seed, steps=4):
    c = Chain(S, H, HV, K, V, T=4, L=16, dtype=DT, device="cuda", impl="triton", seed=seed, rng_device="cuda")
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        lens = torch.randint(1, 5, (S,), generator=g).tolist()
        c.verify(list(range(S)), lens)
        c.commit([int(torch.randint(1, n + 1, (1,), generator=g)) for n in lens])
    return c


def _chain_under(env: dict, S: int, seed: int, steps: int):
    """A T=4, L=16 chain of ``steps`` random verify/commit steps over ``S`` slots with the environment ``env`` set;
    returns (chain, outputs of every step)."""
    mp = pytest.MonkeyPatch()
    for k, v in env.items():
        mp.setenv(k, v)
    try:
        c = Chain(S, H, HV, K, V, T=4, L=16, dtype=DT, device="cuda", impl="triton", seed=seed, rng_device="cuda")
        g = torch.Generator().manual_seed(seed)
        outs = []
        for _ in range(steps):
            lens = torch.randint(1, 5, (S,), generator=g).tolist()
            outs.append(c.verify(list(range(S)), lens)[1].clone())
            c.commit([int(torch.randint(1, n + 1, (1,), generator=g)) for n in lens])
        return c, outs
    finally:
        mp.undo()


@pytest.mark.parametrize("one", ["0", "1"], ids=["staged", "one-launch"])
def test_verify_matches_reference(one, monkeypatch):
    """Varlen windows, a padding row, and a mix of flushing and reconstructing rows in one call; staged and in one
    launch (ops/verify_launch.py, ``one_launch``)."""
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", one)
    c = _chain_with_history(12, seed=3)
    c.ring.cursors.flush[:4] = 1
    lens = [4, 3, 1, 2, 4, 4, 3, 1, 2, 4, 4, 3]
    x = make_gdn_inputs(lens, H, HV, K, V, dtype=DT, device="cuda", gen=c.gen)
    x["A_log"], x["dt_bias"] = c.A_log, c.dt_bias
    slots = torch.tensor([0, 1, 2, 3, 4, -1, 6, 7, 8, 9, 10, 11], dtype=torch.int32, device="cuda")
    res = {}
    for name, fn in (("triton", gdn_replay_verify), ("reference", gdn_replay_verify_reference)):
        ck, ring = c.checkpoint.clone(), c.ring.clone()
        res[name] = (call(fn, x, checkpoint=ck, ring=ring, slots=slots), ck, ring)
    (o, ck, rg), (o_r, ck_r, rg_r) = res["triton"], res["reference"]
    assert rel_err(o, o_r) < OUT_BOUND
    assert rel_err(ck, ck_r) < 1e-5  # folded rows: the same update; exp differs between Triton and PyTorch
    assert rel_err(rg.u.nan_to_num(), rg_r.u.nan_to_num()) < OUT_BOUND
    assert rel_err(rg.k.nan_to_num(), rg_r.k.nan_to_num()) < 1e-6  # normalised keys, two reduction orders
    assert torch.equal(rg.v.nan_to_num(), rg_r.v.nan_to_num())  # raw values are stored bit for bit
    pad = slice(sum(lens[:5]), sum(lens[:6]))
    assert (o[pad] == 0).all()


def test_staged_and_one_launch_agree_bitwise_on_the_ring():
    """Both ways of the verify over a chain at the real geometry (T=4, L=16, 40 steps, folds included): the
    checkpoints and the ring's keys, gates and betas torch.equal, outputs within the bf16 bound."""
    runs = {one: _chain_under({"REPLAYSSM_VERIFY_ONE_LAUNCH": one}, 24, seed=4, steps=40) for one in ("0", "1")}
    (c0, o0), (c1, o1) = runs["0"], runs["1"]
    assert c0.flushes > 50 and c0.flushes == c1.flushes
    assert torch.equal(c0.checkpoint, c1.checkpoint)
    for name in ("k", "g", "beta"):
        assert torch.equal(getattr(c0.ring, name).nan_to_num(), getattr(c1.ring, name).nan_to_num()), name
    assert max(rel_err(a, b) for a, b in zip(o0, o1)) < OUT_BOUND


def test_pdl_follows_the_wave_and_changes_no_bit():
    """The one-launch verify's programmatic dependent launch (``verify_launch.use_pdl``): on an sm_90+ GPU at a one-wave
    batch (B=8 at HV=64), not at 31 waves (B=256); and a 30-step chain at B=8 (T=4, L=16, one launch, folds) with
    it and without gives torch.equal outputs, checkpoints and rings."""
    from replayssm.ops import launch
    from replayssm.ops.verify_launch import ONE_LAUNCH_PER_SM, use_pdl

    dev = torch.device("cuda")
    hopper = torch.cuda.get_device_capability() >= (9, 0)
    wave = ONE_LAUNCH_PER_SM * launch.sm_count(dev)
    assert use_pdl(8 * HV, dev) is (hopper and 8 * HV < wave)
    assert use_pdl(256 * HV, dev) is False
    env = {"REPLAYSSM_VERIFY_ONE_LAUNCH": "1"}
    runs = {pdl: _chain_under({**env, "REPLAYSSM_VERIFY_PDL": pdl}, 8, seed=6, steps=30) for pdl in ("0", "1")}
    (c0, o0), (c1, o1) = runs["0"], runs["1"]
    assert c0.flushes > 10 and c0.flushes == c1.flushes
    assert torch.equal(c0.checkpoint, c1.checkpoint)
    for name in ("k", "v", "u", "g", "beta"):
        assert torch.equal(getattr(c0.ring, name).nan_to_num(), getattr(c1.ring, name).nan_to_num()), name
    assert all(torch.equal(a, b) for a, b in zip(o0, o1))


def test_recurrent_matches_reference():
    g = torch.Generator(device="cuda").manual_seed(4)
    lens = [4, 3, 1, 2, 4, 4]
    x = make_gdn_inputs(lens, H, HV, K, V, dtype=DT, device="cuda", gen=g)
    state = random_state(8, HV, V, K, device="cuda", gen=g)
    slots = torch.tensor([5, 0, -1, 7, 2, 3], dtype=torch.int32, device="cuda")
    out = []
    for fn in (gdn_recurrent, gdn_recurrent_reference):
        st = state.clone()
        snaps = torch.full((6, 4, HV, V, K), float("nan"), device="cuda")
        out.append((call(fn, x, state=st, slots=slots, snapshots=snaps), st, snaps))
    (o, st, snaps), (o_r, st_r, snaps_r) = out
    assert rel_err(o, o_r) < OUT_BOUND and rel_err(st, st_r) < 1e-5
    assert rel_err(snaps.nan_to_num(), snaps_r.nan_to_num()) < 1e-5


# (H, HV, K, V, T, L, dtype, slots, batch): K = V = 128 and 64, K != V both ways, T in {1, 2, 3, 4, 8},
# L from 2T to 32, fp16 and bf16. Launch shapes are chosen per batch size, so B also varies the programs.
GEOMETRIES = [
    (16, 64, 128, 128, 4, 16, torch.bfloat16, 80, 64),
    (4, 8, 64, 64, 2, 4, torch.float16, 24, 16),
    (4, 16, 64, 128, 8, 32, torch.bfloat16, 24, 12),
    (16, 64, 128, 128, 1, 16, torch.bfloat16, 40, 32),
    (8, 32, 128, 64, 3, 8, torch.float16, 24, 16),
    (2, 4, 16, 16, 8, 16, torch.bfloat16, 12, 8),
    # every step folds (L = 2T), four fold blocks per program: caught a cross-warp race on the fold markers
    (16, 64, 128, 128, 8, 16, torch.bfloat16, 24, 16),
]


@pytest.mark.parametrize("geo", GEOMETRIES, ids=lambda g: f"H{g[0]}-HV{g[1]}-K{g[2]}-V{g[3]}-T{g[4]}-L{g[5]}")
def test_thousand_step_chain_bitwise(geo):
    """1,000 verify -> commit steps: random windows and acceptance, a padding row every step, random batch
    membership, a retried verify now and then, slots freed and reused; the committed state is torch.equal to
    the baseline's after every step; outputs against float64 for two rows over the first steps."""
    h, hv, k, v, T, L, dt, S, B = geo
    c = Chain(S, h, hv, k, v, T=T, L=L, dtype=dt, device="cuda", impl="triton", seed=0, rng_device="cuda")
    g = torch.Generator().manual_seed(7)
    rows = torch.randperm(S, generator=g)[:B].tolist()
    ref64 = {i: c.state[rows[i]].double() for i in (0, 1)}
    worst, worst64, retries, reused = 0.0, 0.0, 0, 0
    for step in range(1000):
        lens = torch.randint(1, T + 1, (B,), generator=g).tolist()
        slots = list(rows)
        pad = int(torch.randint(2, B, (1,), generator=g))
        slots[pad] = -1
        o_base, o = c.verify(slots, lens)
        if step % 37 == 5:  # a retry before commit folds nothing twice
            o = call(gdn_replay_verify, c.last_inputs, checkpoint=c.checkpoint, ring=c.ring, slots=c.slots)
            retries += 1
        worst = max(worst, rel_err(o, o_base))
        acc = [int(torch.randint(1, n + 1, (1,), generator=g)) for n in lens]
        if step < 20:  # float64 recurrence of two rows from their committed states
            x, cu = c.last_inputs, c.last_inputs["cu_seqlens"].tolist()
            for i in ref64:
                t = slice(cu[i], cu[i + 1])
                o64, st64 = run64(ref64[i], *(x[n][t] for n in "qkvab"), c.A_log, c.dt_bias)
                worst64 = max(worst64, rel_err(o[t], o64))
                ref64[i] = st64[acc[i] - 1]
        c.commit(acc)
        if step % 50 == 49:  # free a slot and hand it out again
            c.reuse(rows[2 + step % (B - 2)])
            reused += 1
        assert torch.equal(c.committed_replay(rows), c.state[rows]), f"step {step}"
    assert c.flushes > 200 and retries > 20 and reused == 20
    assert worst < OUT_BOUND and worst64 < OUT_BOUND, (worst, worst64)


@pytest.mark.parametrize("T, L", [(4, 16), (2, 8), (1, 16)])
def test_fold_ahead_chain_bitwise(T, L):
    """300 steps of two real-shape layers at B=8 (one wave: where a commit folds ahead, ops/fold_ahead.py), a padding
    row and a changing batch: after every commit the flushing rows fold in every layer at once, and the committed
    state of every layer is torch.equal to the baseline's after every step; outputs within the bf16 bound."""
    S, B = 12, 8
    c = LayerChain(S, 2, H, HV, K, V, T=T, L=L, device="cuda", impl="triton", dtype=DT, seed=6, rng_device="cuda")
    g = torch.Generator().manual_seed(6)
    worst, ahead = 0.0, 0
    for step in range(300):
        rows = torch.randperm(S, generator=g)[:B].tolist()
        rows[int(torch.randint(0, B, (1,), generator=g))] = -1
        lens = torch.randint(1, T + 1, (B,), generator=g).tolist()
        acc = [int(torch.randint(1, n + 1, (1,), generator=g)) for n in lens]
        outs = c.step(rows, lens, acc, ahead=True)
        assert int(c.rings.cursors.flush.sum()) == 0  # every flag folded ahead at its commit
        ahead += int((c.rings.cursors.write_pos[[r for r in rows if r >= 0]] == 0).sum())
        worst = max([worst] + [rel_err(o, o_base) for o_base, o in outs])
        for layer in range(2):
            assert torch.equal(c.committed(layer, list(range(S))), c.state[layer]), f"step {step} layer {layer}"
    assert ahead > 40 and worst < OUT_BOUND, (ahead, worst)


@pytest.mark.parametrize("one", ["0", "1"], ids=["staged", "one-launch"])
def test_decode_chain_with_the_fold_phase_bitwise(one, monkeypatch):
    """300 plain-decode steps (window 1, L=16) of 48 rows at the real shape with ``ring_commit(fold_phase=True)``, a
    padding row every step, the verify staged (as over many waves, ops/verify_launch.py) or in one launch: the rows
    fold first early, each in its own phase (ops/cursors.py), then every 15 steps, never all in one step; the
    committed state is torch.equal to the baseline's after every step and the outputs are within the bf16 bound."""
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", one)
    S, B = 64, 48
    c = Chain(S, H, HV, K, V, T=1, L=16, dtype=DT, device="cuda", impl="triton", seed=4, rng_device="cuda",
              fold_phase=True)  # fmt: skip
    g = torch.Generator().manual_seed(4)
    rows = torch.randperm(S, generator=g)[:B].tolist()
    worst, per_step = 0.0, []
    for step in range(300):
        slots = list(rows)
        slots[int(torch.randint(0, B, (1,), generator=g))] = -1
        before = c.flushes
        o_base, o = c.verify(slots, [1] * B)
        per_step.append(c.flushes - before)
        worst = max(worst, rel_err(o, o_base))
        c.commit([1] * B)
        assert torch.equal(c.committed_replay(rows), c.state[rows]), f"step {step}"
    assert c.early_flushes >= B // 2 and sum(per_step) > 15 * B  # first folds early, then a fold per 15 steps each
    assert max(per_step[16:]) <= B // 3, per_step  # spread: 48 rows over 15 phases
    assert worst < OUT_BOUND, worst
