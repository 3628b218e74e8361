"""Moving committed slots: offload to CPU, restore into new slots, fork.

A replay slot's committed state is its checkpoint *plus* the unfolded ring history, so a parked copy
carries checkpoints, ring records and cursors together (docs/design.md, "the ring protocol"): nothing pending
is dropped (a copy of the checkpoint alone would lose the unfolded history), and no extra fold is needed, so a
restored slot continues bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..ops import Ring
from ..ops._validate import byte_spans
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

    Tensors are [num_layers, n, ...] (cursors [n]); ``config`` is the pool they came from. Construction
    checks every tensor against ``config`` (shape, dtype, the ring cursors' invariants), so parked slots
    that ``restore`` would broadcast or misread cannot be built. Fold markers and epochs are not carried:
    an idle slot has no fold of its own step in flight, and the slot it is restored into has its own.
    """

    config: PoolConfig
    checkpoint: torch.Tensor
    conv_state: torch.Tensor
    ring: dict[str, torch.Tensor] | None
    cursors: dict[str, torch.Tensor] | None

    def __post_init__(self):
        self.check()

    def check(self) -> None:
        """The construction checks, again (``restore`` runs them: the tensors and dicts of a ParkedSlots are mutable,
        and parked slots changed after construction must not restore what the checks would refuse)."""
        cfg = self.config
        if not isinstance(cfg, PoolConfig):
            raise TypeError(f"ParkedSlots.config must be a PoolConfig, got {type(cfg).__name__}")
        if not isinstance(self.checkpoint, torch.Tensor) or self.checkpoint.dim() != 5:
            raise ValueError(f"ParkedSlots.checkpoint must be a [num_layers, n, HV, V, K] tensor, got "
                             f"{_desc(self.checkpoint)}")  # fmt: skip
        n = self.checkpoint.shape[1]
        if n < 1:
            raise ValueError("ParkedSlots must hold at least one slot")
        NL = cfg.num_layers
        _expect("checkpoint", self.checkpoint, (NL, n, cfg.HV, cfg.V, cfg.K), torch.float32)
        _expect("conv_state", self.conv_state, (NL, n, cfg.conv_kernel - 1, cfg.channels), cfg.dtype)
        if cfg.backend == "recurrent":
            if self.ring is not None or self.cursors is not None:
                raise ValueError("ParkedSlots of a recurrent pool carry no ring or cursors")
            return
        for what, got, names in (("ring", self.ring, _RING), ("cursors", self.cursors, _CURSORS)):
            if not isinstance(got, dict) or set(got) != set(names):
                keys = sorted(got) if isinstance(got, dict) else type(got).__name__
                raise ValueError(f"ParkedSlots.{what} must be a dict of {list(names)}, got {keys}")
        for name, t in _ring_template(cfg).items():
            _expect(f"ring[{name!r}]", self.ring[name], (NL, n, *t.shape[1:]), t.dtype)
        for name in _CURSORS:
            _expect(f"cursors[{name!r}]", self.cursors[name], (n,), torch.int32)
        L, T = cfg.ring_len, cfg.window
        wp, base, flush = (self.cursors[k].cpu().long() for k in _CURSORS)
        full = (wp + 2 * T > L).long()  # flush is required; at window 1 it may also be set early (fold phase)
        early = (flush == 1) & (wp > 0) if T == 1 else torch.zeros_like(wp, dtype=torch.bool)
        bad = (wp < 0) | (wp > L - T) | (base < 0) | (base >= L) | ((flush != full) & ~early)
        bad = bad.nonzero()
        if bad.numel():
            i = int(bad[0, 0])
            raise ValueError(f"ParkedSlots.cursors of parked slot {i} are not a ring state of L={L}, window={T}: "
                             f"write_pos={int(wp[i])}, base={int(base[i])}, flush={int(flush[i])}")  # fmt: skip

    @property
    def num_slots(self) -> int:
        return self.checkpoint.shape[1]


def _desc(t) -> str:
    return f"{tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__


def _expect(name: str, t, shape: tuple, dtype: torch.dtype) -> None:
    if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(shape) or t.dtype != dtype:
        raise ValueError(f"ParkedSlots.{name} must be a {tuple(shape)} {dtype} tensor, got {_desc(t)}")
    if t.is_meta:
        raise ValueError(f"ParkedSlots.{name} is on the meta device: it holds no state to restore")


def _ring_template(cfg: PoolConfig) -> dict[str, torch.Tensor]:
    """One slot's ring records as the ops allocate them (on the meta device: shapes and dtypes only)."""
    one = Ring.allocate(1, cfg.H, cfg.HV, cfg.K, cfg.V, L=cfg.ring_len, window=cfg.window, dtype=cfg.dtype,
                        u_dtype=cfg.u_dtype, device="meta")  # fmt: skip
    return {name: getattr(one, name.removeprefix("ring_")) for name in _RING}


