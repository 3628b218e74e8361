"""The verify's launch-time choices: staged or one launch, the prep's warps, the window dots on tensor cores or FMA
rows, a head split over programs.

Both paths of the window dots run the same kernel source; in the interpreter the tensor-core path is an fp32
``dot`` of the hi/lo parts (the TF32 rounding is GPU-only, checked by tests/gpu against the reference)."""

import pytest
import torch

from replayssm.ops import gdn_replay_verify, launch
from replayssm.ops.verify_launch import one_launch, tensor_cores, use_pdl, use_tensor_cores
from replayssm.ops.verify_prep import prep_warps
from replayssm.ops.verify_window import dots_layout
from tests.helpers.chain import Chain, call
from tests.helpers.gdn64 import rel_err
from tests.helpers.inputs import make_gdn_inputs, slot_tensor

CPU = torch.device("cpu")


def test_prep_warps_follow_the_number_of_programs():
    assert prep_warps(16 * 256, 132, 4) == 1  # B=256: the fewest instructions per program
    assert prep_warps(16 * 64, 132, 8) == 1
    assert prep_warps(16 * 8, 132, 4) == 2  # B=8: spread one program's latency
    assert prep_warps(16 * 8, 132, 8) == 4
    assert prep_warps(2 * 132 - 1, 132, 1) == 2 and prep_warps(2 * 132, 132, 1) == 1


def test_tensor_cores_only_where_the_mma_tile_is_full(monkeypatch):
    monkeypatch.delenv("REPLAYSSM_VERIFY_TC", raising=False)
    ln = launch.resolve("verify", 128, 64, CPU, split_small=True)  # 4 warps, 128 rows per program
    assert tensor_cores(ln, 4, 32, 2, CPU)[:2] == (True, 8)
    assert tensor_cores(ln, 8, 32, 2, CPU)[:2] == (True, 16)
    assert tensor_cores(ln, 2, 32, 2, CPU)[:2] == (False, 4)  # 2BT < 8 would leave MMA columns idle
    assert tensor_cores(ln, 4, 8, 4, CPU)[0] is False  # chunks narrower than one 16-column MMA step
    assert tensor_cores(ln, 16, 16, 1, CPU)[0] is False  # the dots leave through the chunk buffer: too small
    small = launch.resolve("verify", 16, 64, CPU, split_small=True)
    assert tensor_cores(small, 4, 16, 1, CPU)[0] is (small.rows_per_program >= 16 * small.num_warps)
    monkeypatch.setenv("REPLAYSSM_VERIFY_TC", "0")
    assert use_tensor_cores(CPU) is False and tensor_cores(ln, 4, 32, 2, CPU)[:2] == (False, 8)


def test_one_launch_follows_the_window_and_the_batch(monkeypatch):
    monkeypatch.delenv("REPLAYSSM_VERIFY_ONE_LAUNCH", raising=False)
    cuda_like = torch.device("cpu")
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    assert one_launch(1, 32, 256 * 64, cuda_like) and one_launch(1, 64, 256 * 64, cuda_like)  # plain decode (CPU)
    gpu = torch.device("cuda")  # plain decode on a GPU: staged from eight waves on (verify_launch.many_waves)
    assert (
        one_launch(1, 16, 64 * 64, gpu)
        and not one_launch(1, 16, 128 * 64, gpu)
        and not one_launch(1, 32, 256 * 64, gpu)
    )
    assert not one_launch(1, 128, 8, cuda_like)  # 256 history dots: more than measured faster
    assert not one_launch(2, 16, 256 * 64, cuda_like) and not one_launch(2, 16, 64 * 64, cuda_like)
    assert one_launch(2, 32, 8 * 64, cuda_like) and one_launch(4, 16, 8 * 64, cuda_like)  # one wave (528 = 4 per SM)
    assert not one_launch(4, 32, 8 * 64, cuda_like)  # 256 history dots per value head: more than measured faster
    assert not one_launch(4, 16, 16 * 64, cuda_like) and not one_launch(4, 16, 256 * 64, cuda_like)
    assert not one_launch(8, 16, 8 * 64, cuda_like)
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", "0")
    assert not one_launch(1, 16, 8, cuda_like)
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", "1")
    assert one_launch(8, 32, 256 * 64, cuda_like)
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", "yes")
    with pytest.raises(ValueError, match="REPLAYSSM_VERIFY_ONE_LAUNCH must be 0, 1 or unset"):
        one_launch(1, 16, 8, cuda_like)


