"""replayssm demo: the embedded model decoded plainly and speculatively on both backends (or --layer: one GDN
layer with random inputs)."""

from __future__ import annotations

from .common import SEED_MAX, UsageError, add_command, add_device, check_ring, device, integer, power_of_two
from .outputs import out_file

LAYER_ONLY = {"steps": 100, "batch": 4, "ring": None, "seed": 0}  # --layer's flags and their defaults
MODEL_ONLY = {"max_new_tokens": 48}  # the model demo's


def add_parser(sub) -> None:
    d = add_command(sub, "demo", "the embedded model decoded plainly and speculatively on both backends", run)
    d.add_argument("--layer", action="store_true", help="instead: simulate one GDN layer with random inputs")
    d.add_argument("--max-new-tokens", type=integer(1, 4096), default=None,
                   help=f"tokens per prompt (default {MODEL_ONLY['max_new_tokens']}; the longest prompt + N + the "
                        "window + 1 must fit the model's positions: at most 3875 at --window 4; not with "
                        "--layer)")  # fmt: skip
    d.add_argument("--steps", type=integer(1, 1_000_000), default=None,
                   help=f"--layer: speculative steps (default {LAYER_ONLY['steps']})")  # fmt: skip
    d.add_argument("--batch", type=integer(1, 4096), default=None,
                   help=f"--layer: requests (default {LAYER_ONLY['batch']})")  # fmt: skip
    d.add_argument("--window", type=integer(2, 64), default=4, help="window length T (last accepted token + drafts)")
    d.add_argument("--ring", type=power_of_two(2), default=None,
                   help="--layer: ring length L, a power of two >= 2 x --window (default 16, or the least that fits "
                        "a longer window; the model demo sizes its rings itself)")  # fmt: skip
    d.add_argument("--seed", type=integer(0, SEED_MAX), default=None,
                   help=f"--layer: random inputs and acceptance (default {LAYER_ONLY['seed']})")  # fmt: skip
    d.add_argument("--json", default=None,
                   help="also write the results here (the model demo: tokens, accepted length per prompt; "
                        "--layer: the layer's numbers)")  # fmt: skip
    add_device(d)


KERNEL_RESULTS = "bench/results/2026-12-04c-h200/"  # bench kernels on the H200 (the last official runs)
ENGINE_RESULTS = "bench/results/2026-12-05-h200/"  # bench e2e on the H200 (the last official runs)
CPU_NOTE = (
    "On a CPU the kernels run as their PyTorch references, so tokens/s below is no measure of speed: there "
    "ReplaySSM's window formula (a small triangular solve per head) costs more than the baseline's plain loop, and "
    "a model this small never waits on memory. What a CPU run shows is exactness and memory: look at the bitwise "
    f"check and the scratch bytes. Speed is a GPU property: see docs/results.md, {ENGINE_RESULTS} (the "
    f"engine) and {KERNEL_RESULTS} (the kernels), both on an H200."
)


def _check_flags(args) -> None:
    """Flags of the other mode are refused, not ignored; then the defaults of this mode are filled in."""
    mine, other = (LAYER_ONLY, MODEL_ONLY) if args.layer else (MODEL_ONLY, LAYER_ONLY)
    given = ["--" + k.replace("_", "-") for k in other if getattr(args, k) is not None]
    if given:
        sets = "they set" if len(given) > 1 else "it sets"
        where = f"without --layer ({sets} the one-layer simulation)" if not args.layer else "with --layer"
        raise UsageError(f"{' '.join(given)}: not used {where}; drop {'them' if len(given) > 1 else 'it'}"
                         f"{'' if args.layer else ' or add --layer'}")  # fmt: skip
    for k, default in mine.items():
        if getattr(args, k) is None:
            setattr(args, k, default)


