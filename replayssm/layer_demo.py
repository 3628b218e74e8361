"""One GDN layer under speculative decoding: the recurrent baseline and ReplaySSM side by side.

Both backends see the same random activations and the same random acceptance every step. After
every commit the ReplaySSM committed state (checkpoint + pending history, folded on a copy) is
compared bit for bit with the baseline's accepted snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .ops import Ring, gdn_exact_fold, gdn_recurrent, gdn_replay_verify, ring_commit
from .ops.ring import ring_length_for


@dataclass(frozen=True)
class LayerDemoConfig:
    steps: int = 300
    batch: int = 4
    H: int = 2
    HV: int = 4
    K: int = 32
    V: int = 32
    window: int = 4
    ring_len: int | None = None  # L: a power of two >= 2 * window, or None (ring_length_for(window), as a pool)
    seed: int = 0

    def bytes_needed(self, dtype: torch.dtype) -> int:
        """What ``run_layer_demo`` allocates, roughly: three fp32 states and the snapshots per request, the ring."""
        B, T, HV, V, K = self.batch, self.window, self.HV, self.V, self.K
        L = ring_length_for(T) if self.ring_len is None else self.ring_len
        ring = Ring.allocate(B, self.H, HV, K, V, L=L, window=T, dtype=dtype, device="meta")
        return 4 * B * HV * V * K * (3 + T) + ring.nbytes


@dataclass
class LayerDemoResult:
    steps: int
    mean_accepted: float
    bitwise_steps: int
    worst_rel_err: float
    flush_steps: int
    recurrent_scratch_bytes: int
    replay_ring_bytes: int


def run_layer_demo(cfg: LayerDemoConfig, device: torch.device, dtype: torch.dtype, progress=None) -> LayerDemoResult:
    """``progress(1)`` after every step."""
    g = torch.Generator().manual_seed(cfg.seed)
    B, H, HV, K, V, T = cfg.batch, cfg.H, cfg.HV, cfg.K, cfg.V, cfg.window

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device)

    A_log, dt_bias = rand(HV, scale=0.5) - 1.0, rand(HV, scale=0.5)
    state = rand(B, HV, V, K, scale=0.1)  # the baseline's pool (one slot per request)
    checkpoint = state.clone()
    L = ring_length_for(T) if cfg.ring_len is None else cfg.ring_len  # (Ring.allocate refuses L < 2T)
    ring = Ring.allocate(B, H, HV, K, V, L=L, window=T, dtype=dtype, device=device)
    snapshots = torch.empty(B, T, HV, V, K, device=device)
    slots = torch.randperm(B, generator=g).to(torch.int32).to(device)  # rows map to scrambled slots
    cu = torch.arange(0, B * T + 1, T, dtype=torch.int32, device=device)
    committed = torch.empty(B, HV, V, K, device=device)
    accepted, bitwise, worst, flushes = 0, 0, 0.0, 0
    for _ in range(cfg.steps):
        q, k = rand(B * T, H, K).to(dtype), rand(B * T, H, K).to(dtype)
        v, a, b = rand(B * T, HV, V).to(dtype), rand(B * T, HV).to(dtype), rand(B * T, HV).to(dtype)
        kw = dict(A_log=A_log, dt_bias=dt_bias, slots=slots, cu_seqlens=cu)
        o_base = gdn_recurrent(q, k, v, a, b, state=state, snapshots=snapshots, update_state=False, **kw)
        flushes += int(ring.cursors.flush.any())
        o_replay = gdn_replay_verify(q, k, v, a, b, checkpoint=checkpoint, ring=ring, **kw)
        n = torch.randint(1, T + 1, (B,), generator=g, dtype=torch.int32).to(device)
        state[slots.long()] = snapshots[torch.arange(B, device=device), n.long() - 1]  # baseline commit
        ring_commit(ring, slots, n)  # replay commit: cursors only
        gdn_exact_fold(checkpoint, ring, slots, out=committed)
        bitwise += int(torch.equal(committed, state[slots.long()]))
        err = (o_replay.float() - o_base.float()).norm() / o_base.float().norm()
        worst = max(worst, err.item())
        accepted += int(n.sum())
        if progress is not None:
            progress(1)
    return LayerDemoResult(
        steps=cfg.steps,
        mean_accepted=accepted / (cfg.steps * B),
        bitwise_steps=bitwise,
        worst_rel_err=worst,
        flush_steps=flushes,
        recurrent_scratch_bytes=snapshots.numel() * snapshots.element_size(),
        replay_ring_bytes=ring.nbytes,
    )
