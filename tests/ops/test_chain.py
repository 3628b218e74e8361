"""Long verify -> commit chains: ReplaySSM's committed state stays bitwise the baseline's."""

import pytest
import torch

from tests.helpers.chain import Chain
from tests.helpers.gdn64 import rel_err

# Window outputs of the two backends are computed by different formulas (recurrence vs the
# (I + A)^-1 transform) and, in fp16, both rounded to fp16 and built from fp16-stored update
# vectors u, so they agree to a few fp16 ulps; in fp32 to float32 round-off.
OUT_BOUND = {torch.float32: 1e-4, torch.float16: 5e-3}


def run_chain(*, group, T, L, dtype, device, impl, steps, num_slots=4, seed=0, fold_phase=False):
    H, K, V = 2, 16, 16
    c = Chain(num_slots, H, H * group, K, V, T=T, L=L, dtype=dtype, device=device, impl=impl, seed=seed,
              fold_phase=fold_phase)  # fmt: skip
    rng = torch.Generator().manual_seed(seed + 1)
    worst, wraps = 0.0, 0
    for _ in range(steps):
        perm = torch.randperm(num_slots, generator=rng).tolist()
        slots = perm[: int(torch.randint(1, num_slots + 1, (1,), generator=rng))]
        if torch.rand(1, generator=rng) < 0.3:
            slots.insert(int(torch.randint(0, len(slots) + 1, (1,), generator=rng)), -1)
        lens = [int(torch.randint(1, T + 1, (1,), generator=rng)) for _ in slots]
        cur = c.ring.cursors
        wraps += sum(int(cur.base[s] + cur.write_pos[s]) + n > L for s, n in zip(slots, lens) if s >= 0)
        outside = [s for s in range(num_slots) if s not in slots]
        before = (c.checkpoint[outside].clone(), c.ring.u[outside].clone(), c.ring.k[outside].clone())
        o_base, o_replay = c.verify(slots, lens)
        assert not torch.isnan(o_replay).any()
        worst = max(worst, rel_err(o_replay, o_base))
        assert torch.equal(c.checkpoint[outside], before[0])
        assert torch.equal(torch.nan_to_num(c.ring.u[outside]), torch.nan_to_num(before[1]))
        assert torch.equal(torch.nan_to_num(c.ring.k[outside]), torch.nan_to_num(before[2]))
        c.commit([int(torch.randint(1, n + 1, (1,), generator=rng)) for n in lens])
        live = list(range(num_slots))
        committed = c.committed_replay(live)
        for i, s in enumerate(live):
            assert torch.equal(committed[i], c.state[s]), f"slot {s} diverged from the baseline"
    assert worst < OUT_BOUND[dtype], worst
    return c, wraps


@pytest.mark.slow
@pytest.mark.parametrize(
    "group,T,L,dtype",
    [(2, 4, 8, torch.float16), (2, 2, 8, torch.float32), (1, 1, 4, torch.float32)],
    ids=["group2-T4-L8(L=2T)-fp16", "group2-T2-L8-fp32", "group1-T1-L4-decode"],
)
def test_kernel_chain_bitwise(device, group, T, L, dtype):
    """The kernels in the interpreter (CPU) or on the GPU: their logic (cursors, folds, wrap-arounds, padding,
    fold markers) against the baseline; tests/gpu runs 1,000-step chains at real shapes."""
    c, wraps = run_chain(group=group, T=T, L=L, dtype=dtype, device=device, impl="triton", steps=24, num_slots=3)
    assert c.flushes >= 4 and wraps >= 2  # the chain crossed several folds and ring wrap-arounds


@pytest.mark.parametrize("group", [1, 2, 4])
@pytest.mark.parametrize("T,L", [(1, 8), (2, 8), (4, 8), (4, 16)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_reference_chain_bitwise(group, T, L, dtype):
    seed = group * 7 + T
    c, wraps = run_chain(group=group, T=T, L=L, dtype=dtype, device="cpu", impl="reference", steps=80, seed=seed)
    assert c.flushes >= 8 and wraps >= 4


@pytest.mark.parametrize("impl", ["triton", "reference"])
def test_decode_chain_with_the_fold_phase_bitwise(device, impl):
    """Plain decode (window 1) with ``ring_commit(fold_phase=True)``: rows fold early, each in its own phase, and the
    committed state is still torch.equal to the baseline's after every step (ops/cursors.py)."""
    on_cpu_kernels = impl == "triton" and device == "cpu"
    steps = 16 if on_cpu_kernels else 40
    c, wraps = run_chain(group=1, T=1, L=8, dtype=torch.float32, device=device if impl == "triton" else "cpu",
                         impl=impl, steps=steps, num_slots=4, seed=11, fold_phase=True)  # fmt: skip
    assert c.early_flushes >= 2 and c.flushes > c.early_flushes and wraps >= 1