def run(args) -> int:
    _check_flags(args)
    if args.layer:
        args.ring = check_ring(args.ring, args.window)
    dev = device(args.device)
    json_path = out_file(args.json, "--json") if args.json is not None else None
    if dev.type == "cpu":
        import torch

        # The embedded model's CPU work is many tiny tensor operations: extra intra-op threads only add barrier
        # waits (a ReplaySSM verify of this model took 275 ms with two threads on a busy 2-core machine, 4.5 ms
        # with one).
        torch.set_num_threads(1)
    if args.layer:
        return _layer(args, dev, json_path)
    import textwrap

    from ..demo import ModelDemo, check_positions, demo_passed
    from ..progress import progress
    from ..tiny import TINY_MODEL

    try:  # --max-new-tokens past the model's positions (checked once the prompts are encoded, before any load)
        check_positions(TINY_MODEL, args.max_new_tokens, args.window)
    except ValueError as e:
        raise UsageError(f"--max-new-tokens {args.max_new_tokens}: {str(e).split(': ', 1)[-1]}") from None
    print(f"replayssm demo: loading the embedded model ({TINY_MODEL}) ...", flush=True)
    demo = ModelDemo(max_new_tokens=args.max_new_tokens, device=dev, window=args.window)
    cfg = demo.model.config
    head = "with its MTP head" if demo.model.mtp is not None else "(no MTP head: n-gram drafts only)"
    print(f"{cfg.num_layers} layers ({len(cfg.gdn_layers)} GDN + {len(cfg.attention_layers)} attention) {head}; "
          f"{len(demo.prompts)} prompts x {args.max_new_tokens} tokens; window T={args.window}; {dev}")  # fmt: skip
    wrap = lambda text: textwrap.fill(text, 110)
    print(wrap("It decodes every prompt plainly, then speculatively on both GDN state backends (recurrent: per-token "
               "state snapshots; ReplaySSM: checkpoint + ring), checking that every run gives exactly the plain "
               "tokens, and runs ReplaySSM once more with a recurrent pool in lockstep to check that every layer's "
               "committed state is bitwise the baseline's after every step."))  # fmt: skip
    if dev.type == "cpu":
        print(wrap(CPU_NOTE))
    with progress(demo.total_tokens, "demo") as bar:
        res = demo.run(progress=bar.update, on_run=lambda name, r: bar.write(_run_line(name, r, args.window)))
    _summary(res, args.window)
    if json_path is not None:
        _write_json(json_path, res)
    return 0 if demo_passed(res) else 1


def _write_json(path, res: dict) -> None:
    import json

    from .._io import write_text

    write_text(path, json.dumps(res, indent=1) + "\n")
    print(f"wrote {path}")


def _yes(ok: bool) -> str:
    return "yes" if ok else "NO"


def _run_line(name: str, r: dict, window: int) -> str:
    if name == "plain":
        samples = "\n".join(f"{'-' * 72}\n{prompt}{text}" for prompt, text in r["samples"])
        return (
            f"{'plain greedy decode':<30} {r['tokens_per_s']:8.1f} tokens/s, {r['steps']} steps\n{samples}\n{'-' * 72}"
        )
    kind = "ring" if name.startswith("replay") else "per-token snapshots"
    line = (f"{name:<30} {r['tokens_per_s']:8.1f} tokens/s, {r['steps']} steps, mean accepted {r['mean_accepted']:.2f}"
            f" of {window}, same tokens as plain: {_yes(r['same_tokens_as_plain'])}, scratch "
            f"{r['speculative_scratch_bytes']:,} B ({kind})")  # fmt: skip
    if r["lockstep"]:
        line += (
            f"\n{'':<30} committed state bitwise equal to the baseline at every step: {_yes(r['bitwise_every_step'])}"
        )
    return line


