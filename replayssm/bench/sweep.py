"""Tile sweep of replayssm's kernels (``replayssm bench kernels --sweep``): each tile gated bitwise, then timed."""

from __future__ import annotations

from contextlib import contextmanager

from .backends import OURS, backends_for
from .floor import floor_bytes, fold_rate
from .point import free_memory, gate_all, layers_for, time_ring
from .steps import make_case


def parse_tile(spec: str):
    """ "WARPSxROWS[xSTAGES[xKCHUNK[xROWSPERPROGRAM]]]" -> ``launch.TileConfig`` (warps per program, state rows per
    thread, and for the verify: checkpoint chunks in flight, columns per chunk, rows per program)."""
    from ..ops import launch

    parts = spec.split("x")
    if not 2 <= len(parts) <= 5 or not all(p.isdigit() for p in parts):
        raise ValueError(f"tile {spec!r} is not WARPSxROWS[xSTAGES[xKCHUNK[xROWSPERPROGRAM]]]")
    names = ("num_warps", "rows_per_thread", "stages", "k_chunk", "rows_per_program")
    return launch.TileConfig(**dict(zip(names, (int(p) for p in parts))))


@contextmanager
def tiles(cfg):
    """Run the baseline, the fold and the verify with launch shape ``cfg``. The K-split of the state tile is
    pinned, so every shape gives bitwise the same states; the gate still checks it before any timing."""
    from ..ops import launch

    with launch.override(recurrent=cfg, fold=cfg, verify=cfg):
        yield


def sweep_tiles(cfg, bw: float, specs, timer, T: int = 4, L: int = 16, batches=(8, 256)) -> list[dict]:
    """Time replayssm's steps under other tiles; a tile whose bitwise gate fails is recorded, not timed."""
    out = []
    for spec in specs:
        with tiles(parse_tile(spec)):
            for B in batches:
                layers = layers_for(B, cfg.geo, cfg.min_working_set)
                ours = backends_for(T, {})
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
    """At the largest batch swept, among tiles that passed the gate at every batch: the tile of the fastest
    step under random acceptance (one launch shape serves the baseline, the fold and the verify)."""
    big = max(r["B"] for r in rows)
    broken = {r["tile"] for r in rows if not r["gate"]["passed"]}
    ok = [r for r in rows if r["B"] == big and r["tile"] not in broken and "replay_random_us" in r]
    return min(ok, key=lambda r: r["replay_random_us"])["tile"] if ok else None
