"""``replayssm bench kernels``: per-layer step time of every GDN state backend, side by side, on one GPU.

For every window T (1 = plain decode), ring length L and batch B: gate every backend (``check``),
refuse to time the ones that fail, time the others (``point``): replayssm's recurrent baseline and
ReplaySSM, and per selected SGLang release its recurrent verify and ReplaySSM verify (at T=1 its
packed recurrent decode and its ring decode), loaded from the extracted kernel files
(``bench/peers``). Steps are captured in CUDA graphs over ``layers`` layers with their own states
(working set >= 256 MiB) and reported per layer, beside the floor (checkpoint read + write at the
protocol's fold rate, over the measured copy bandwidth). JSON and PNG are rewritten as points
complete, so a run cut short keeps what it measured.

Run time (H200, default grid: 4 windows x 2 rings x 6 batches = 48 points, two releases): 12 timed
graphs per point (~0.1-0.3 s each with the adaptive replay count; ring steps add L eager fill steps),
one lockstep gate per point (~0.1-1 s), plus Triton compiles (0.3-3 s per kernel variant, some 150
variants: SGLang specialises its commit kernels on the batch and window): about 4-6 minutes cold,
2-3 minutes with a warm ``TRITON_CACHE_DIR``. ``--windows``, ``--rings``, ``--batches``, ``--peers``
run subsets; ``--max-seconds`` stops starting new points after that long.
"""

from __future__ import annotations

import functools
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..ops import GDNShape
from ..progress import progress
from .backends import OURS, backends_for, peer_impl
from .config_checks import count, counts, number
from .kernel_report import derive, plot_panels, point_line, table_columns
from .point import bench_point
from .report import environment, format_table, header, plot_lines, write_json
from .timing import EagerTimer, GraphTimer, copy_bandwidth


@dataclass(frozen=True)
class KernelBenchConfig:
    geo: GDNShape = field(default_factory=lambda: GDNShape(16, 64, 128, 128))
    windows: tuple[int, ...] = (1, 2, 4, 8)
    rings: tuple[int, ...] = (16, 32)
    batches: tuple[int, ...] = (1, 8, 32, 64, 128, 256)
    dtype: torch.dtype = torch.bfloat16
    min_working_set: int = 256 << 20
    peers: tuple[str, ...] = ("0.5.16", "0.5.23")
    peers_root: str | None = None
    device: str = "cuda"
    target_ms: float = 40.0
    max_seconds: float | None = None

    def __post_init__(self):
        own = "KernelBenchConfig"
        if not isinstance(self.geo, GDNShape):
            raise TypeError(f"{own}.geo must be a GDNShape, got {self.geo!r}")
        counts(own, "windows", self.windows)
        counts(own, "rings", self.rings, 2)
        counts(own, "batches", self.batches)
        if any(L & (L - 1) for L in self.rings):
            raise ValueError(f"{own}.rings must be powers of two, got {self.rings}")
        if not any(L >= 2 * T for L in self.rings for T in self.windows):
            raise ValueError(f"{own}: no ring of {self.rings} is at least twice a window of {self.windows}")
        if self.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise ValueError(f"{own}.dtype must be float32, float16 or bfloat16, got {self.dtype!r}")
        count(own, "min_working_set", self.min_working_set, 0)
        number(own, "target_ms", self.target_ms)
        number(own, "max_seconds", self.max_seconds, positive=False, optional=True)
        if self.max_seconds is not None and self.max_seconds < 0:
            raise ValueError(f"{own}.max_seconds must be >= 0 or None, got {self.max_seconds!r}")

    def grid(self) -> list[tuple[int, int, int]]:
        """(T, L, B) of every point, skipping rings shorter than 2T."""
        return [(T, L, B) for T in self.windows for L in self.rings if L >= 2 * T for B in self.batches]

    def dropped(self) -> list[tuple[int, int]]:
        """(T, L) pairs of the windows and rings asked for that ``grid`` skips: a ring holds at least 2T records."""
        return [(T, L) for T in self.windows for L in self.rings if L < 2 * T]


