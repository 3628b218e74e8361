"""Memory accounting of a live pool (the planner for a whole model is ``models.memory.plan_memory``)."""

from __future__ import annotations


def _nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def pool_memory_report(pool) -> dict[str, int]:
    """Bytes a ``GDNStatePool`` holds, by category."""
    rep = {
        "checkpoints": _nbytes(pool.checkpoint),
        "rings": 0,
        "snapshots": _nbytes(pool.snapshots),
        "conv": _nbytes(pool.conv_state, pool.conv_scratch),
    }
    if pool.cfg.backend == "replay":
        c, r = pool.cursors, pool.ring_layers
        rep["rings"] = _nbytes(r.k, r.v, r.g, r.beta, r.u, r.folded)
        rep["rings"] += _nbytes(c.write_pos, c.base, c.flush, c.pending, c.epoch)
    rep["total"] = sum(rep.values())
    return rep
