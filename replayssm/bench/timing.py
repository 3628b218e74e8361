"""GPU timing helpers: CUDA-graph replay timing and the measured device copy bandwidth."""

from __future__ import annotations

import statistics

import torch


def copy_bandwidth(nbytes: int = 2 << 30, reps: int = 20) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
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
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g


def time_graph(g: torch.cuda.CUDAGraph, *, replays: int = 30, trials: int = 5) -> float:
    """Median over ``trials`` of the mean seconds per replay (each trial ``replays`` back-to-back replays)."""
    for _ in range(3):
        g.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(trials):
        start.record()
        for _ in range(replays):
            g.replay()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / 1e3 / replays)
    return statistics.median(out)
