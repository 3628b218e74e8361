"""The ``replayssm`` command line."""

from __future__ import annotations

import argparse
import sys

import torch

from .bench.kernels_cli import add_parsers as add_kernel_parsers


def _device(name: str | None) -> torch.device:
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _cmd_demo(args) -> int:
    if not args.layer:
        from .demo import print_model_demo, run_model_demo

        res = run_model_demo(max_new_tokens=args.max_new_tokens, device=args.device, window=args.window)
        ok = print_model_demo(res, args.window)
        if args.json:
            import json
            from pathlib import Path

            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
        return 0 if ok else 1
    from .layer_demo import LayerDemoConfig, run_layer_demo

    cfg = LayerDemoConfig(steps=args.steps, batch=args.batch, window=args.window, ring_len=args.ring,
                          seed=args.seed)  # fmt: skip
    dev = _device(args.device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    path = "Triton kernels" if dev.type == "cuda" else "PyTorch references"
    print(f"replayssm demo --layer: one GDN layer, H={cfg.H} HV={cfg.HV} K={cfg.K} V={cfg.V}, batch {cfg.batch}, "
          f"window T={cfg.window}, ring L={cfg.ring_len}, {dtype} activations, {dev} ({path})")  # fmt: skip
    r = run_layer_demo(cfg, dev, dtype)
    print(f"  steps                       {r.steps} ({r.flush_steps} with a fold)")
    print(f"  mean accepted length        {r.mean_accepted:.2f} of {cfg.window}")
    print(f"  committed state bitwise     {r.bitwise_steps}/{r.steps} steps equal to the recurrent baseline")
    print(f"  worst output rel. error     {r.worst_rel_err:.2e} (ReplaySSM vs recurrent outputs)")
    print(f"  speculative scratch         recurrent {r.recurrent_scratch_bytes:,} B (per-token snapshots); "
          f"ReplaySSM {r.replay_ring_bytes:,} B (ring records, no snapshots)")  # fmt: skip
    return 0 if r.bitwise_steps == r.steps else 1


def _cmd_generate(args) -> int:
    import time

    from .engine.llm import LLM
    from .models.loader import MTPUnavailableError

    try:
        llm = LLM(args.model, backend=args.backend, window=args.window, device=args.device, drafter=args.drafter,
                  max_len=args.max_len)  # fmt: skip
    except MTPUnavailableError as e:
        print(f"replayssm generate: --drafter mtp: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    out = llm.generate([args.prompt], max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                       seed=args.seed)[0]  # fmt: skip
    dt = time.perf_counter() - t0
    print(args.prompt + (out.text if out.text is not None else " ".join(map(str, out.token_ids))))
    print(f"[{len(out.token_ids)} tokens in {dt:.2f} s ({len(out.token_ids) / dt:.1f} tokens/s), {out.steps} steps, "
          f"mean accepted {out.mean_accepted:.2f}, backend {args.backend}, drafter {llm.drafter}]")  # fmt: skip
    return 0


def _cmd_memory(args) -> int:
    import json
    from pathlib import Path

    from .models.config import ModelConfig
    from .models.memory import DTYPE_BYTES, format_plan, plan_memory
    from .models.presets import PRESETS, preset

    if args.model in PRESETS:
        cfg = preset(args.model)
    elif Path(args.model).is_file():
        cfg = ModelConfig.from_file(args.model)
    else:
        raise SystemExit(f"--model: {args.model!r} is neither a preset ({', '.join(PRESETS)}) nor a config.json file")
    plan = plan_memory(cfg, name=args.model, tp=args.tp, T=args.window, L=args.ring, act_bytes=DTYPE_BYTES[args.dtype],
                       budget_bytes=int(args.budget_gib * 2**30), context=args.context)  # fmt: skip
    print(json.dumps(plan, indent=2) if args.json else format_plan(plan))
    return 0


def _cmd_bench_e2e(args) -> int:
    if not torch.cuda.is_available():
        raise SystemExit("replayssm bench e2e needs a CUDA GPU")
    from .bench.e2e import E2EConfig, run_e2e

    cfg = E2EConfig(preset=args.preset, layers=args.layers, concurrency=tuple(args.concurrency),
                    prompt_len=args.prompt_len, steps=args.steps, window=args.window,
                    mean_accepted=args.mean_accepted, ring_len=args.ring, capacity_context=args.capacity_context,
                    capacity_budget_gib=args.capacity_budget_gib, modes=tuple(args.modes), phases=not args.no_phases,
                    peak=args.peak, peak_steps=args.peak_steps)  # fmt: skip
    run_e2e(cfg, args.out, tag=args.tag)
    return 0


def _cmd_drift(args) -> int:
    from .bench.drift import main_drift

    res = main_drift(args)
    exact_ok = all(r["exact_bitwise"] for rows in res["teacher_forced"] for r in rows)
    return 0 if exact_ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="replayssm", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="the embedded model decoded plainly and speculatively (n-gram and MTP drafts) on "
                                    "both backends")  # fmt: skip
    d.add_argument("--layer", action="store_true", help="instead: simulate one GDN layer with random inputs")
    d.add_argument("--max-new-tokens", type=int, default=96)
    d.add_argument("--steps", type=int, default=300, help="--layer: speculative steps")
    d.add_argument("--batch", type=int, default=4, help="--layer: requests")
    d.add_argument("--window", type=int, default=4, help="window length T (last accepted token + drafts)")
    d.add_argument("--ring", type=int, default=16, help="--layer: ring length L (power of two, >= 2T)")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    d.add_argument("--json", default=None, help="also write the results (tokens, accepted length per prompt) here")
    d.set_defaults(fn=_cmd_demo)

    gen = sub.add_parser("generate", help="generate text from a model folder")
    gen.add_argument("--model", required=True, help="folder with config.json, *.safetensors, tokenizer.json")
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--backend", choices=["replay", "recurrent"], default="replay")
    gen.add_argument("--window", type=int, default=4, help="window length T (1 = plain decode)")
    gen.add_argument("--drafter", choices=["auto", "mtp", "ngram", "none"], default="auto",
                     help="draft with the model's MTP head, n-gram prompt lookup, or not at all (auto: MTP when the "
                          "checkpoint has a head, else n-gram)")  # fmt: skip
    gen.add_argument("--max-new-tokens", type=int, default=128)
    gen.add_argument("--max-len", type=int, default=2048)
    gen.add_argument("--temperature", type=float, default=0.0)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--device", default=None)
    gen.set_defaults(fn=_cmd_generate)

    m = sub.add_parser("memory", help="per-request GDN state bytes of both backends, and how many requests fit")
    m.add_argument("--model", required=True, help="a preset (qwen3.5-122b-a10b, ...) or a config.json path")
    m.add_argument("--tp", type=int, default=1, help="tensor-parallel size (divides the GDN heads)")
    m.add_argument("--window", type=int, default=4, help="window length T")
    m.add_argument("--ring", type=int, default=16, help="ring length L")
    m.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16", help="activation dtype")
    m.add_argument("--budget-gib", type=float, default=40.0, help="memory for request state on one GPU")
    m.add_argument("--context", type=int, default=0, help="also count this many tokens of full-attention KV cache")
    m.add_argument("--json", action="store_true")
    m.set_defaults(fn=_cmd_memory)
    bench = sub.add_parser("bench", help="GPU benchmarks").add_subparsers(dest="bench", required=True)
    add_kernel_parsers(bench)

    e = bench.add_parser("e2e", help="end-to-end decoding throughput, TPOT and capacity per backend (GPU)")
    e.add_argument(
        "--preset", default="qwen3.5-27b", help="preset from replayssm memory, dense or MoE (random weights)"
    )
    e.add_argument("--layers", type=int, default=None, help="keep only the first N layers (default: full depth)")
    e.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64, 128])
    e.add_argument("--prompt-len", type=int, default=128)
    e.add_argument("--steps", type=int, default=12, help="timed engine iterations per mode")
    e.add_argument("--window", type=int, default=4, help="window length T")
    e.add_argument("--mean-accepted", type=float, default=3.0, help="prescribed mean accepted length per step")
    e.add_argument("--ring", type=int, default=16)
    e.add_argument("--capacity-context", type=int, default=1024, help="KV tokens per request in --peak")
    e.add_argument("--capacity-budget-gib", type=float, default=None, help="default: free memory after weights - 4 GiB")
    e.add_argument("--out", default="bench/results")
    e.add_argument("--modes", nargs="+", choices=["plain", "recurrent", "replay", "replay-mtp"],
                   default=["plain", "recurrent", "replay"],
                   help="replay-mtp: ReplaySSM, drafting with a random MTP head inside the step")  # fmt: skip
    e.add_argument(
        "--peak",
        action="store_true",
        help="also find each mode's best concurrency in the memory budget at --capacity-context tokens",
    )
    e.add_argument("--peak-steps", type=int, default=8, help="timed engine iterations per peak-mode point")
    e.add_argument("--no-phases", action="store_true", help="skip timing the GDN state work alone (faster)")
    e.add_argument("--tag", default="e2e")
    e.set_defaults(fn=_cmd_bench_e2e)

    dr = sub.add_parser("drift", help="committed-state error and token divergence over long generations")
    dr.add_argument("--model", default="tiny", help="'tiny' (embedded), a model folder, or random:PRESET:LAYERS")
    dr.add_argument("--tokens", type=int, default=16384)
    dr.add_argument("--every", type=int, default=512, help="measure the state error every N tokens")
    dr.add_argument("--prompts", type=int, default=3)
    dr.add_argument("--window", type=int, default=4, help="window T of the teacher-forced speculative run")
    dr.add_argument("--device", default=None)
    dr.add_argument("--out", default="bench/results")
    dr.add_argument("--tag", default="drift")
    dr.set_defaults(fn=_cmd_drift)

    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
