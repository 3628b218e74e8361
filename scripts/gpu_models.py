"""GPU run of the engine (issue: hybrid model and speculative engine).

1. The embedded tiny model, bf16, CUDA graphs: plain decode, speculative decoding on both backends,
   and ReplaySSM with a recurrent shadow pool in lockstep (committed states bitwise at every step).
2. A Qwen3.5-27B-shaped model (real widths, random bf16 weights, --layers layers), CUDA graphs, 8
   requests: both backends with the n-gram drafter, and the replay backend with a recurrent shadow.
Usage: python scripts/gpu_models.py OUT_DIR [--layers 8]
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replayssm.bench.report import environment, header  # noqa: E402
from replayssm.bench.synthetic import preset_config, random_model  # noqa: E402
from replayssm.demo import print_model_demo, run_model_demo  # noqa: E402
from replayssm.engine.engine import Engine  # noqa: E402
from replayssm.engine.runner import ModelRunner, RunnerConfig  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def big_model(layers: int, new_tokens: int = 48):
    cfg = preset_config("qwen3.5-27b", layers)
    model = random_model(cfg, device=DEV, dtype=torch.bfloat16 if DEV == "cuda" else torch.float32)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, cfg.vocab_size, (64,), generator=g).tolist() for _ in range(8)]
    res = {"layers": layers, "gdn_layers": len(cfg.gdn_layers), "runs": {}}
    outs = {}
    for backend, shadow in (("recurrent", None), ("replay", None), ("replay", "recurrent")):
        rc = RunnerConfig(backend=backend, max_slots=8, max_len=256, window=4, cuda_graphs=True, shadow_backend=shadow)
        eng = Engine(ModelRunner(model, rc), drafter="ngram")
        reqs = [eng.add(p, new_tokens) for p in prompts]
        bitwise, steps = True, 0
        if DEV == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        while eng.step():
            steps += 1
            if shadow:
                live = [r.slot for r in reqs if r.slot is not None]
                if live:
                    bitwise &= eng.runner.states_equal(live)
        if DEV == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        name = f"{backend}+{shadow}" if shadow else backend
        outs[name] = [r.generated for r in reqs]
        res["runs"][name] = {
            "steps": steps,
            "seconds": dt,
            "tokens": sum(len(r.generated) for r in reqs),
            "bitwise_every_step": bitwise if shadow else None,
            "mean_accepted": sum(sum(r.accepted) for r in reqs) / sum(len(r.accepted) for r in reqs),
        }
        print(name, json.dumps(res["runs"][name]), flush=True)
    res["replay_tokens_equal_recurrent"] = outs["replay"] == outs["recurrent"]
    res["tokens_equal_fraction"] = sum(
        a == b for x, y in zip(outs["replay"], outs["recurrent"]) for a, b in zip(x, y)
    ) / sum(len(x) for x in outs["recurrent"])
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, default=8)
    args = ap.parse_args()
    env = environment()
    print(header(env), flush=True)
    tiny = run_model_demo(device=DEV, max_new_tokens=128)
    ok = print_model_demo(tiny, 4)
    big = big_model(args.layers)
    print(json.dumps({k: v for k, v in big.items() if k != "runs"}), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_models.json").write_text(
        json.dumps({"env": env, "tiny": tiny, "qwen3.5-27b-shaped": big}, indent=2)
    )
    ok &= big["runs"]["replay+recurrent"]["bitwise_every_step"]
    print("MODELS OK" if ok else "MODELS: CHECK FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
