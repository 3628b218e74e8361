"""Moving committed slots: offload to CPU, restore into new slots, fork.

A replay slot's committed state is its checkpoint *plus* the unfolded ring history, so a parked copy
carries checkpoints, ring records and cursors together (docs/design.md, "the ring protocol"): nothing pending
is dropped (SGLang issue 38485), and no extra fold is needed, so a restored slot continues bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import PoolConfig

_RING = ("ring_k", "ring_v", "ring_g", "ring_beta", "ring_u")
_CURSORS = ("write_pos", "base", "flush")


# What a pool's layout is made of: parked slots restore only into a pool that agrees on all of these.
_LAYOUT = ("backend", "num_layers", "H", "HV", "K", "V", "window", "ring_len", "dtype", "u_dtype", "conv_kernel",
           "channels")  # fmt: skip


def _layout(cfg: PoolConfig) -> dict:
    out = {name: getattr(cfg, name) for name in _LAYOUT}
    out["u_dtype"] = cfg.u_dtype or cfg.dtype
    if cfg.backend == "recurrent":
        out["ring_len"] = None  # no ring
    return out


@dataclass(frozen=True)
class ParkedSlots:
    """CPU copy of some slots of a pool (what ``offload`` returns and ``restore`` takes).

    Tensors are [num_layers, n, ...] (cursors [n]); ``config`` is the pool they came from.
    """

    config: PoolConfig
    checkpoint: torch.Tensor
    conv_state: torch.Tensor
    ring: dict[str, torch.Tensor] | None
    cursors: dict[str, torch.Tensor] | None

    @property
    def num_slots(self) -> int:
        return self.checkpoint.shape[1]


def _gather(pool, slots: torch.Tensor, to: torch.device):
    idx = slots.long()
    ring = cursors = None
    if pool.cfg.backend == "replay":
        ring = {n: getattr(pool, n)[:, idx].to(to, copy=True) for n in _RING}
        cursors = {n: getattr(pool.cursors, n)[idx].to(to, copy=True) for n in _CURSORS}
    return pool.checkpoint[:, idx].to(to, copy=True), pool.conv_state[:, idx].to(to, copy=True), ring, cursors


def _scatter(pool, slots: torch.Tensor, checkpoint, conv_state, ring, cursors) -> None:
    idx = slots.long()
    pool.checkpoint[:, idx] = checkpoint.to(pool.device)
    pool.conv_state[:, idx] = conv_state.to(pool.device)
    if pool.cfg.backend == "replay":
        for n in _RING:
            getattr(pool, n)[:, idx] = ring[n].to(pool.device)
        for n in _CURSORS:
            getattr(pool.cursors, n)[idx] = cursors[n].to(pool.device)
        pool.cursors.pending[idx] = 0


def offload(pool, slots: torch.Tensor) -> ParkedSlots:
    ids = pool._ids(slots, padding=False)
    if pool.cfg.validate:
        pool.tracker.check_idle(ids, "offload")
    return ParkedSlots(pool.cfg, *_gather(pool, slots, torch.device("cpu")))


def restore(pool, parked: ParkedSlots) -> torch.Tensor:
    if not isinstance(parked, ParkedSlots):
        raise TypeError(f"parked must be a ParkedSlots, got {type(parked).__name__}")
    theirs, ours = _layout(parked.config), _layout(pool.cfg)
    differ = [f"{k}={theirs[k]} (this pool: {ours[k]})" for k in _LAYOUT if theirs[k] != ours[k]]
    if differ:
        raise ValueError(f"parked slots come from a pool of another layout: {', '.join(differ)}")
    new = pool.alloc(parked.num_slots)
    _scatter(pool, new, parked.checkpoint, parked.conv_state, parked.ring, parked.cursors)
    return new


def fork(pool, slots: torch.Tensor) -> torch.Tensor:
    ids = pool._ids(slots, padding=False)
    if pool.cfg.validate:
        pool.tracker.check_idle(ids, "fork")
    data = _gather(pool, slots, pool.device)
    new = pool.alloc(slots.shape[0])
    _scatter(pool, new, *data)
    return new
