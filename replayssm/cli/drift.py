"""replayssm drift: committed-state error and token divergence over long generations (bench/drift.py)."""

from __future__ import annotations

import sys

from ..progress import progress
from .common import (
    UsageError,
    add_command,
    add_device,
    check_ring,
    device,
    integer,
    model_files,
    model_folder,
    note_shadowed,
    power_of_two,
)
from .outputs import add_out, out_dir

PROMPTS = 3  # load_drift_model gives three prompts


def add_parser(sub) -> None:
    d = add_command(sub, "drift", "committed-state error and token divergence over long generations", run)
    d.add_argument("--model", default="tiny",
                   help="'tiny' (the embedded model), a model folder, or a dense preset (qwen3.5-4b, qwen3.5-9b, "
                        "qwen3.5-27b; any case) with --layers: its widths, random weights")  # fmt: skip
    d.add_argument("--layers", type=integer(4), default=None, metavar="N",
                   help="with a preset --model: keep its first N layers (4 to the preset's count; required with a "
                        "preset, no default); not with 'tiny' or a folder")  # fmt: skip
    d.add_argument("--tokens", type=integer(1, 1 << 20), default=256,
                   help="tokens per generation (the published study: 16384 tokens, --every 1024, one prompt: "
                        "about 13 minutes on a CPU)")  # fmt: skip
    d.add_argument("--every", type=integer(1), default=32,
                   help="check the committed state every N tokens (and at the end); <= --tokens")  # fmt: skip
    d.add_argument("--prompts", type=integer(1, PROMPTS), default=1, help=f"prompts to run, 1 to {PROMPTS}")
    d.add_argument("--window", type=integer(2, 64), default=4, help="window T of the teacher-forced speculative run")
    d.add_argument("--ring", type=power_of_two(2), default=None,
                   help="ring length L of the ReplaySSM pools: a power of two >= 2 x --window (default: 16, or "
                        "the least that fits a longer window)")  # fmt: skip
    add_device(d)
    add_out(d, "drift")


def _model_spec(spec: str, layers: int | None) -> str:
    """--model and --layers -> load_drift_model's spec: 'tiny', a model folder, or a dense preset's name."""
    from ..models.presets import PRESETS, preset

    dense = ", ".join(n for n in PRESETS if not preset(n).num_experts)
    if spec.lower().startswith("random:"):  # the old spelling of a preset with random weights
        parts = spec.split(":")
        name = parts[1].lower() if len(parts) > 1 else ""
        n = parts[2] if len(parts) == 3 and parts[2].isascii() and parts[2].isdigit() else "N"
        if name not in PRESETS or preset(name).num_experts:  # suggest only what the command takes
            raise UsageError(f"--model {spec}: random:PRESET:LAYERS is now spelled --model PRESET --layers N, "
                             f"PRESET a dense preset ({dense})")  # fmt: skip
        most = preset(name).num_layers
        if n == "N" or not 4 <= int(n) <= most:
            n = f"N (4 to {most})"
        raise UsageError(f"--model {spec}: random:PRESET:LAYERS is now spelled --model {name} --layers {n}")
    name = spec.lower()  # any case, as memory's presets and 'tiny'
    if name in PRESETS:
        from ..bench.synthetic import preset_config

        if preset(name).num_experts:
            raise UsageError(f"--model {spec}: a MoE preset; the drift study runs dense presets ({dense})")
        if layers is None:
            raise UsageError(f"--model {spec}: a preset needs --layers N, its first N layers (4 to "
                             f"{preset(name).num_layers}), e.g. --layers 8")  # fmt: skip
        try:  # N outside 4 .. the preset's layer count
            preset_config(name, layers)
        except ValueError as e:
            raise UsageError(f"--model {spec} --layers {layers}: {e}") from None
        note_shadowed(spec)
        return name
    if layers is not None:
        raise UsageError(f"--layers {layers}: only with a preset --model ({dense}); 'tiny' and a model folder keep "
                         "their own layers: drop it")  # fmt: skip
    if name == "tiny":
        note_shadowed(spec)
        return "tiny"
    from ..models.checkpoint import check_checkpoint

    folder = model_folder(spec)
    cfg = model_files(folder, spec)  # load_drift_model reads both
    try:
        check_checkpoint(folder, cfg)  # the safetensors headers, before the weights load
    except (ValueError, OSError) as e:
        raise UsageError(f"--model {spec}: {e}") from None
    return spec


def _check_fits(args, spec: str, dev) -> None:
    """The model's weights fit ``dev`` (before a preset's random weights or a folder's are made)."""
    from ..bench.synthetic import preset_config
    from ..fit import weights_too_big
    from ..models.config import ModelConfig
    from ..models.presets import PRESETS
    from ..tiny import TINY_MODEL

    if spec in PRESETS:
        cfg, flag = preset_config(spec, args.layers), f"--model {args.model} --layers {args.layers}"
    else:
        cfg, flag = ModelConfig.from_file(TINY_MODEL if spec == "tiny" else spec), f"--model {args.model}"
    big = weights_too_big(cfg, dev)
    if big:
        raise UsageError(f"{flag}: {big}{'; fewer --layers' if spec in PRESETS else ''}")