def _gather(pool, slots: torch.Tensor, to: torch.device):
    idx = slots.long()
    ring = cursors = None
    if pool.cfg.backend == "replay":
        ring = {n: getattr(pool.ring_layers, n.removeprefix("ring_"))[:, idx].to(to, copy=True) for n in _RING}
        cursors = {n: getattr(pool.cursors, n)[idx].to(to, copy=True) for n in _CURSORS}
    return pool.checkpoint[:, idx].to(to, copy=True), pool.conv_state[:, idx].to(to, copy=True), ring, cursors


def _to(device: torch.device, checkpoint, conv_state, ring, cursors):
    """The parked tensors on ``device``, each copied there before any slot is taken (a copy that fails, fails
    first)."""
    ring = None if ring is None else {n: t.to(device) for n, t in ring.items()}
    cursors = None if cursors is None else {n: t.to(device) for n, t in cursors.items()}
    return checkpoint.to(device), conv_state.to(device), ring, cursors


def copy_in(t: torch.Tensor, device, *buffers: torch.Tensor) -> torch.Tensor:
    """``t`` on ``device``, copied first where it shares memory with one of the pool's ``buffers`` (a view of the
    pool's own state: writing it in place would read what the write already changed)."""
    t = t.to(device)
    span = byte_spans([("t", t)])
    if span and any(lo < span[0][1] and span[0][0] < hi for lo, hi, *_ in byte_spans(("buffer", b) for b in buffers)):
        t = t.clone()
    return t


@torch.no_grad()  # the pool keeps values, never a caller's autograd graph
def _scatter(pool, slots: torch.Tensor, checkpoint, conv_state, ring, cursors) -> None:
    idx = slots.long()
    pool.checkpoint[:, idx] = checkpoint.to(pool.device)
    pool.conv_state[:, idx] = conv_state.to(pool.device)
    if pool.cfg.backend == "replay":
        for n in _RING:
            getattr(pool.ring_layers, n.removeprefix("ring_"))[:, idx] = ring[n].to(pool.device)
        for n in _CURSORS:
            getattr(pool.cursors, n)[idx] = cursors[n].to(pool.device)
        pool.cursors.pending[idx] = 0


def offload(pool, slots: torch.Tensor) -> ParkedSlots:
    ids = pool._ids(slots, padding=False)
    if pool.cfg.validate:
        pool.tracker.check_idle(ids, "offload")
    return ParkedSlots(pool.cfg, *_gather(pool, slots, torch.device("cpu")))


def check_restore(pool, parked: ParkedSlots, room: bool = True) -> None:
    """Everything ``restore`` checks before it allocates: the type, the parked slots themselves (again), the layout,
    and (``room``) room in the pool."""
    if not isinstance(parked, ParkedSlots):
        raise TypeError(f"parked must be a ParkedSlots, got {type(parked).__name__}")
    parked.check()
    theirs, ours = _layout(parked.config), _layout(pool.cfg)
    differ = [f"{k}={theirs[k]} (this pool: {ours[k]})" for k in _LAYOUT if theirs[k] != ours[k]]
    if differ:
        raise ValueError(f"parked slots come from a pool of another layout: {', '.join(differ)}")
    if room:
        pool.tracker.check_alloc(parked.num_slots)


def restore(pool, parked: ParkedSlots) -> torch.Tensor:
    check_restore(pool, parked)
    data = _to(pool.device, parked.checkpoint, parked.conv_state, parked.ring, parked.cursors)
    return _into_new_slots(pool, parked.num_slots, data)


def fork(pool, slots: torch.Tensor) -> torch.Tensor:
    ids = pool._ids(slots, padding=False)
    if not ids and slots.shape[0] == 0:
        raise ValueError("slots must name at least one slot to fork, got none")
    if pool.cfg.validate:
        pool.tracker.check_idle(ids, "fork")
    data = _gather(pool, slots, pool.device)
    return _into_new_slots(pool, slots.shape[0], data)


def _into_new_slots(pool, n: int, data) -> torch.Tensor:
    """Allocate ``n`` slots and write ``data`` into them; if the writes fail part-way (a failed copy, an interrupt),
    the slots go back to the free list in the order they came, so that nothing leaks and a retry gets the same ids
    (what the failed writes left in them is a free slot's content, which ``alloc`` resets)."""
    new = pool.alloc(n)
    try:
        _scatter(pool, new, *data)
    except BaseException:
        pool.tracker.unalloc(new.tolist())
        raise
    return new
