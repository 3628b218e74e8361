"""replayssm bench kernels and replayssm bench peers."""

from __future__ import annotations

import os
import sys

from .._env import interpreter_requested
from .common import UsageError, add_command, integer, number, power_of_two
from .outputs import RESULTS_DIR, out_dir, stem
from .peers import ROOT_HELP, not_a_folder

MAX_RING = 1024  # each point first runs L steps to fill its rings: 65,536 of them is hours even at smoke shapes
PEER_MIN_HEAD_DIM = 32  # below it SGLang's kernels tile a tl.dot operand under 16 ("BKT=8 must be >=16")
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def add_parsers(bench) -> None:
    """Add ``kernels`` to the ``replayssm bench`` subparsers."""
    k = add_command(bench, "kernels", "per-layer step time of every backend and SGLang peer vs the memory floor",
                    cmd_kernels)  # fmt: skip
    for name, default, what in (("--H", 16, "GDN key heads"), ("--HV", 64, "GDN value heads, a multiple of --H"),
                                ("--K", 128, "key head dim, a power of two >= 16"),
                                ("--V", 128, "value head dim, a power of two >= 16")):  # fmt: skip
        k.add_argument(name, type=integer(1, 4096), default=default, help=what)
    k.add_argument("--windows", type=integer(1, 64), nargs="+", default=[1, 2, 4, 8],
                   help="window lengths T (1 = plain decode)")  # fmt: skip
    k.add_argument("--rings", type=power_of_two(2, MAX_RING), nargs="+", default=[16, 32],
                   help=f"ring lengths L, powers of two up to {MAX_RING} (those < 2T are dropped; each point first "
                        "fills its ring: L steps)")  # fmt: skip
    k.add_argument("--batches", type=integer(1, 65536), nargs="+", default=[1, 8, 32, 64, 128, 256],
                   help="batch sizes B (requests per step; a repeated value is timed once)")  # fmt: skip
    k.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="activations (default bf16; fp32 on cpu)")
    k.add_argument("--peers", nargs="+", default=["0.5.16", "0.5.23"], help="SGLang releases to time, or 'none'")
    k.add_argument("--peers-dir", default=None, metavar="DIR",
                   help=f"folder holding sglang-<version>/ (default {ROOT_HELP})")  # fmt: skip
    k.add_argument(
        "--device",
        default="cuda",
        choices=["cuda", "cpu"],
        help="cpu: a smoke run of the bench code (Triton interpreter for the peers; tiny --H --HV --K --V)",
    )
    k.add_argument("--target-ms", type=number(0, lo_open=True), default=40.0,
                   help="length of one timing trial (the median of five trials per step)")  # fmt: skip
    k.add_argument("--max-seconds", type=number(0, lo_open=True), default=None,
                   help="start no new point after this many seconds (default: no limit)")  # fmt: skip
    k.add_argument(
        "--sweep",
        nargs="+",
        default=None,
        help="(GPU) replayssm launch shapes to time first: WARPSxROWS[xSTAGES[xKCHUNK[xROWSPERPROGRAM]]] "
        "(e.g. 4x1x2x16)",
    )
    k.add_argument("--tile", default=None, help="tile for the main run: a spec, or 'best' (best bitwise of the sweep)")
    k.add_argument("--out", default=RESULTS_DIR, help=f"folder for the JSON and PNG (default ./{RESULTS_DIR})")
    k.add_argument("--tag", type=stem, default="kernels", help="file name stem of the outputs (no '/')")


def _shape(args):
    from ..ops import GDNShape

    for flag, d in (("--K", args.K), ("--V", args.V)):
        if d < 16 or d & (d - 1):
            raise UsageError(f"{flag}: must be a power of two >= 16 (the kernels' head dims), got {d}")
    if args.HV % args.H:
        raise UsageError(f"--HV {args.HV} must be a multiple of --H {args.H} (each key head serves HV/H value heads)")
    try:
        return GDNShape(args.H, args.HV, args.K, args.V)
    except ValueError as e:
        raise UsageError(f"--H/--HV/--K/--V: {e}") from None


