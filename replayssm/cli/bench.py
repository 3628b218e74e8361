"""replayssm bench: kernels (cli/kernels.py), peers (cli/peers.py) and e2e, the end-to-end GPU benchmark."""

from __future__ import annotations

import argparse

from .common import UsageError, add_draft_vocab, integer, number, power_of_two
from .kernels import add_parsers as add_kernel_parsers
from .outputs import add_out, out_dir
from .peers import add_parser as add_peers_parser

PEAK_DEFAULTS = {"capacity_context": 1024, "peak_steps": 8}  # flags only --peak reads (E2EConfig's defaults)


MAX_TOKENS = 1 << 20  # --prompt-len, --capacity-context: a sanity bound (Qwen3.5 takes 262,144 positions)


def add_parser(sub) -> None:
    bench = sub.add_parser(
        "bench",
        help="GPU benchmarks (kernels, e2e) and the SGLang peers' kernel files (peers)",
        description="GPU benchmarks (kernels, e2e) and the SGLang peers' kernel files (peers).",
    )
    bench.add_argument("--debug", action="store_true", help="show tracebacks (or set REPLAYSSM_DEBUG=1)")
    commands = bench.add_subparsers(dest="bench", required=True, metavar="WHAT")
    add_kernel_parsers(commands)
    add_peers_parser(commands)

    from .common import add_command

    e = add_command(commands, "e2e", "end-to-end decoding throughput, TPOT and capacity per backend (GPU)", run_e2e)
    e.add_argument("--model", default="qwen3.5-27b",
                   help="a preset, as in replayssm memory (any case), dense or MoE: its widths, random "
                        "weights")  # fmt: skip
    e.add_argument("--preset", default=None, help=argparse.SUPPRESS)  # the old spelling of --model: refused
    e.add_argument("--layers", type=integer(4), default=None, metavar="N",
                   help="keep only the first N layers (4 to the preset's count; default: all)")  # fmt: skip
    e.add_argument("--concurrency", type=integer(1, 8192), nargs="+", default=[1, 8, 32, 64, 128],
                   help="requests decoding at once, one row each")  # fmt: skip
    e.add_argument("--prompt-len", type=integer(1, MAX_TOKENS), default=128, help="prompt tokens per request")
    e.add_argument("--steps", type=integer(1), default=12, help="timed engine iterations per mode")
    e.add_argument("--window", type=integer(2, 64), default=4, help="window length T (>= 2)")
    e.add_argument("--mean-accepted", type=number(1), default=3.0,
                   help="prescribed mean accepted length per step, in [1, --window] (drafts i.i.d.)")  # fmt: skip
    e.add_argument("--ring", type=power_of_two(2), default=None,
                   help="ring length L: a power of two >= 2 x --window (default: 16, or the least that fits a "
                        "longer window)")  # fmt: skip
    e.add_argument("--capacity-context", type=integer(1, MAX_TOKENS), default=None,
                   help=f"--peak: KV tokens per request (default {PEAK_DEFAULTS['capacity_context']})")  # fmt: skip
    e.add_argument("--capacity-budget-gib", type=number(0, lo_open=True), default=None,
                   help="--peak: the memory budget (default: free memory after the weights - 4 GiB)")  # fmt: skip
    e.add_argument("--modes", nargs="+", choices=["plain", "recurrent", "replay", "replay-mtp"],
                   default=["plain", "recurrent", "replay"],
                   help="replay-mtp: ReplaySSM, drafting with a random MTP head inside the step")  # fmt: skip
    e.add_argument(
        "--peak",
        action="store_true",
        help="also find each mode's best concurrency in the memory budget at --capacity-context tokens",
    )
    e.add_argument("--draft-head", choices=["auto", "model", "fp8"], default=None,
                   help="replay-mtp: the drafter's LM head (default auto: fp8 on Hopper/Ada, else the "
                        "model's)")  # fmt: skip
    add_draft_vocab(e, "replay-mtp: ")
    steps = PEAK_DEFAULTS["peak_steps"]
    e.add_argument("--peak-steps", type=integer(1), default=None,
                   help=f"--peak: timed engine iterations per point (default {steps})")  # fmt: skip
    e.add_argument("--no-phases", action="store_true", help="skip timing the GDN state work alone (faster)")
    e.add_argument("--no-overlap", action="store_true",
                   help="read every step back before launching the next (default: overlapped steps)")  # fmt: skip
    add_out(e, "e2e")


def run_e2e(args) -> int:
    import torch

    from ..models.presets import PRESETS
    from .common import check_ring

    if args.preset is not None:
        raise UsageError(f"--preset {args.preset}: now spelled --model {args.preset}")
    args.ring = check_ring(args.ring, args.window)
    given = [f for f, v in (("--draft-head", args.draft_head), ("--draft-vocab", args.draft_vocab)) if v is not None]
    if given and "replay-mtp" not in args.modes:
        raise UsageError(f"{' '.join(given)}: only for --modes replay-mtp (the MTP drafter); add it or drop "
                         f"{'them' if len(given) > 1 else 'it'}")  # fmt: skip
    peak_only = [
        f"--{n.replace('_', '-')}" for n in (*PEAK_DEFAULTS, "capacity_budget_gib") if getattr(args, n) is not None
    ]
    if peak_only and not args.peak:
        raise UsageError(f"{' '.join(peak_only)}: only with --peak (they set up its search); add --peak or drop "
                         f"{'them' if len(peak_only) > 1 else 'it'}")  # fmt: skip
    for name, default in PEAK_DEFAULTS.items():
        setattr(args, name, default if getattr(args, name) is None else getattr(args, name))
    if args.mean_accepted > args.window:
        raise UsageError(f"--mean-accepted {args.mean_accepted} must be <= --window {args.window}")
    preset = args.model.lower()
    if preset not in PRESETS:
        raise UsageError(f"--model {args.model}: bench e2e takes a preset (random weights): choose from "
                         f"{', '.join(PRESETS)}")  # fmt: skip
    from ..bench.synthetic import preset_config

    try:
        vocab = preset_config(preset, args.layers).vocab_size
    except ValueError as e:
        raise UsageError(f"--model {preset} --layers {args.layers}: {e}") from None
    if args.draft_vocab is not None and args.draft_vocab > vocab:
        raise UsageError(f"--draft-vocab: must be an integer from 1 to {vocab} (the preset's vocabulary), got "
                         f"{args.draft_vocab}")  # fmt: skip
    if not torch.cuda.is_available():
        raise UsageError("replayssm bench e2e needs a CUDA GPU (none here)")
    out_dir(args.out, files=(f"{args.tag}.json", f"{args.tag}.png"))
    from ..bench.e2e import E2EConfig, run_e2e

    cfg = E2EConfig(preset=preset, layers=args.layers, concurrency=tuple(dict.fromkeys(args.concurrency)),  # once each
                    prompt_len=args.prompt_len, steps=args.steps, window=args.window,
                    mean_accepted=args.mean_accepted, ring_len=args.ring, capacity_context=args.capacity_context,
                    capacity_budget_gib=args.capacity_budget_gib, modes=tuple(dict.fromkeys(args.modes)),
                    phases=not args.no_phases,
                    peak=args.peak, peak_steps=args.peak_steps, draft_head=args.draft_head or "auto",
                    draft_vocab=args.draft_vocab, overlap=not args.no_overlap)  # fmt: skip
    run_e2e(cfg, args.out, tag=args.tag)
    return 0
