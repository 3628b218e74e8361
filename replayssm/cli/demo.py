"""replayssm demo: the embedded model decoded plainly and speculatively on both backends (or --layer: one GDN
layer with random inputs)."""

from __future__ import annotations

from .common import add_command, add_device, check_ring, device, integer, power_of_two


def add_parser(sub) -> None:
    d = add_command(sub, "demo", "the embedded model decoded plainly and speculatively on both backends", run)
    d.add_argument("--layer", action="store_true", help="instead: simulate one GDN layer with random inputs")
    d.add_argument("--max-new-tokens", type=integer(1, 4096), default=48, help="tokens per prompt")
    d.add_argument("--steps", type=integer(1), default=100, help="--layer: speculative steps")
    d.add_argument("--batch", type=integer(1, 4096), default=4, help="--layer: requests")
    d.add_argument("--window", type=integer(2, 64), default=4, help="window length T (last accepted token + drafts)")
    d.add_argument("--ring", type=power_of_two(2), default=16, help="ring length L: a power of two >= 2 x --window")
    d.add_argument("--seed", type=integer(0), default=0, help="--layer: random inputs and acceptance")
    d.add_argument("--json", default=None, help="also write the results (tokens, accepted length per prompt) here")
    add_device(d)


GPU_RESULTS = "bench/results/2026-11-29-h200/"
CPU_NOTE = (
    "On a CPU the kernels run as their PyTorch references, so tokens/s below is no measure of speed: there "
    "ReplaySSM's window formula (a small triangular solve per head) costs more than the baseline's plain loop, and "
    "a model this small never waits on memory. What a CPU run shows is exactness and memory: look at the bitwise "
    "check and the scratch bytes. Speed is a GPU property: see Results in the README and " + GPU_RESULTS + " (H200)."
)


def run(args) -> int:
    check_ring(args.ring, args.window)
    dev = device(args.device)
    if dev.type == "cpu":
        import torch

        # The embedded model's CPU work is many tiny tensor operations: extra intra-op threads only add barrier
        # waits (a ReplaySSM verify of this model took 275 ms with two threads on a busy 2-core machine, 4.5 ms
        # with one).
        torch.set_num_threads(1)
    if args.layer:
        return _layer(args, dev)
    import textwrap

    from ..demo import ModelDemo, demo_passed
    from ..progress import progress
    from ..tiny import TINY_MODEL

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
    if args.json:
        import json
        from pathlib import Path

        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0 if demo_passed(res) else 1


def _yes(ok: bool) -> str:
    return "yes" if ok else "NO"


def _run_line(name: str, r: dict, window: int) -> str:
    if name == "plain":
        samples = "\n".join(f"{'-' * 72}\n{prompt}{text}" for prompt, text in r["samples"])
        return (
            f"{'plain greedy decode':<30} {r['tokens_per_s']:8.1f} tokens/s, {r['steps']} steps\n{samples}\n{'-' * 72}"
        )
    kind = "ring records" if name.startswith("replay") else "per-token snapshots"
    line = (f"{name:<30} {r['tokens_per_s']:8.1f} tokens/s, {r['steps']} steps, mean accepted {r['mean_accepted']:.2f}"
            f"/{window}, same tokens as plain: {_yes(r['same_tokens_as_plain'])}, scratch "
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
          f"(ring records): {scratch['recurrent'] / scratch['replay']:.1f}x less")  # fmt: skip
    print(f"  speed: a GPU property (README, Results; {GPU_RESULTS}); replayssm memory --model qwen3.5-122b-a10b "
          "shows the memory at a real model's size")  # fmt: skip


def _layer(args, dev) -> int:
    import torch

    from ..layer_demo import LayerDemoConfig, run_layer_demo
    from ..progress import progress

    cfg = LayerDemoConfig(steps=args.steps, batch=args.batch, window=args.window, ring_len=args.ring,
                          seed=args.seed)  # fmt: skip
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    path = "Triton kernels" if dev.type == "cuda" else "PyTorch references"
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
    return 0 if r.bitwise_steps == r.steps else 1