def _summary(res: dict, window: int) -> None:
    runs = {k: v for k, v in res["runs"].items() if not v["lockstep"]}
    print("mean accepted tokens per step (plain decoding: 1.00)")
    print(f"{'prompt':<40}" + "".join(f"{k:>17}" for k in runs))
    for i, (label, _) in enumerate(res["prompts"]):
        print(f"{label[:39]:<40}" + "".join(f"{v['per_prompt'][i]:>17.2f}" for v in runs.values()))
    print(f"{'all prompts':<40}" + "".join(f"{v['mean_accepted']:>17.2f}" for v in runs.values()))
    scratch = {b: max(v["speculative_scratch_bytes"] for k, v in runs.items() if k.startswith(b))
               for b in ("recurrent", "replay")}  # fmt: skip
    lockstep = [v for v in res["runs"].values() if v["lockstep"]]
    print("summary:")
    same = all(v["same_tokens_as_plain"] for v in runs.values())
    print(f"  every speculative run gave exactly the plain tokens: {_yes(same)}")
    for v in lockstep:
        print(f"  ReplaySSM's committed state bitwise equal to the recurrent baseline's, every layer, after each of "
              f"{v['steps']} steps: {_yes(v['bitwise_every_step'])}")  # fmt: skip
    print(f"  speculative scratch for {len(res['prompts'])} requests at T={window}: recurrent "
          f"{scratch['recurrent']:,} B (T state snapshots per GDN layer), ReplaySSM {scratch['replay']:,} B "
          f"(rings): {scratch['recurrent'] / scratch['replay']:.1f}x less")  # fmt: skip
    print(f"  speed: a GPU property (docs/results.md; {ENGINE_RESULTS}); replayssm memory --model qwen3.5-122b-a10b "
          "shows the memory at a real model's size")  # fmt: skip


def _layer(args, dev, json_path=None) -> int:
    import torch

    from ..fit import too_big
    from ..layer_demo import LayerDemoConfig, run_layer_demo
    from ..progress import progress

    cfg = LayerDemoConfig(steps=args.steps, batch=args.batch, window=args.window, ring_len=args.ring,
                          seed=args.seed)  # fmt: skip
    from ..ops._common import use_triton

    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    big = too_big(cfg.bytes_needed(dtype), dev)
    if big:
        raise UsageError(f"--batch {cfg.batch} / --ring {cfg.ring_len}: one layer's states, snapshots and rings "
                         f"{big}; lower --batch or --ring")  # fmt: skip
    try:
        path = "Triton kernels" if use_triton("auto", torch.empty(0, device=dev)) else "PyTorch references"
    except ValueError as e:  # REPLAYSSM_IMPL=triton on a CPU without the interpreter
        raise UsageError(f"REPLAYSSM_IMPL: {e}") from None
    print(f"replayssm demo --layer: one GDN layer, H={cfg.H} HV={cfg.HV} K={cfg.K} V={cfg.V}, batch {cfg.batch}, "
          f"window T={cfg.window}, ring L={cfg.ring_len}, {dtype} activations, {dev} ({path})")  # fmt: skip
    with progress(cfg.steps, "demo --layer", unit="step") as bar:
        r = run_layer_demo(cfg, dev, dtype, progress=bar.update)
    print(f"  steps                       {r.steps} ({r.flush_steps} with a fold)")
    print(f"  mean accepted length        {r.mean_accepted:.2f} of {cfg.window}")
    print(f"  committed state bitwise     {r.bitwise_steps}/{r.steps} steps equal to the recurrent baseline")
    print(f"  worst output rel. error     {r.worst_rel_err:.2e} (ReplaySSM vs recurrent outputs)")
    print(f"  speculative scratch         recurrent {r.recurrent_scratch_bytes:,} B (per-token snapshots); "
          f"ReplaySSM {r.replay_ring_bytes:,} B (ring records, no snapshots)")  # fmt: skip
    if json_path is not None:
        from dataclasses import asdict

        _write_json(json_path, {"config": asdict(cfg), "device": str(dev), "dtype": str(dtype), **asdict(r)})
    return 0 if r.bitwise_steps == r.steps else 1
