"""Moving committed slots: offload to CPU, restore into new slots, fork.

A replay slot's committed state is its checkpoint *plus* the unfolded ring history, so a snapshot
carries checkpoints, ring records and cursors together (DESIGN §3): nothing pending is dropped
(SGLang issue 38485), and no extra fold is needed, so a restored slot continues bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

_RING = ("ring_k", "ring_v", "ring_g", "ring_beta", "ring_u")
_CURSORS = ("write_pos", "base", "flush")


@dataclass(frozen=True)
class PoolSnapshot:
    """CPU copy of some slots of a pool. Tensors are [num_layers, n, ...] (cursors [n])."""

    geometry: tuple
    state: torch.Tensor
    conv_state: torch.Tensor
    ring: dict[str, torch.Tensor] | None
    cursors: dict[str, torch.Tensor] | None

    @property
    def num_slots(self) -> int:
        return self.state.shape[1]


def _gather(pool, slots: torch.Tensor, to: torch.device):
    idx = slots.long()
    ring = cursors = None
    if pool.cfg.backend == "replay":
        ring = {n: getattr(pool, n)[:, idx].to(to, copy=True) for n in _RING}
        cursors = {n: getattr(pool.cursors, n)[idx].to(to, copy=True) for n in _CURSORS}
    return pool.state[:, idx].to(to, copy=True), pool.conv_state[:, idx].to(to, copy=True), ring, cursors


def _scatter(pool, slots: torch.Tensor, state, conv_state, ring, cursors) -> None:
    idx = slots.long()
    pool.state[:, idx] = state.to(pool.device)
    pool.conv_state[:, idx] = conv_state.to(pool.device)
    if pool.cfg.backend == "replay":
        for n in _RING:
            getattr(pool, n)[:, idx] = ring[n].to(pool.device)
        for n in _CURSORS:
            getattr(pool.cursors, n)[idx] = cursors[n].to(pool.device)
        pool.cursors.window[idx] = 0


def offload(pool, slots: torch.Tensor) -> PoolSnapshot:
    ids = pool._ids(slots, padding=False)
    if pool.cfg.validate:
        pool.tracker.check_idle(ids, "offload")
    return PoolSnapshot(pool.cfg.geometry(), *_gather(pool, slots, torch.device("cpu")))


def restore(pool, snapshot: PoolSnapshot) -> torch.Tensor:
    if not isinstance(snapshot, PoolSnapshot):
        raise TypeError(f"snapshot must be a PoolSnapshot, got {type(snapshot).__name__}")
    if snapshot.geometry != pool.cfg.geometry():
        raise ValueError(
            f"snapshot geometry {snapshot.geometry} does not match this pool's {pool.cfg.geometry()} "
            "(backend, layers, H, HV, K, V, T, L, dtype, u_dtype, conv kernel, conv channels)"
        )
    new = pool.alloc(snapshot.num_slots)
    _scatter(pool, new, snapshot.state, snapshot.conv_state, snapshot.ring, snapshot.cursors)
    return new


def fork(pool, slots: torch.Tensor) -> torch.Tensor:
    ids = pool._ids(slots, padding=False)
    if pool.cfg.validate:
        pool.tracker.check_idle(ids, "fork")
    data = _gather(pool, slots, pool.device)
    new = pool.alloc(slots.shape[0])
    _scatter(pool, new, *data)
    return new
