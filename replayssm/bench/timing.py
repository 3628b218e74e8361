"""Timing: CUDA-graph replay on the GPU, eager wall clock on the CPU (smoke runs), and the copy bandwidth."""

from __future__ import annotations

import math
import statistics
import time

import torch

from ..engine.graphs import gc_paused


def copy_bandwidth(device="cuda", nbytes: int = 2 << 30, reps: int = 20) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written."""
    device = torch.device(device)
    if device.type != "cuda":
        src = torch.rand(min(nbytes, 64 << 20) // 4)
        dst = torch.empty_like(src)
        t0 = time.perf_counter()
        for _ in range(3):
            dst.copy_(src)
        return 2 * src.numel() * 4 * 3 / (time.perf_counter() - t0)
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    return 2 * nbytes / statistics.median(times)


def capture(fn, warmup: int = 2) -> torch.cuda.CUDAGraph:
    """Capture ``fn`` (which may mutate state: it is run ``warmup`` times first) into a CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with gc_paused(), torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g


def replays_for(seconds_per_replay: float, target_s: float, most: int = 200) -> int:
    """Back-to-back replays per trial so that one trial lasts about ``target_s``."""
    return max(1, min(most, math.ceil(target_s / max(seconds_per_replay, 1e-9))))


WARMUP_S = 0.2  # seconds of replays before a graph is timed (below)


def time_graph(
    g: torch.cuda.CUDAGraph,
    *,
    replays: int | None = None,
    target_s: float = 0.04,
    trials: int = 3,
    warmup_s: float = WARMUP_S,
):
    """Median over ``trials`` of the mean seconds per replay; each trial is ``replays`` back-to-back
    replays, by default as many as last about ``target_s``.

    The graph is first replayed for about ``warmup_s``. Measured on an H200 (bench/NOTES.md, 2026-12-01 third
    session): a GPU that idled while the host built the step (gates, allocation, capture) starts at low clocks, so
    the first backend timed after a pause paid alone (our recurrent step: 2,200 us timed first in a point, 1,958
    us after a warm-up); and a sustained step reaches the 700 W power cap within about a second, after which the
    clocks dip periodically, so a compute-heavy step is faster in its first ~100 ms than sustained (our pure-flush
    step: 901-907 us at the start, ~935 us between dips, up to ~1,150 us in a dip). The warm-up moves every
    backend towards its sustained speed; the median over ``trials`` keeps single dips out."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def trial(n: int) -> float:
        start.record()
        for _ in range(n):
            g.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / n

    once = trial(1)
    if warmup_s > 0:
        trial(replays_for(once, warmup_s, most=100_000))
    n = replays or replays_for(trial(1), target_s)
    return statistics.median(trial(n) for _ in range(trials))


class GraphTimer:
    """Seconds per call of a step, captured in a CUDA graph and replayed (the step may mutate state): the median of
    ``trials`` trials after a warm-up (``time_graph``)."""

    def __init__(self, target_s: float = 0.04, trials: int = 5):
        self.target_s, self.trials = target_s, trials

    def __call__(self, step) -> float:
        g = capture(step)
        t = time_graph(g, target_s=self.target_s, trials=self.trials)
        del g
        return t


class EagerTimer:
    """Seconds per eager call (CPU smoke runs: exercises the bench, the numbers mean nothing)."""

    def __init__(self, reps: int = 1):
        self.reps = reps

    def __call__(self, step) -> float:
        step()
        t0 = time.perf_counter()
        for _ in range(self.reps):
            step()
        return (time.perf_counter() - t0) / self.reps