def test_programmatic_dependent_launch_only_on_a_gpu_or_when_forced(monkeypatch):
    """PDL needs a CUDA device of compute capability >= 9.0 and a one-wave batch (checked on the GPU); on the CPU it
    is never used, whatever the switch, and a bad switch is refused."""
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    for env in ("", "0", "1"):
        monkeypatch.setenv("REPLAYSSM_VERIFY_PDL", env)
        assert use_pdl(512, CPU) is False
    monkeypatch.setenv("REPLAYSSM_VERIFY_PDL", "on")
    with pytest.raises(ValueError, match="REPLAYSSM_VERIFY_PDL must be 0, 1 or unset"):
        use_pdl(512, CPU)


@pytest.mark.parametrize("switch", ["REPLAYSSM_VERIFY_ONE_LAUNCH", "REPLAYSSM_VERIFY_PDL"])
def test_a_bad_launch_switch_is_refused_before_anything_is_written(monkeypatch, device, switch):
    """The switch is read after the arguments are checked and before the first launch: the call raises and the
    checkpoint, ring and cursors are as they were."""
    H, HV, K, V, T, L = 2, 4, 32, 32, 4, 8
    c = Chain(2, H, HV, K, V, T=T, L=L, dtype=torch.float32, device=device, impl="triton", seed=3)
    c.verify([0, 1], [3, 2])
    c.commit([2, 1])
    x = make_gdn_inputs([4, 1], H, HV, K, V, dtype=torch.float32, device=device)
    ck, ring = c.checkpoint.clone(), c.ring.clone()
    if switch == "REPLAYSSM_VERIFY_PDL":
        monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", "1")  # PDL is a choice of the one-launch path
    monkeypatch.setenv(switch, "2")
    with pytest.raises(ValueError, match=switch):
        call(gdn_replay_verify, x, checkpoint=c.checkpoint, ring=c.ring, slots=slot_tensor([1, 0], device),
             impl="triton")  # fmt: skip
    assert torch.equal(c.checkpoint, ck)
    for name in ("k", "v", "u", "g", "beta", "folded"):
        assert torch.equal(getattr(c.ring, name).nan_to_num(), getattr(ring, name).nan_to_num()), name
    for name in ("write_pos", "base", "flush", "epoch", "pending"):
        assert torch.equal(getattr(c.ring.cursors, name), getattr(ring.cursors, name)), name


@pytest.mark.parametrize("M, N, K, W", [(4, 8, 128, 4), (8, 16, 128, 4), (16, 8, 128, 4), (32, 16, 128, 4),
                                        (1, 2, 128, 4), (2, 4, 32, 1), (16, 8, 16, 2), (32, 2, 64, 2)])  # fmt: skip
def test_dots_layout_covers_the_product(M, N, K, W):
    """Lanes along K first (8 where the register budget allows), every warp and lane placed, the K chunk a
    divisor of K made of 16-byte (or smaller) vectors, at most 8 outputs per thread where one K-lane allows it."""
    lay, cw = dots_layout(M, N, K, W)
    spt, tpw, wpc = lay.size_per_thread, lay.threads_per_warp, lay.warps_per_cta
    assert tpw[0] * tpw[1] * tpw[2] == 32 and wpc[0] * wpc[1] * wpc[2] == W and wpc[2] == 1
    assert cw == spt[2] * tpw[2] and K % cw == 0 and spt[2] <= 4
    assert spt[0] * tpw[0] * wpc[0] >= M and spt[1] * tpw[1] * wpc[1] >= N  # covers M x N (small ones repeat)
    assert spt[0] * spt[1] <= 8 or tpw[2] == 1
    if M * N <= 8 * 4 * W:  # small enough for eight K-lanes: conflict-free 128-byte rows
        assert tpw[2] == 8 or cw == K