def _check_grid(args) -> None:
    """At least one point: a ring of at least 2T for some window T."""
    if not any(L >= 2 * T for T in args.windows for L in args.rings):
        need = 1 << (2 * min(args.windows) - 1).bit_length()
        raise UsageError(f"--windows {' '.join(map(str, args.windows))} --rings {' '.join(map(str, args.rings))}: "
                         f"no ring is at least 2 x a window, so there is nothing to time: add --rings {need} or "
                         f"a window of at most {max(args.rings) // 2}")  # fmt: skip


def _config(args):
    import torch

    from ..bench.kernels import KernelBenchConfig

    dtype = getattr(torch, DTYPES[args.dtype or ("fp32" if args.device == "cpu" else "bf16")])
    peers = () if args.peers == ["none"] else tuple(dict.fromkeys(args.peers))
    return KernelBenchConfig(
        geo=_shape(args), windows=tuple(dict.fromkeys(args.windows)), rings=tuple(dict.fromkeys(args.rings)),
        batches=tuple(dict.fromkeys(args.batches)), dtype=dtype, peers=peers,
        peers_root=args.peers_dir, device=args.device, target_ms=args.target_ms, max_seconds=args.max_seconds,
        min_working_set=(256 << 20) if args.device == "cuda" else 0,
    )  # fmt: skip


def cmd_kernels(args) -> int:
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA GPU here (--device cpu runs a smoke test; its times mean nothing)")
    if args.device == "cpu":
        if args.dtype == "bf16" and _interpreted(args):
            raise UsageError("--dtype bf16: Triton's interpreter, which runs the SGLang peers' kernels on the cpu "
                             "(and replayssm's with REPLAYSSM_IMPL=triton), computes bf16 wrongly; use fp16 or fp32, "
                             "or --peers none")  # fmt: skip
        if not os.environ.get("TRITON_INTERPRET"):  # unset or empty: on, before the peers' kernel files are loaded
            os.environ["TRITON_INTERPRET"] = "1"
        if not interpreter_requested():
            raise UsageError(f"TRITON_INTERPRET={os.environ['TRITON_INTERPRET']}: --device cpu runs the peers' kernels "
                             "in Triton's interpreter; unset it or set it to 1")  # fmt: skip
    _check_tiles(args)
    if args.device == "cpu" and (args.sweep or args.tile):
        raise UsageError(f"{'--sweep' if args.sweep else '--tile'}: times launch shapes in CUDA graphs; needs "
                         "--device cuda")  # fmt: skip
    _check_grid(args)
    cfg = _config(args)
    from ..bench.kernels import load_peers, run_kernel_bench
    from ..bench.peers.sglang import RELEASES, PeerKernelsError

    if "none" in args.peers and len(args.peers) > 1:
        raise UsageError(f"--peers: 'none' stands alone (no peer), got {' '.join(args.peers)}")
    if args.peers_dir is not None and not args.peers_dir.strip():
        raise UsageError("--peers-dir: give a folder, got an empty name")
    if args.peers_dir is not None and not cfg.peers:
        raise UsageError(f"--peers-dir {args.peers_dir}: not used with --peers none; drop it")
    if args.peers_dir is not None and not_a_folder(args.peers_dir):
        raise UsageError(f"--peers-dir {args.peers_dir}: a file, not a folder (give the folder bench peers extracted "
                         "into)")  # fmt: skip
    unknown = [v for v in cfg.peers if v not in RELEASES]
    if unknown:
        raise UsageError(f"--peers: no peer for {', '.join(unknown)}; known: {', '.join(RELEASES)} or 'none'")
    if cfg.peers and min(args.K, args.V) < PEER_MIN_HEAD_DIM:
        raise UsageError(f"--K {args.K} --V {args.V}: the SGLang peers' kernels need head dims >= "
                         f"{PEER_MIN_HEAD_DIM} (their tl.dot tiles); raise them or pass --peers none")  # fmt: skip
    env = os.environ.get("REPLAYSSM_PEERS") if args.peers_dir is None else None
    where = "$REPLAYSSM_PEERS" if env else "--peers-dir"  # the one the user set: the error names it
    if env and cfg.peers and not_a_folder(env):
        raise UsageError(f"$REPLAYSSM_PEERS {env}: a file, not a folder (give the folder bench peers extracted into)")
    try:
        peers = load_peers(cfg)
    except PeerKernelsError as e:
        raise UsageError(f"{where}: {e}") from None
    out_dir(args.out, files=(f"{args.tag}.json", f"{args.tag}.png") + ((f"{args.tag}_sweep.json",) if args.sweep
                                                                     else ()))  # fmt: skip
    _check_memory(cfg)
    if args.device == "cpu" and args.HV * args.K * args.V > 4 * 32 * 32:  # after every check: a note, not an error
        what = "the Triton interpreter" if _interpreted(args) else "the PyTorch references"
        print(f"replayssm bench kernels: note: --device cpu at --HV {args.HV} --K {args.K} --V {args.V} runs "
              f"{what} at real widths (hours for the default grid); a smoke run takes tiny ones: "
              "--H 2 --HV 4 --K 16 --V 16 (--K 32 --V 32 with peers)", file=sys.stderr)  # fmt: skip
    if args.sweep is None and args.tile in (None, "best"):
        payload = run_kernel_bench(cfg, args.out, tag=args.tag, peers=peers)
    else:
        payload = _with_tiles(cfg, args, peers)
    if not payload["points"]:
        why = f"--max-seconds {args.max_seconds} ran out before the first point" if payload["skipped"] else "no point"
        print(f"replayssm bench kernels: nothing was timed ({why})", file=sys.stderr)
        return 1
    failed = [label for row in payload["points"] for label in [*row["refused"], *row.get("errors", {})]]
    return 1 if failed else 0


