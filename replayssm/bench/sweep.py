"""Tile sweep of replayssm's kernels (``replayssm bench kernels --sweep``): each tile gated bitwise, then timed."""

from __future__ import annotations

from contextlib import contextmanager

from .backends import OURS, backends_for
from .floor import floor_bytes, fold_rate
from .point import free_memory, gate_all, layers_for, time_ring
from .steps import make_case


def parse_tile(spec: str):
    """ "BVFxNW:BVxBKxSTAGESxWARPS" -> ((BV_FOLD, num_warps), (BV, BK, num_stages, num_warps))."""
    fold, _, verify = spec.partition(":")
    f = tuple(int(x) for x in fold.split("x"))
    v = tuple(int(x) for x in verify.split("x")) if verify else None
    if len(f) != 2 or (v is not None and len(v) != 4):
        raise ValueError(f"tile {spec!r} is not BVFxNW[:BVxBKxSTAGESxWARPS]")
    return f, v


@contextmanager
def tiles(fold, verify):
    """Run every kernel with the given tiles (fold tile shared by baseline, fold and verify)."""
    from ..ops._common import launch_config_override
    from ..ops.verify import verify_config_override

    with launch_config_override(*fold):
        if verify is None:
            yield
        else:
            with verify_config_override(*verify):
                yield


def sweep_tiles(cfg, bw: float, specs, timer, T: int = 4, L: int = 16, batches=(8, 256)) -> list[dict]:
    """Time replayssm's steps under other tiles; a tile whose bitwise gate fails is recorded, not timed."""
    out = []
    for spec in specs:
        with tiles(*parse_tile(spec)):
            for B in batches:
                layers = layers_for(B, cfg.geo, cfg.min_working_set)
                ours = backends_for(T, {}, dot_precision=cfg.dot_precision)
                gate_case = make_case(cfg.geo, B, T, L, 2, cfg.dtype, seed=1, device=cfg.device)
                gate = gate_all(gate_case, ours)[f"{OURS}/replay"]
                row = {"tile": spec, "T": T, "L": L, "B": B, "gate": gate}
                if gate["passed"]:
                    case = make_case(cfg.geo, B, T, L, layers, cfg.dtype, device=cfg.device)
                    row["recurrent_us"] = timer(ours[0].build(case)) / layers * 1e6
                    row.update(time_ring(ours[1], case, timer, layers))
                row["floor_us"] = floor_bytes(B, cfg.geo.state_bytes, fold_rate(T, L, "random")) / bw * 1e6
                free_memory()
                out.append(row)
                print(f"  tile {spec} B={B}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items() if k.endswith("us"))
                      + f" | gate {'passed' if gate['passed'] else gate['reason']}", flush=True)  # fmt: skip
    return out


def best_tile(rows: list[dict]):
    """At the largest batch swept: the fold tile of the fastest pure-flush step among tiles that passed
    the gate at every batch, combined with the non-flush tile of the fastest pure non-flush step."""
    big = max(r["B"] for r in rows)
    broken = {r["tile"] for r in rows if not r["gate"]["passed"]}
    ok = [r for r in rows if r["B"] == big and r["tile"] not in broken]
    if not ok:
        return None
    fold = min(ok, key=lambda r: r["replay_flush_us"])["tile"].partition(":")[0]
    verify = min(ok, key=lambda r: r["replay_nonflush_us"])["tile"].partition(":")[2]
    return f"{fold}:{verify}" if verify else fold
