"""``replayssm bench kernels``: per-layer step time of every GDN state backend, side by side, on one GPU.

For each window T and batch B, in one process and after a correctness gate:
recurrent baseline (verify + snapshot per token + accepted-snapshot copy), ReplaySSM (verify +
cursor commit; the protocol evolving under full and random acceptance, plus pure non-flush and
pure flush steps), SGLang 0.5.16's two paths (loaded from its wheel), plain decode, and the
floor (checkpoint bytes over the measured copy bandwidth). Steps are captured in CUDA graphs
over ``nl`` layers with their own states (working set >= 256 MiB, far above L2) and reported per
layer.
"""

from __future__ import annotations

import gc
import math
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from ..ops import GDNShape
from .check import lockstep_check
from .floor import floor_bytes, fold_rate
from .steps import RecurrentDecode, RecurrentStep, ReplayStep, acceptance, make_inputs
from .timing import capture, time_graph


@dataclass(frozen=True)
class KernelBenchConfig:
    geo: GDNShape = field(default_factory=lambda: GDNShape(16, 64, 128, 128))
    windows: tuple[int, ...] = (2, 4, 8)
    batches: tuple[int, ...] = (1, 8, 32, 64, 128, 256)
    L: int = 16
    decode_L: tuple[int, ...] = (16, 32)
    dtype: torch.dtype = torch.bfloat16
    min_working_set: int = 256 << 20
    peer_wheel: str | None = None


def layers_for(B: int, geo: GDNShape, min_bytes: int) -> int:
    return max(2, min(32, math.ceil(min_bytes / (B * geo.state_bytes))))


def _time(step, nl: int) -> float:
    """Microseconds per layer-step of a captured step."""
    g = capture(step)
    t = time_graph(g) / nl * 1e6
    del g
    return t


def _free():
    gc.collect()
    torch.cuda.empty_cache()


def _replay_fixed(geo, B, T, nl, x, state0, cfg, L, *, flush: bool, peer=None):
    """A ReplaySSM step frozen at the protocol's worst case: history of L-2T records (non-flush) or a
    fold of L-T records (flush). Rings are first filled by running the real protocol."""
    accept = acceptance(B, T, "full")
    if peer is not None:
        from .peer_steps import PeerReplayStep

        step = PeerReplayStep(peer, geo, B, T, nl, x, accept, state0, L=L, dtype=cfg.dtype)
    else:
        step = ReplayStep(geo, B, T, nl, x, accept, state0, L=L, dtype=cfg.dtype)
    for _ in range(L):
        step()
    step.commit = False
    step.set_cursors(L - T if flush else L - 2 * T, flush)
    return _time(step, nl)


def bench_window(cfg: KernelBenchConfig, T: int, B: int, bw: float, peer) -> dict:
    geo, L = cfg.geo, cfg.L
    nl = layers_for(B, geo, cfg.min_working_set)
    x = make_inputs(geo, B, T, cfg.dtype)
    state0 = torch.randn(nl, B, geo.HV, geo.V, geo.K, device="cuda") * 0.05
    row = {"T": T, "B": B, "layers": nl, "L": L}
    row["check"] = lockstep_check(geo, B, T, nl, x, state0, L=L, dtype=cfg.dtype)
    row["recurrent_us"] = _time(RecurrentStep(geo, B, T, nl, x, acceptance(B, T, "random"), state0), nl)
    _free()
    for mode in ("full", "random"):
        step = ReplayStep(geo, B, T, nl, x, acceptance(B, T, mode), state0, L=L, dtype=cfg.dtype)
        row[f"replay_{mode}_us"] = _time(step, nl)
        row[f"fold_rate_{mode}"] = fold_rate(T, L, mode)
        del step
    row["replay_nonflush_us"] = _replay_fixed(geo, B, T, nl, x, state0, cfg, L, flush=False)
    row["replay_flush_us"] = _replay_fixed(geo, B, T, nl, x, state0, cfg, L, flush=True)
    _free()
    if peer is not None:
        from .peer_steps import PeerRecurrentStep, PeerReplayStep

        row["sglang_recurrent_us"] = _time(
            PeerRecurrentStep(peer, geo, B, T, nl, x, acceptance(B, T, "random"), state0, dtype=cfg.dtype), nl
        )
        _free()
        row["sglang_replay_random_us"] = _time(
            PeerReplayStep(peer, geo, B, T, nl, x, acceptance(B, T, "random"), state0, L=L, dtype=cfg.dtype), nl
        )
        row["sglang_nonflush_us"] = _replay_fixed(geo, B, T, nl, x, state0, cfg, L, flush=False, peer=peer)
        row["sglang_flush_us"] = _replay_fixed(geo, B, T, nl, x, state0, cfg, L, flush=True, peer=peer)
        _free()
    for mode in ("full", "random"):
        row[f"floor_{mode}_us"] = floor_bytes(B, geo.state_bytes, row[f"fold_rate_{mode}"]) / bw * 1e6
    return row