@pytest.mark.parametrize("T, L", [(4, 8), (2, 8), (1, 4)])
def test_staged_and_one_launch_agree(T, L, monkeypatch, device):
    """The two ways of the verify over a chain of steps with folds: the ring's keys, gates and betas and the
    checkpoints bitwise equal (the same pinned normalisation, gating and fold), outputs and update vectors close
    (the window's dots are summed in another order)."""
    H, HV, K, V, S = 2, 4, 32, 32, 3
    runs = {}
    for one in ("0", "1"):
        monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", one)
        c = Chain(S, H, HV, K, V, T=T, L=L, dtype=torch.float32, device=device, impl="triton", seed=5)
        rng = torch.Generator().manual_seed(9)
        outs = []
        for _ in range(2 * L // T + 1):
            lens = [int(torch.randint(1, T + 1, (1,), generator=rng)) for _ in range(S)]
            outs.append(c.verify([2, 0, 1], lens)[1].clone())
            c.commit([int(torch.randint(1, n + 1, (1,), generator=rng)) for n in lens])
        runs[one] = (c, outs)
    (c0, o0), (c1, o1) = runs["0"], runs["1"]
    assert c0.flushes > 0 and c0.flushes == c1.flushes
    assert torch.equal(c0.checkpoint, c1.checkpoint)
    for name in ("k", "g", "beta"):
        assert torch.equal(getattr(c0.ring, name).nan_to_num(), getattr(c1.ring, name).nan_to_num()), name
    assert rel_err(c0.ring.u.nan_to_num(), c1.ring.u.nan_to_num()) < 1e-5
    for a, b in zip(o0, o1):
        assert rel_err(a, b) < 1e-5


@pytest.mark.parametrize("one", ["0", "1"], ids=["staged", "one-launch"])
@pytest.mark.parametrize("split", [False, True], ids=["whole-heads", "split-heads"])
@pytest.mark.parametrize("tc", ["0", "1"])
def test_both_paths_of_the_window_dots_match_the_reference(tc, split, one, monkeypatch, device):
    """T=4 (the tensor-core path when on) with history on some rows and a fold on another, fp32; with ``split``
    each head's 32 rows run as two 16-row programs (what a batch of fewer than launch.SPLIT_PER_SM programs per SM
    gets; the CPU has one "SM", so the default split would never run here); staged and in one launch."""
    monkeypatch.setenv("REPLAYSSM_VERIFY_TC", tc)
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", one)
    shape = launch.TileConfig(num_warps=1, rows_per_thread=1, rows_per_program=16) if split else None
    H, HV, K, V, T, L = 2, 4, 32, 32, 4, 8
    c = Chain(4, H, HV, K, V, T=T, L=L, dtype=torch.float32, device=device, impl="reference", seed=11)
    rng = torch.Generator().manual_seed(2)
    for _ in range(3):
        lens = [int(torch.randint(1, T + 1, (1,), generator=rng)) for _ in range(4)]
        c.verify([0, 1, 2, 3], lens)
        c.commit([int(torch.randint(1, n + 1, (1,), generator=rng)) for n in lens])
    c.ring.cursors.flush[1] = 1
    slots, lens = [1, 0, 3, 2], [4, 3, 4, 1]
    x = make_gdn_inputs(lens, H, HV, K, V, dtype=torch.float32, device=device)
    res = {}
    for impl in ("triton", "reference"):
        ck, ring = c.checkpoint.clone(), c.ring.clone()
        out = torch.full_like(x["v"], float("nan"))
        with launch.override(**({"verify": shape} if shape else {})):
            call(gdn_replay_verify, x, checkpoint=ck, ring=ring, slots=slot_tensor(slots, device), out=out, impl=impl)
        res[impl] = (out, ck, ring)
    (o, ck, rg), (o_r, ck_r, rg_r) = res["triton"], res["reference"]
    assert not torch.isnan(o).any()
    assert rel_err(o, o_r) < 1e-5
    assert rel_err(ck, ck_r) < 1e-5
    for name in ("u", "k", "v", "g", "beta"):
        assert rel_err(getattr(rg, name).nan_to_num(), getattr(rg_r, name).nan_to_num()) < 1e-5, name
    assert torch.equal(rg.cursors.pending, rg_r.cursors.pending)


def test_staged_history_that_wraps_the_ring_matches_the_reference(monkeypatch, device):
    """The staging kernel copies the history keys in ring order and gathers their dots back to record order
    (``verify_prep``): histories that run past the ring's end (base + records > L) give the reference's outputs."""
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", "0")
    H, HV, K, V, S, T, L = 2, 4, 32, 32, 2, 1, 8
    runs = {}
    for impl in ("triton", "reference"):
        c = Chain(S, H, HV, K, V, T=T, L=L, dtype=torch.float32, device=device, impl=impl, seed=13)
        outs, wrapped = [], 0
        for _ in range(3 * L):
            cur = c.ring.cursors
            wrapped += int(((cur.base + cur.write_pos > L) & (cur.flush == 0)).sum())
            outs.append(c.verify([1, 0], [1, 1])[1].clone())
            c.commit([1, 1])
        runs[impl] = (outs, wrapped)
    (o_t, wrapped), (o_r, _) = runs["triton"], runs["reference"]
    assert wrapped > 0
    for a, b in zip(o_t, o_r):
        assert rel_err(a, b) < 1e-5
