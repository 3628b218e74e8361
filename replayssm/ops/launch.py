"""Launch shapes of the state kernels: warps, rows per thread, rows per program.

None of these enter the arithmetic of a row (``_pinned``): the K-split of the tile is fixed, so any
shape here gives bitwise the same states and is chosen for speed alone. The defaults come from the
H200 sweeps recorded in bench/NOTES.md; ``override`` lets a benchmark or a test try others.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ._pinned import tile_layout, tile_rows


@dataclass(frozen=True)
class TileConfig:
    """num_warps per program; rows_per_thread of the state tile; rows_per_program of one head's V rows
    (None: one tile -- the H200 streams best with many one-tile programs, bench/NOTES.md -- except for the
    pipelined verify, which takes a whole head unless the batch is small)."""

    num_warps: int = 4
    rows_per_thread: int = 1
    rows_per_program: int | None = None
    stages: int = 3  # verify only: checkpoint chunks of one program in flight through shared memory (cp.async)
    k_chunk: int = 32  # verify only: columns of the checkpoint per chunk

    def __post_init__(self):
        for name in ("num_warps", "rows_per_thread"):
            x = getattr(self, name)
            if not isinstance(x, int) or x < 1 or x & (x - 1):
                raise ValueError(f"TileConfig.{name} must be a power of two >= 1, got {x!r}")
        if not isinstance(self.k_chunk, int) or self.k_chunk < 8 or self.k_chunk & (self.k_chunk - 1):
            raise ValueError(f"TileConfig.k_chunk must be a power of two >= 8, got {self.k_chunk!r}")
        if self.num_warps > 16:
            raise ValueError(f"TileConfig.num_warps must be <= 16, got {self.num_warps}")


DEFAULTS = {
    # With the pinned tile's 8 K-lanes (4 row-lanes) the fold and the verify hold twice the rows per thread they held
    # with 4 K-lanes, so their blocks keep their 64 rows. The recurrent: 2 warps x 2 rows (16-row programs), the best
    # shape over T = 1, 2, 4, 8 in a sweep on an H200, within 2.5% of SGLang's recurrent kernels at every point
    # (bench/results/2026-12-02-h200/rec_sweep.json).
    "recurrent": TileConfig(num_warps=2, rows_per_thread=2),
    "fold": TileConfig(num_warps=4, rows_per_thread=4),
    # The verify takes whole heads (two 64-row fold blocks a program) at many-wave batches: 64-row programs streamed
    # slower and folded no faster on an H200 (T=4, B=256: non-flush 313.5 -> 350.2 us, fold 42.4 -> 42.1 us a record;
    # bench/results/2026-12-03e-h200/, run 4).
    "verify": TileConfig(num_warps=4, rows_per_thread=4, stages=2, k_chunk=32),
    # gdn_fold_ahead: four programs per head (one 32-row block each) so a small batch's folds spread over the GPU
    "fold_ahead": TileConfig(num_warps=4, rows_per_thread=2, rows_per_program=32),
}
# The verify of a batch too small to fill the GPU (``split_small``: fewer than SPLIT_PER_SM programs per SM) splits
# each head's rows over programs, keeping the default shape; warps are capped so that every thread streams at least
# one row. Two per SM since the 8-lane tile: at B=8 (512 whole-head programs, 3.9 per SM) the split to 64-row programs
# measured no faster at T=4 (29.7 vs 29.3 us) and slower at T=8 (L=32: 49.8 vs 42.0; L=16: 40.6 vs 38.0) on an H200
# (bench/results/2026-12-02b-h200/small_sweep.json); the sweeps behind the split itself: bench/results/2026-12-01-h200/.
SMALL_BATCH_VERIFY = TileConfig(num_warps=4, rows_per_thread=4, stages=2, k_chunk=32)
SPLIT_PER_SM = 2
MIN_SPLIT_ROWS = 32  # the smallest program the split of a small batch makes (one warp streaming a row per thread)
_OVERRIDES: list[dict[str, TileConfig]] = []


@contextmanager
def override(**configs: TileConfig):
    """Run the named kernels ("recurrent", "fold", "verify", "fold_ahead") with other launch shapes (benchmarks,
    tests). An override's warps and rows per thread are taken as given (only a tile larger than a head shrinks to fit
    it); one without ``rows_per_program`` still has a small batch's heads split over programs."""
    bad = set(configs) - set(DEFAULTS)
    if bad:
        raise ValueError(f"unknown kernels {sorted(bad)}; known: {sorted(DEFAULTS)}")
    _OVERRIDES.append(configs)
    try:
        yield
    finally:
        _OVERRIDES.pop()


@dataclass(frozen=True)
class Launch:
    """A resolved launch: the tile layout and block, the rows per program, the grid's V extent."""

    layout: object
    num_warps: int
    rows: int  # rows of one tile block (BV)
    rows_per_program: int  # BVP, a multiple of ``rows``
    programs_per_head: int  # V // BVP
    stages: int  # chunks in flight (verify)
    k_chunk: int  # checkpoint columns per chunk (verify)


def resolve(kernel: str, V: int, programs: int, device: torch.device, *, split_small: bool = False) -> Launch:
    """The launch of ``kernel`` for heads of ``V`` rows when ``programs`` (batch x heads) programs would
    each own a whole head. With ``split_small`` and no explicit ``rows_per_program``, a head's rows are
    spread over several programs when the batch leaves the GPU short of programs."""
    cfg, explicit = DEFAULTS[kernel], False
    for o in reversed(_OVERRIDES):
        if kernel in o:
            cfg, explicit = o[kernel], True
            break
    if split_small and not explicit and programs < SPLIT_PER_SM * sm_count(device):
        cfg = SMALL_BATCH_VERIFY
    warps, rpt = cfg.num_warps, cfg.rows_per_thread
    while tile_rows(warps, rpt) > V and rpt > 1:  # small heads (tests): shrink the tile to fit
        rpt //= 2
    while tile_rows(warps, rpt) > V and warps > 1:
        warps //= 2
    rows = tile_rows(warps, rpt)
    if V % rows:
        raise ValueError(f"V={V} must be a multiple of {rows} rows (a power of two >= 8)")
    bvp = cfg.rows_per_program or (V if split_small else rows)
    if split_small and not cfg.rows_per_program:
        while bvp > max(rows, MIN_SPLIT_ROWS) and programs * (V // bvp) < SPLIT_PER_SM * sm_count(device):
            bvp //= 2
    bvp = max(rows, min(V, bvp))
    if split_small and not explicit:  # the verify streams a row per thread: no more warps than a program has rows
        while warps > 1 and 32 * warps > bvp:
            warps //= 2
        rows = tile_rows(warps, rpt)
    if bvp % rows or V % bvp:
        raise ValueError(f"rows_per_program={bvp} must be a multiple of {rows} dividing V={V}")
    return Launch(tile_layout(warps, rpt), warps, rows, bvp, V // bvp, cfg.stages, cfg.k_chunk)


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of ``device`` (132 on an H200); 1 on the CPU (interpreter)."""
    if device.type != "cuda":
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count
