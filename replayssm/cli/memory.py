"""replayssm memory: per-request GDN state bytes of both backends, and how many requests fit."""

from __future__ import annotations

from .._io import write_text
from .common import UsageError, add_command, check_ring, integer, note_shadowed, number, power_of_two
from .outputs import out_file

MAX_CONTEXT = 1 << 24  # tokens: a sanity bound, far above the context length of any published config


def add_parser(sub) -> None:
    m = add_command(sub, "memory", "per-request GDN state bytes of both backends, and how many requests fit", run)
    m.add_argument("--model", required=True,
                   help="a preset (qwen3.5-122b-a10b, qwen3-next-80b-a3b, ...; any case), 'tiny' (the embedded "
                        "model), a model folder or its config.json")  # fmt: skip
    m.add_argument("--tp", type=integer(1, 1024), default=1, help="tensor-parallel size; must divide the GDN heads")
    m.add_argument("--window", type=integer(1, 64), default=4, help="window length T (last accepted token + drafts)")
    m.add_argument("--ring", type=power_of_two(2), default=None,
                   help="ring length L: a power of two >= 2 x --window (default: 16, or the least that fits a "
                        "longer window)")  # fmt: skip
    m.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16", help="activation dtype")
    m.add_argument("--budget-gib", type=number(0, 1 << 20, lo_open=True), default=40.0,
                   help="GiB for request state on one GPU (> 0, at most 2^20)")  # fmt: skip
    m.add_argument("--context", type=integer(0, MAX_CONTEXT), default=0,
                   help=f"also count this many tokens of full-attention KV cache per request (0 to {MAX_CONTEXT}, "
                        "and at most the model's max_position_embeddings when its config.json gives it)")  # fmt: skip
    m.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="FILE",
        help="the plan as JSON instead of the table: printed (no FILE, or -), or written to FILE (as demo --json FILE)",
    )


def load_config(text: str):
    """A preset name (case-insensitive), 'tiny', a model folder, or a config.json path -> (name, ModelConfig)."""
    from pathlib import Path

    from ..models.config import ModelConfig
    from ..models.presets import PRESETS, preset

    if text.lower() in PRESETS:
        note_shadowed(text)
        return text.lower(), preset(text.lower())
    if text.lower() == "tiny":  # the embedded model, as for generate and drift (a folder named tiny is ./tiny)
        note_shadowed(text)
        from ..tiny import TINY_MODEL

        return "tiny", ModelConfig.from_file(Path(TINY_MODEL))
    if not text.strip():
        raise UsageError("--model: give a preset, 'tiny' or a model folder, got an empty name")
    path = Path(text).expanduser()
    if path.is_dir() and not (path / "config.json").is_file():
        raise UsageError(f"--model {text}: the folder has no config.json")
    if not path.exists():
        raise UsageError(
            f"--model {text}: neither a preset ({', '.join(PRESETS)}) nor 'tiny' nor a model folder or config.json"
        )
    try:
        return text, ModelConfig.from_file(path)
    except (ValueError, OSError) as e:
        raise UsageError(f"--model {text}: {e}") from None


def run(args) -> int:
    import json

    from ..models.memory import DTYPE_BYTES, format_plan, plan_memory

    args.ring = check_ring(args.ring, args.window)
    name, cfg = load_config(args.model)
    limit = cfg.max_position_embeddings
    if limit is not None and args.context > limit:
        raise UsageError(f"--context: must be an integer from 0 to {limit} (the model's max_position_embeddings), "
                         f"got {args.context}")  # fmt: skip
    if cfg.H % args.tp or cfg.HV % args.tp:
        ok = [t for t in range(1, cfg.H + 1) if cfg.H % t == 0 and cfg.HV % t == 0]
        raise UsageError(f"--tp {args.tp} must divide the model's {cfg.H} GDN key heads and {cfg.HV} value heads: "
                         f"one of {', '.join(map(str, ok))}")  # fmt: skip
    budget = int(args.budget_gib * 2**30)
    if budget < 1:  # (a budget was rounded up to 1 byte)
        raise UsageError(f"--budget-gib {args.budget_gib:g} is less than a byte; give at least 1e-9 (GiB)")
    plan = plan_memory(cfg, name=name, tp=args.tp, T=args.window, L=args.ring, act_bytes=DTYPE_BYTES[args.dtype],
                       budget_bytes=budget, context=args.context)  # fmt: skip
    if args.json not in (None, "-"):
        path = out_file(args.json, "--json")
        write_text(path, json.dumps(plan, indent=2))
        print(f"wrote {path}")
        return 0
    print(json.dumps(plan, indent=2) if args.json else format_plan(plan))
    return 0
