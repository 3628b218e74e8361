"""Correctness gate run before any timing: both backends in lockstep on the benchmark's own buffers."""

from __future__ import annotations

import torch

from ..ops import commit_snapshots, ring_commit
from .steps import RecurrentStep, ReplayStep


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.float(), ref.float()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def lockstep_check(geo, B, T, nl, x, state0, *, L, dtype, steps=8, seed=0) -> dict:
    """Run ``steps`` verify -> commit steps (random acceptance) through both backends.

    Returns the worst output relative error (replay vs recurrent) and whether every layer's
    committed state was bitwise equal after every step.
    """
    g = torch.Generator(device=state0.device).manual_seed(seed)
    n = torch.ones(B, dtype=torch.int32, device=state0.device)
    rec = RecurrentStep(geo, B, T, nl, x, lambda: n, state0)
    rep = ReplayStep(geo, B, T, nl, x, lambda: n, state0, L=L, dtype=dtype)
    worst, bitwise, nan = 0.0, True, False
    slots = x["slots"]
    for _ in range(steps):
        n.copy_(torch.randint(1, T + 1, (B,), generator=g, device=state0.device, dtype=torch.int32))
        for layer in range(nl):
            o_rec = rec.verify(layer).clone()
            o_rep = rep.verify(layer)
            nan |= bool(torch.isnan(o_rep).any())
            worst = max(worst, rel_err(o_rep, o_rec))
        commit_snapshots(rec.state, rec.snaps, slots, n, validate=False)
        ring_commit(rep.cursors, slots, n, validate=False)
        for layer in range(nl):
            bitwise &= torch.equal(rep.committed(layer), rec.state[layer][slots.long()])
    return {"max_rel_err": worst, "bitwise": bool(bitwise), "nan": nan, "steps": steps}
