"""One point of the kernel bench: gate every backend, then time the ones that passed.

Keys of the returned row (times in us per layer-step; ``impl`` is "replayssm" or "sglang-<version>"):
``{impl}/recurrent_us``; ``{impl}/replay_random_us`` (the real protocol under random acceptance; at
T=1 every step accepts its token), ``{impl}/replay_nonflush_us`` and ``{impl}/replay_flush_us``
(steps frozen at the protocol's worst case, ``steps.RingStep.set_cursors``),
``{impl}/fold_us_per_record`` = (flush - non-flush) / records folded per row; ``nonflush_read_floor_us``
(what a pure non-flush step must read, at the measured bandwidth: ``floor.nonflush_read_bytes``); ``floor_us`` and
``fold_rate``; ``gates`` {label: verdict}; ``refused`` [labels whose gate failed, not timed];
``errors`` {label: what a backend raised while it was timed}.
"""

from __future__ import annotations

import gc
import math
import time

import torch

from ..ops import GDNShape
from .backends import Backend
from .check import lockstep, verdict
from .floor import floor_bytes, fold_rate, nonflush_read_bytes
from .steps import StepCase, acceptance, make_case

GATE_LAYERS = 2  # enough to check per-layer addressing (0.5.23 folds all layers in one launch)


def layers_for(B: int, geo: GDNShape, min_bytes: int) -> int:
    """Layers per step so that the checkpoints alone exceed ``min_bytes`` (far above L2), 2..32."""
    return max(2, min(32, math.ceil(min_bytes / (B * geo.state_bytes))))


def free_memory(collect: bool = False) -> None:
    """Hand cached GPU blocks back between large allocations; ``collect`` also runs the (slow, ~0.2 s)
    cycle collector, once per point."""
    if collect:
        gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def gate_all(case: StepCase, backends: list[Backend]) -> dict[str, dict]:
    """Verdicts of every backend but the reference (the first), from one lockstep run."""
    reference, others = backends[0], backends[1:]
    stats = lockstep(case, reference.build, {b.label: b.build for b in others})
    gates = {reference.label: {"kind": "reference", "passed": True}}
    gates.update({b.label: verdict(stats[b.label], b.gate) for b in others})
    return gates


def time_ring(backend: Backend, case: StepCase, timer, layers: int) -> dict[str, float]:
    """The random-acceptance step, then the frozen non-flush and flush steps and the fold cost per record."""
    out = {"replay_random_us": timer(backend.build(case)) / layers * 1e6}
    free_memory()
    full = case.with_accept(acceptance(case.B, case.T, "full", case.device))
    for flush in (False, True):
        step = backend.build(full)
        for _ in range(case.L):  # fill the rings with real records
            step()
        records = step.set_cursors(flush)
        out["replay_flush_us" if flush else "replay_nonflush_us"] = timer(step) / layers * 1e6
        del step
        free_memory()
    out["fold_us_per_record"] = fold_cost(out["replay_flush_us"], out["replay_nonflush_us"], records)
    return out


def fold_cost(flush_us: float, nonflush_us: float, records: int) -> float:
    """(pure-flush step - pure-non-flush step) / records folded per row."""
    if records < 1:
        raise ValueError(f"a flush step folds at least one record per row, got {records}")
    return (flush_us - nonflush_us) / records


def bench_point(cfg, T: int, B: int, L: int, bw: float, backends: list[Backend], timer) -> dict:
    """Gate, then time, every backend at window ``T``, batch ``B``, ring ``L``."""
    geo, dev = cfg.geo, cfg.device
    t0 = time.perf_counter()
    layers = layers_for(B, geo, cfg.min_working_set)
    row = {"T": T, "B": B, "L": L, "layers": layers, "refused": [], "errors": {}}
    gate_case = make_case(geo, B, T, L, min(layers, GATE_LAYERS), cfg.dtype, seed=1, device=dev)
    row["gates"] = gate_all(gate_case, backends)
    del gate_case
    free_memory()
    case = make_case(geo, B, T, L, layers, cfg.dtype, accept="random" if T > 1 else "full", device=dev)
    for b in backends:
        if not row["gates"][b.label]["passed"]:
            row["refused"].append(b.label)
            continue
        try:
            if b.kind == "recurrent":
                row[f"{b.impl}/recurrent_us"] = timer(b.build(case)) / layers * 1e6
            else:
                row.update({f"{b.impl}/{k}": v for k, v in time_ring(b, case, timer, layers).items()})
        except Exception as e:  # keep the run going: the other backends' times still count
            row["errors"][b.label] = f"{type(e).__name__}: {e}"
        free_memory()
    del case
    free_memory(collect=True)
    row["fold_rate"] = fold_rate(T, L, "random" if T > 1 else "full")
    row["floor_us"] = floor_bytes(B, geo.state_bytes, row["fold_rate"]) / bw * 1e6
    act_bytes = torch.empty((), dtype=cfg.dtype).element_size()
    row["nonflush_read_floor_us"] = nonflush_read_bytes(B, geo, T, L, act_bytes) / bw * 1e6
    row["wall_s"] = time.perf_counter() - t0
    return row