def load_peers(cfg: KernelBenchConfig) -> dict:
    """{version: kernels} of the selected releases (raises PeerKernelsMissing with a one-line message)."""
    from .peers.sglang import load_release

    return {v: load_release(v, cfg.peers_root) for v in cfg.peers}


def run_kernel_bench(cfg: KernelBenchConfig, out_dir, *, tag: str = "kernels", peers: dict | None = None,
                     timer=None, bandwidth: float | None = None, backends=None) -> dict:  # fmt: skip
    """Run the grid; ``peers`` ({version: kernels}), ``timer``, ``bandwidth`` and ``backends`` (T -> the
    backends of a point) default to the loaded releases, CUDA-graph timing (eager on the CPU), the
    measured copy bandwidth and ``backends_for``."""
    t_start = time.perf_counter()
    out_dir = Path(out_dir)
    peers = load_peers(cfg) if peers is None else peers
    if backends is None:
        backends = functools.partial(backends_for, peers=peers)
    if timer is None:
        timer = GraphTimer(cfg.target_ms / 1e3) if torch.device(cfg.device).type == "cuda" else EagerTimer()
    env = environment()
    env["sglang"] = {v: getattr(k, "folder", None) for v, k in peers.items()}
    bw = copy_bandwidth(cfg.device) if bandwidth is None else bandwidth
    impls = [OURS] + [peer_impl(v) for v in peers]
    grid = cfg.grid()
    print(header(env) + " | sglang " + (", ".join(peers) or "none"), flush=True)
    print(f"copy bandwidth (read + write): {bw / 1e12:.3f} TB/s | {len(grid)} points, geometry {cfg.geo}, "
          f"{str(cfg.dtype).removeprefix('torch.')}", flush=True)  # fmt: skip
    payload = {"env": env, "bandwidth": bw, "config": asdict(cfg), "impls": impls, "points": [], "skipped": [],
               "dropped": [{"T": T, "L": L} for T, L in cfg.dropped()], "complete": False}  # fmt: skip
    if cfg.dropped():
        pairs = ", ".join(f"T={T} L={L}" for T, L in cfg.dropped())
        print(f"note: not timed: {pairs} (a ring holds at least 2T records; the JSON lists them as dropped)",
              flush=True)  # fmt: skip
    with progress(len(grid), "kernels", unit="point") as bar:
        for i, (T, L, B) in enumerate(grid):
            if cfg.max_seconds is not None and time.perf_counter() - t_start > cfg.max_seconds:
                payload["skipped"] = [{"T": t, "L": ring, "B": b} for t, ring, b in grid[i:]]
                bar.set_postfix_str(f"--max-seconds: {len(grid) - i} points not started", refresh=True)
                break  # (the bar stays at the points timed)
            bar.set_postfix_str(f"T={T} L={L} B={B}")
            row = bench_point(cfg, T, B, L, bw, backends(T), timer)
            payload["points"].append(derive(row, impls))
            bar.write(point_line(row, impls))
            bar.update()
            write_json(out_dir / f"{tag}.json", payload)
            if B == cfg.batches[-1]:
                _plot(out_dir / f"{tag}.png", payload["points"], impls, env)
    payload["table"] = format_table(payload["points"], table_columns(impls))
    payload["wall_s"] = time.perf_counter() - t_start
    payload["complete"] = True  # (written after every point: an interrupted run leaves its points, marked false)
    write_json(out_dir / f"{tag}.json", payload)
    if payload["points"]:
        _plot(out_dir / f"{tag}.png", payload["points"], impls, env)
    print(payload["table"], flush=True)
    png = out_dir / f"{tag}.png"
    print(f"wrote {out_dir / f'{tag}.json'}" + (f" and {png}" if payload["points"] and png.is_file() else ""))
    if cfg.device == "cpu":  # (a fold cost, a difference of two such times, can even come out negative)
        print("cpu: a smoke run of the bench code; its times mean nothing", flush=True)
    if payload["skipped"]:
        print(f"--max-seconds: {len(payload['skipped'])} points not started", flush=True)
    return payload


def _plot(path: Path, points: list[dict], impls: list[str], env: dict) -> None:
    plot_lines(path, plot_panels(points, impls), "B", "us per layer-step", header(env), ncols=4)