def bench_decode(cfg: KernelBenchConfig, B: int, bw: float) -> dict:
    geo = cfg.geo
    nl = layers_for(B, geo, cfg.min_working_set)
    x = make_inputs(geo, B, 1, cfg.dtype)
    state0 = torch.randn(nl, B, geo.HV, geo.V, geo.K, device="cuda") * 0.05
    row = {"T": 1, "B": B, "layers": nl}
    row["recurrent_decode_us"] = _time(RecurrentDecode(geo, B, 1, nl, x, None, state0), nl)
    row["recurrent_floor_us"] = 2 * B * geo.state_bytes / bw * 1e6
    for L in cfg.decode_L:
        row[f"check_L{L}"] = lockstep_check(geo, B, 1, nl, x, state0, L=L, dtype=cfg.dtype)
        step = ReplayStep(geo, B, 1, nl, x, acceptance(B, 1, "full"), state0, L=L, dtype=cfg.dtype)
        row[f"replay_decode_L{L}_us"] = _time(step, nl)
        row[f"floor_L{L}_us"] = floor_bytes(B, geo.state_bytes, fold_rate(1, L, "full")) / bw * 1e6
        del step
        _free()
    return row


def parse_tile(spec: str):
    """ "BVFxNW:BVxBKxSTAGES" -> ((BV_FOLD, num_warps), (BV, BK, num_stages))."""
    fold, _, verify = spec.partition(":")
    f = tuple(int(x) for x in fold.split("x"))
    v = tuple(int(x) for x in verify.split("x")) if verify else None
    if len(f) != 2 or (v is not None and len(v) != 4):
        raise ValueError(f"tile {spec!r} is not BVFxNW[:BVxBKxSTAGESxWARPS]")
    return f, v


@contextmanager
def tiles(fold, verify):
    """Run every kernel with ``fold[1]`` warps per program (the tile's K-split is pinned: rows only)."""
    from ..ops import launch

    cfg = launch.TileConfig(num_warps=fold[1])
    with launch.override(recurrent=cfg, fold=cfg, verify=cfg):
        yield


def sweep_tiles(cfg: KernelBenchConfig, bw: float, specs, T=4, batches=(8, 256)) -> list[dict]:
    """Time other tiles; each is bitwise-checked (baseline vs fold) before its times count."""
    out = []
    geo = cfg.geo
    for spec in specs:
        fold, verify = parse_tile(spec)
        with tiles(fold, verify):
            for B in batches:
                nl = layers_for(B, geo, cfg.min_working_set)
                x = make_inputs(geo, B, T, cfg.dtype)
                state0 = torch.randn(nl, B, geo.HV, geo.V, geo.K, device="cuda") * 0.05
                chk = lockstep_check(geo, B, T, nl, x, state0, L=cfg.L, dtype=cfg.dtype, steps=6)
                row = {"tile": spec, "T": T, "B": B, "bitwise": chk["bitwise"], "max_rel_err": chk["max_rel_err"]}
                row["recurrent_us"] = _time(RecurrentStep(geo, B, T, nl, x, acceptance(B, T, "random"), state0), nl)
                _free()
                step = ReplayStep(geo, B, T, nl, x, acceptance(B, T, "random"), state0, L=cfg.L, dtype=cfg.dtype)
                row["replay_random_us"] = _time(step, nl)
                del step
                row["replay_nonflush_us"] = _replay_fixed(geo, B, T, nl, x, state0, cfg, cfg.L, flush=False)
                row["replay_flush_us"] = _replay_fixed(geo, B, T, nl, x, state0, cfg, cfg.L, flush=True)
                row["floor_random_us"] = floor_bytes(B, geo.state_bytes, fold_rate(T, cfg.L, "random")) / bw * 1e6
                _free()
                out.append(row)
                print(f"  tile {spec} B={B}: recurrent {row['recurrent_us']:.1f}, replay {row['replay_random_us']:.1f}"
                      f" (nonflush {row['replay_nonflush_us']:.1f}, flush {row['replay_flush_us']:.1f}) us, floor "
                      f"{row['floor_random_us']:.1f}, bitwise {row['bitwise']}, err {row['max_rel_err']:.1e}",
                      flush=True)  # fmt: skip
    return out


def best_tile(rows: list[dict]):
    """At the largest batch swept: the fold tile of the fastest pure-flush step among tiles that stayed
    bitwise at every batch, combined with the non-flush tile of the fastest pure non-flush step."""
    big = max(r["B"] for r in rows)
    broken = {r["tile"] for r in rows if not r["bitwise"]}
    ok = [r for r in rows if r["B"] == big and r["tile"] not in broken]
    if not ok:
        return None
    fold = min(ok, key=lambda r: r["replay_flush_us"])["tile"].partition(":")[0]
    verify = min((r for r in rows if r["B"] == big), key=lambda r: r["replay_nonflush_us"])["tile"].partition(":")[2]
    return f"{fold}:{verify}" if verify else fold


