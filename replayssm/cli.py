"""The ``replayssm`` command line."""

from __future__ import annotations

import argparse
import sys

import torch


def _device(name: str | None) -> torch.device:
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _cmd_demo(args) -> int:
    from .layer_demo import LayerDemoConfig, run_layer_demo

    cfg = LayerDemoConfig(steps=args.steps, batch=args.batch, draft_tokens=args.draft_tokens, ring_len=args.ring,
                          seed=args.seed)  # fmt: skip
    dev = _device(args.device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    path = "Triton kernels" if dev.type == "cuda" else "PyTorch references"
    print(f"replayssm demo: one GDN layer, H={cfg.H} HV={cfg.HV} K={cfg.K} V={cfg.V}, batch {cfg.batch}, "
          f"window T={cfg.draft_tokens}, ring L={cfg.ring_len}, {dtype} activations, {dev} ({path})")  # fmt: skip
    r = run_layer_demo(cfg, dev, dtype)
    print(f"  steps                       {r.steps} ({r.flush_steps} with a fold)")
    print(f"  mean accepted length        {r.mean_accepted:.2f} of {cfg.draft_tokens}")
    print(f"  committed state bitwise     {r.bitwise_steps}/{r.steps} steps equal to the recurrent baseline")
    print(f"  worst output rel. error     {r.worst_rel_err:.2e} (ReplaySSM vs recurrent outputs)")
    print(f"  speculative scratch         recurrent {r.recurrent_scratch_bytes:,} B (per-token snapshots); "
          f"ReplaySSM {r.replay_ring_bytes:,} B (ring records, no snapshots)")  # fmt: skip
    return 0 if r.bitwise_steps == r.steps else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="replayssm", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="simulate speculative decoding of one GDN layer on both backends")
    d.add_argument("--steps", type=int, default=300)
    d.add_argument("--batch", type=int, default=4)
    d.add_argument("--draft-tokens", type=int, default=4, help="window length T (last accepted token + drafts)")
    d.add_argument("--ring", type=int, default=16, help="ring length L (power of two, >= 2T)")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    d.set_defaults(fn=_cmd_demo)
    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