def run(args) -> int:
    from ..bench.drift import DriftConfig, load_drift_model, run_drift
    from ..bench.report import environment, header, write_json

    args.ring = check_ring(args.ring, args.window)
    if args.every > args.tokens:
        raise UsageError(f"--every {args.every} must be <= --tokens {args.tokens} (otherwise nothing is checked)")
    spec = _model_spec(args.model, args.layers)
    dev = device(args.device)
    out = out_dir(args.out, files=(f"{args.tag}.json", f"{args.tag}.png"))
    import torch

    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    _check_fits(args, spec, dev)
    env = environment()
    print(header(env), flush=True)
    if dev.type == "cpu":
        torch.set_num_threads(1)  # many tiny tensor operations: more threads only wait on each other (cli/demo.py)
    try:
        model, prompts = load_drift_model(spec, dev, dtype, layers=args.layers)
    except (ValueError, OSError) as e:  # missing or mis-shaped weights, an unsupported config.json
        raise UsageError(f"--model {args.model}: {e}") from e
    prompts = prompts[: args.prompts]
    cfg = DriftConfig(tokens=args.tokens, every=args.every, window=args.window, ring_len=args.ring,
                      cuda_graphs=dev.type == "cuda")  # fmt: skip
    what = spec if args.layers is None else f"{spec} (first {args.layers} layers, random weights)"
    print(
        f"{what} on {dev} ({str(dtype).removeprefix('torch.')}): {len(prompts)} prompt(s) x {args.tokens} tokens, "
        f"teacher-forced (T={args.window}, checks every {args.every}) then free-running per variant",
        flush=True,
    )
    limit, longest = model.config.max_position_embeddings, max(map(len, prompts)) + args.tokens + args.window
    if limit is not None and longest > limit:  # a note, not an error: the study compares states, not text
        print(f"note: prompts + --tokens reach position {longest}, past the model's max_position_embeddings "
              f"{limit}: the text may degrade there; the states the study compares stay comparable (docs/cli.md)",
              flush=True)  # fmt: skip
    with progress(len(prompts) * 4 * args.tokens, "drift") as bar:

        def tick(phase: str, n: int) -> None:
            if bar.desc != phase:
                bar.set_description(phase)
            bar.update(n)

        res = run_drift(model, prompts, cfg, progress=tick)
    res.update(env=env, model=spec, layers=model.config.num_layers, device=str(dev), dtype=str(dtype))
    write_json(out / f"{args.tag}.json", res)
    code = _summary(res)  # the findings first, then where they were written
    print(f"wrote {out / f'{args.tag}.json'}")
    _plot(res, out / f"{args.tag}.png", header(env))
    return code


def _plot(res: dict, path, title: str) -> None:
    from ..bench.report import plot_lines

    panels = []
    for i, rows in enumerate(res["teacher_forced"]):
        exact_zero = all(r["exact_rel_err"] == 0 for r in rows)
        exact = "exact fold: 0 at every check (bitwise)" if exact_zero else "exact fold"
        pts = [{"tokens": r["tokens"], "open": r["open_loop_rel_err"], "exact": r["exact_rel_err"]} for r in rows]
        panels.append((f"prompt {i}", pts, [("open", "open-loop fold (experimental)"), ("exact", exact)]))
    try:
        plot_lines(path, panels, "tokens", "committed-state rel. error vs baseline", title, yscale="symlog")
    except ImportError as e:
        print(f"plot skipped: {e.name} is not installed (pip install matplotlib); the JSON above has every number")
        return
    print(f"wrote {path}")


def _summary(res: dict) -> int:
    ok = True
    for i, (rows, fr) in enumerate(zip(res["teacher_forced"], res["free_running"])):
        if not rows:
            print(f"prompt {i}: FAILED: no check ran", file=sys.stderr)
            ok = False
            continue
        bitwise = all(r["exact_bitwise"] for r in rows)
        ok &= bitwise
        last = rows[-1]
        checks = f"{len(rows)} check{'s' if len(rows) != 1 else ''}"
        print(f"prompt {i}: teacher-forced, {checks} up to {last['tokens']} tokens (mean accepted "
              f"{last['mean_accepted']:.2f}): exact fold bitwise at every check: {'yes' if bitwise else 'NO'}; "
              f"open-loop rel. error at the end {last['open_loop_rel_err']:.2e}")  # fmt: skip
        base_rep = fr["recurrent"]["repetition"]
        for v in ("exact", "open_loop"):
            f = fr[v]
            if f["first_diff"] is None:
                diff = f"same tokens as the baseline for all {fr['tokens']}"
            else:
                diff = (f"first differs from the baseline at token {f['first_diff']} (baseline top-1/top-2 logit "
                        f"margin there {f['margin_at_first_diff']:.2e})")  # fmt: skip
            print(f"  free-running {v:>9}: {diff}; repeated 4-grams {f['repetition']:.3f} (baseline {base_rep:.3f})")
    if not ok:
        print("drift: FAILED: a prompt had no check, or the exact fold differed from the baseline", file=sys.stderr)
    return 0 if ok else 1