def _interpreted(args) -> bool:
    """Whether a --device cpu run puts kernels in Triton's interpreter: the SGLang peers', and replayssm's own with
    ``REPLAYSSM_IMPL=triton`` (otherwise replayssm's ops run as their PyTorch references on CPU tensors)."""
    return args.peers != ["none"] or os.environ.get("REPLAYSSM_IMPL") == "triton"


def _check_memory(cfg) -> None:
    """The largest point's states fit the device: every point holds at least its layers' states, the baseline's
    copy and T snapshots (``layers_for`` layers of B requests), before any backend's own buffers."""
    import torch

    from ..bench.point import layers_for
    from ..fit import too_big

    need, at = 0, None
    for T, _L, B in cfg.grid():
        n = layers_for(B, cfg.geo, cfg.min_working_set) * B * cfg.geo.state_bytes * (T + 2)
        if n > need:
            need, at = n, (T, B)
    big = too_big(need, torch.device(cfg.device))
    if big:
        raise UsageError(f"--batches {at[1]} (--windows {at[0]}) at --H {cfg.geo.H} --HV {cfg.geo.HV} --K "
                         f"{cfg.geo.K} --V {cfg.geo.V}: its states {big}; lower --batches or the heads")  # fmt: skip


def _check_tiles(args) -> None:
    from ..bench.sweep import parse_tile

    flags = [("--sweep", spec) for spec in args.sweep or []]
    flags += [("--tile", args.tile)] if args.tile not in (None, "best") else []
    for flag, spec in flags:
        try:
            parse_tile(spec)
        except ValueError as e:
            raise UsageError(f"{flag} {spec}: {e} (e.g. 2x2x2)") from None
    if args.tile == "best" and not args.sweep:
        raise UsageError("--tile best: needs --sweep with the shapes to choose from")


def _with_tiles(cfg, args, peers) -> dict:
    from pathlib import Path

    from ..bench.kernels import run_kernel_bench
    from ..bench.report import write_json
    from ..bench.sweep import best_tile, parse_tile, sweep_tiles, tiles
    from ..bench.timing import GraphTimer, copy_bandwidth

    tile, swept = args.tile, []
    if args.sweep:
        swept = sweep_tiles(cfg, copy_bandwidth(cfg.device), args.sweep, GraphTimer(cfg.target_ms / 1e3),
                            batches=tuple(cfg.batches))  # fmt: skip
        write_json(Path(args.out) / f"{args.tag}_sweep.json", {"sweep": swept})
        if tile == "best":
            tile = best_tile(swept)
            print(f"best bitwise tile: {tile}", flush=True)
    if not tile or tile == "best":
        return run_kernel_bench(cfg, args.out, tag=args.tag, peers=peers)
    with tiles(parse_tile(tile)):
        payload = run_kernel_bench(cfg, args.out, tag=args.tag, peers=peers)
    payload["tile"] = tile
    return payload
