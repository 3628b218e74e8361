"""Real-shape checks on the GPU (Qwen3.5-122B TP1 GDN geometry, bf16 activations, fp32 state)."""

import pytest
import torch

from .chain import Chain, call
from .gdn64 import rel_err

pytestmark = pytest.mark.gpu


def test_real_shape_chain_bitwise_bf16():
    c = Chain(24, 16, 64, 128, 128, T=4, L=16, dtype=torch.bfloat16, device="cuda", impl="triton", seed=1)
    rng = torch.Generator().manual_seed(2)
    worst = 0.0
    for _ in range(40):
        slots = torch.randperm(24, generator=rng)[:16].tolist()
        slots[3] = -1
        lens = torch.randint(1, 5, (16,), generator=rng).tolist()
        o_base, o = c.verify(slots, lens)
        worst = max(worst, rel_err(o, o_base))
        c.commit([int(torch.randint(1, n + 1, (1,), generator=rng)) for n in lens])
        live = [s for s in slots if s >= 0]
        assert torch.equal(c.committed_replay(live), c.state[live])
    assert c.flushes > 20
    assert worst < 2e-2  # bf16 outputs and update vectors


def test_kernel_matches_reference_real_shapes():
    from replayssm.ops import gdn_replay_verify, gdn_replay_verify_reference

    c = Chain(8, 16, 64, 128, 128, T=4, L=16, dtype=torch.bfloat16, device="cuda", impl="triton", seed=3)
    for _ in range(4):
        c.verify(list(range(8)), [4] * 8)
        c.commit([2] * 8)
    c.verify(list(range(8)), [3] * 8)
    x = c.last_inputs
    c.ring.cursors.pending.zero_()
    outs = []
    for fn in (gdn_replay_verify, gdn_replay_verify_reference):
        ck = c.checkpoint.clone()
        outs.append(call(fn, x, checkpoint=ck, ring=c.ring.clone(), slots=c.slots))
    assert rel_err(outs[0], outs[1]) < 5e-3  # bf16 outputs and update vectors; every product in fp32
