"""replayssm demo: the embedded model decoded plainly and speculatively on both backends (or --layer: one GDN
layer with random inputs)."""

from __future__ import annotations

from .common import add_command, add_device, check_ring, device, integer, power_of_two


def add_parser(sub) -> None:
    d = add_command(sub, "demo", "the embedded model decoded plainly and speculatively on both backends", run)
    d.add_argument("--layer", action="store_true", help="instead: simulate one GDN layer with random inputs")
    d.add_argument("--max-new-tokens", type=integer(1, 4096), default=48, help="tokens per prompt")
    d.add_argument("--steps", type=integer(1), default=300, help="--layer: speculative steps")
    d.add_argument("--batch", type=integer(1, 4096), default=4, help="--layer: requests")
    d.add_argument("--window", type=integer(2, 64), default=4, help="window length T (last accepted token + drafts)")
    d.add_argument("--ring", type=power_of_two(2), default=16, help="ring length L: a power of two >= 2 x --window")
    d.add_argument("--seed", type=integer(0), default=0, help="--layer: random inputs and acceptance")
    d.add_argument("--json", default=None, help="also write the results (tokens, accepted length per prompt) here")
    add_device(d)


def run(args) -> int:
    check_ring(args.ring, args.window)
    dev = device(args.device)
    if not args.layer:
        from ..demo import print_model_demo, run_model_demo

        res = run_model_demo(max_new_tokens=args.max_new_tokens, device=dev, window=args.window)
        ok = print_model_demo(res, args.window)
        if args.json:
            import json
            from pathlib import Path

            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
        return 0 if ok else 1
    import torch

    from ..layer_demo import LayerDemoConfig, run_layer_demo

    cfg = LayerDemoConfig(steps=args.steps, batch=args.batch, window=args.window, ring_len=args.ring,
                          seed=args.seed)  # fmt: skip
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