def run_kernel_bench(cfg: KernelBenchConfig, out_dir, *, sweep=None, tag: str = "kernels", tile=None) -> dict:
    """Run everything; ``sweep`` (tile specs) is timed first, and with ``tile="best"`` the main run uses
    the best bitwise tile of the sweep (``tile`` may also be a spec)."""
    from pathlib import Path

    from .report import environment, header
    from .timing import copy_bandwidth

    out_dir = Path(out_dir)
    env = environment()
    print(header(env), flush=True)
    bw = copy_bandwidth()
    print(f"device copy bandwidth (read + write): {bw / 1e12:.2f} TB/s", flush=True)
    peer = None
    if cfg.peer_wheel:
        from .sglang_wheel import load_sglang_kernels

        peer = load_sglang_kernels(cfg.peer_wheel)
    payload = {"env": env, "bandwidth": bw, "config": repr(cfg), "verify": [], "decode": [], "sweep": []}
    if sweep:
        payload["sweep"] = sweep_tiles(cfg, bw, sweep)
        if tile == "best":
            tile = best_tile(payload["sweep"])
            print(f"best bitwise tile: {tile}", flush=True)
    if tile and tile != "best":
        fold, verify = parse_tile(tile)
        with tiles(fold, verify):
            payload["tile"] = tile
            return _main_runs(cfg, out_dir, tag, payload, bw, peer, env)
    payload["tile"] = "default"
    return _main_runs(cfg, out_dir, tag, payload, bw, peer, env)


def _main_runs(cfg, out_dir, tag, payload, bw, peer, env):
    from .report import format_table, header, plot_lines, write_json

    for T in cfg.windows:
        for B in cfg.batches:
            row = bench_window(cfg, T, B, bw, peer)
            for key in [k for k in row if k.endswith("_us") and not k.startswith("floor")]:
                row[key.replace("_us", "_x_floor")] = row[key] / row["floor_random_us"]
            row["speedup_vs_recurrent"] = row["recurrent_us"] / row["replay_random_us"]
            if peer is not None:
                row["speedup_vs_sglang"] = row["sglang_replay_random_us"] / row["replay_random_us"]
            payload["verify"].append(row)
            c = row["check"]
            print(f"T={T} B={B}: recurrent {row['recurrent_us']:.1f} us, replay {row['replay_random_us']:.1f} us "
                  f"(floor {row['floor_random_us']:.1f}), sglang {row.get('sglang_replay_random_us', float('nan')):.1f}"
                  f" | bitwise {c['bitwise']} err {c['max_rel_err']:.1e}", flush=True)  # fmt: skip
            write_json(out_dir / f"{tag}.json", payload)
    for B in cfg.batches:
        payload["decode"].append(bench_decode(cfg, B, bw))
        write_json(out_dir / f"{tag}.json", payload)
    cols = [("T", "T", "d"), ("B", "B", "d"), ("recurrent_us", "recur us", ".1f"),
            ("sglang_recurrent_us", "sgl-rec us", ".1f"), ("sglang_replay_random_us", "sgl-rep us", ".1f"),
            ("replay_random_us", "replay us", ".1f"), ("replay_nonflush_us", "nonflush", ".1f"),
            ("replay_flush_us", "flush", ".1f"), ("floor_random_us", "floor us", ".1f"),
            ("replay_random_x_floor", "x floor", ".2f"), ("speedup_vs_recurrent", "vs recur", ".2f"),
            ("speedup_vs_sglang", "vs sglang", ".2f")]  # fmt: skip
    dcols = [("B", "B", "d"), ("recurrent_decode_us", "recur us", ".1f")] + [
        (f"replay_decode_L{L}_us", f"replay L{L}", ".1f") for L in cfg.decode_L
    ]
    table = format_table(payload["verify"], cols) + "\n\nplain decode (T=1)\n" + format_table(payload["decode"], dcols)
    payload["table"] = table
    write_json(out_dir / f"{tag}.json", payload)
    series = [("recurrent_us", "recurrent (ours)"), ("sglang_recurrent_us", "recurrent (SGLang 0.5.16)"),
              ("sglang_replay_random_us", "ReplaySSM (SGLang 0.5.16)"), ("replay_random_us", "ReplaySSM (replayssm)"),
              ("floor_random_us", "floor")]  # fmt: skip
    panels = [(f"T={T}, L={cfg.L}, random acceptance", [r for r in payload["verify"] if r["T"] == T], series)
              for T in cfg.windows]  # fmt: skip
    plot_lines(out_dir / f"{tag}.png", panels, "B", "us per layer-step", header(env))
    print(table, flush=True)
    return payload
