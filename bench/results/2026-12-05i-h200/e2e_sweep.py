"""The kernels' switches in an engine step (issue 15): replay at C=64 (27B, official e2e settings) under each.

The launch choices (`verify_launch.one_launch`, `fold_ahead_pays`, tensor cores, the window products' mode) were set
by per-kernel benches (`replayssm bench kernels`, the 122B geometry). At C=64 of the 27B geometry (48 value heads) the
verify runs staged: a staging kernel (`_window_prep_kernel`, 0.39 ms a step) and the main kernel, with a launch gap
between them. This probe times whole engine steps (``run_mode``, as `replayssm bench e2e` does, overlap on, no
phases) for each setting in SWEEP (``name:VAR=val+VAR=val;...``), the default first and last (its spread is the
noise), and the recurrent backend once for the ratio. Every step runs the engine's own path, so a setting that broke
the contract would fail the GPU suite's lockstep tests, not this probe: it only times.
"""

import json
import os
import statistics
import sys

sys.path.insert(0, os.getcwd())
import torch

from replayssm.bench.e2e import E2EConfig, run_mode
from replayssm.bench.synthetic import preset_config, random_model

out = os.environ["OUT"]
C = int(os.environ.get("C", "64"))
cfg = E2EConfig(prompt_len=64, steps=int(os.environ.get("STEPS", "16")), phases=False)
mc = preset_config(cfg.preset, cfg.layers)
model = random_model(mc, seed=0, device="cuda", dtype=torch.bfloat16)
model.fuse_projections()
g = torch.Generator().manual_seed(cfg.seed)
prompts = [torch.randint(0, mc.vocab_size, (cfg.prompt_len,), generator=g).tolist() for _ in range(C)]
SWEEP = os.environ.get(
    "SWEEP",
    "default:;one_launch:REPLAYSSM_VERIFY_ONE_LAUNCH=1;one_launch_ahead:REPLAYSSM_VERIFY_ONE_LAUNCH=1"
    "+REPLAYSSM_FOLD_AHEAD=1;tc0:REPLAYSSM_VERIFY_TC=0;dif0:REPLAYSSM_VERIFY_DIF=0;default2:",
)
rows = []
for item in [s for s in SWEEP.split(";") if s]:
    name, _, spec = item.partition(":")
    env = dict(kv.split("=") for kv in spec.split("+") if kv)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        r = run_mode(model, "replay", C, cfg, prompts, phases=False)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    r.update(name=name, env=env)
    rows.append(r)
    print(f"{name:18s} step {r['step_ms_median']:7.2f} ms  {r['tokens_per_s']:8.1f} tok/s  {env}", flush=True)
try:  # (27B at C=64 takes ~105 GB with the recurrent backend: not on an H100)
    rec = run_mode(model, "recurrent", C, cfg, prompts, phases=False)
    rec.update(name="recurrent", env={})
    print(f"{'recurrent':18s} step {rec['step_ms_median']:7.2f} ms  {rec['tokens_per_s']:8.1f} tok/s", flush=True)
except torch.OutOfMemoryError:
    rec = None
    print("recurrent: does not fit", flush=True)
base = statistics.mean(r["step_ms_median"] for r in rows if r["name"].startswith("default"))
for r in rows:
    vs = f"; replay/recurrent {rec['step_ms_median'] / r['step_ms_median']:.3f}x" if rec else ""
    print(f"   {r['name']:18s} {r['step_ms_median'] / base:6.3f}x the default's mean{vs}")
rows += [rec] if rec else []
with open(f"{out}/e2e_sweep.json", "w") as fh:
    json.dump({"C": C, "rows": rows}, fh, indent=1, default=str)
