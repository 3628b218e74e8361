"""The bytes a speculative step must move, and how often the protocol folds.

Floor of one GDN layer-step for B requests (docs/design.md, "the memory floor"): every step reads each row's checkpoint
once (``B * HV*V*K*4`` bytes); a fold additionally writes it once, amortised over the protocol's
flush interval. Ring records, activations and outputs are not counted (they are < 10% here), so
the floor is a lower bound that no backend can beat.
"""

from __future__ import annotations

import random

from ..ops.ring import check_ring_geometry

MODES = ("full", "random")


def protocol_fold_rate(T: int, L: int, accepted, steps: int = 20000) -> float:
    """Folds per step of one slot under the ring protocol (docs/design.md, "the ring protocol": a step that finds
    ``flush`` set folds, and a commit sets it once ``write_pos + 2T > L``) when step i accepts ``accepted()``
    tokens."""
    write_pos, flush, folds = 0, False, 0
    for _ in range(steps):
        n = accepted()
        folds += flush
        write_pos = n if flush else write_pos + n
        flush = write_pos + 2 * T > L
    return folds / steps


def fold_rate(T: int, L: int, mode: str, steps: int = 20000, seed: int = 0) -> float:
    """``protocol_fold_rate`` with full (``mode="full"``: T every step) or uniform (``"random"``: 1..T) acceptance."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    check_ring_geometry(L, T)  # T >= 1, L a power of two >= 2T: the protocol's own bounds
    rng = random.Random(seed)
    return protocol_fold_rate(T, L, (lambda: T) if mode == "full" else (lambda: rng.randint(1, T)), steps)


def floor_bytes(B: int, state_bytes: int, rate: float) -> float:
    """Checkpoint read every step + checkpoint write at ``rate`` folds per step."""
    return B * state_bytes * (1.0 + rate)


def nonflush_read_bytes(B: int, geo, T: int, L: int, act_bytes: int) -> float:
    """The least a pure non-flush verify step reads (the "read floor" of a non-flush step): every row's checkpoint
    and the ``L - 2T`` history records such a step reconstructs from (``steps.RingStep.set_cursors(False)``): one
    update vector ``u`` per value head (activation dtype) and one normalised key per key head (fp32)."""
    hist = max(L - 2 * T, 0)
    return B * (geo.state_bytes + hist * (geo.HV * geo.V * act_bytes + geo.H * geo.K * 4))
