"""``replayssm bench e2e``: end-to-end decoding of a Qwen3.5-shaped model on one GPU, per backend.

Modes, at each concurrency, same model and prompts: plain decode (no speculation), the recurrent
baseline speculative engine, and the ReplaySSM speculative engine, both speculative ones at the same
prescribed acceptance (``BenchmarkAcceptance``: the tokens are meaningless, the state traffic is
real) so that the comparison isolates the state handling. ``replay-mtp`` is the ReplaySSM engine
drafting with a (random) MTP head inside the step, at the same prescribed acceptance: what counts
there is the drafting's share of a step (``draft_ms``, timed alone as a CUDA graph). Every step is a
CUDA graph; times are wall-clock per engine iteration (host work included), measured with CUDA events.
"""

from __future__ import annotations

import gc
import statistics
from dataclasses import dataclass, replace

import torch

from ..engine.engine import Engine
from ..engine.runner import ModelRunner, RunnerConfig
from ..engine.spec import BenchmarkAcceptance
from ..models.step import Step, StepKind
from ..progress import progress
from .timing import capture, time_graph

MODES = ("plain", "recurrent", "replay", "replay-mtp")


@dataclass(frozen=True)
class E2EConfig:
    preset: str = "qwen3.5-27b"
    layers: int | None = None
    concurrency: tuple[int, ...] = (1, 8, 32, 64, 128)
    prompt_len: int = 128
    steps: int = 12
    window: int = 4
    mean_accepted: float = 3.0
    ring_len: int = 16
    capacity_context: int = 1024
    capacity_budget_gib: float | None = None
    seed: int = 0
    modes: tuple[str, ...] = ("plain", "recurrent", "replay")


def _free():
    gc.collect()
    torch.cuda.empty_cache()


def _runner(model, mode, C, cfg: E2EConfig, max_len):
    backend = {"plain": "recurrent", "replay-mtp": "replay"}.get(mode, mode)
    window = 1 if mode == "plain" else cfg.window
    return ModelRunner(model, RunnerConfig(backend=backend, max_slots=C, max_len=max_len, window=window,
                                           ring_len=cfg.ring_len, cuda_graphs=True, validate=False,
                                           device_drafter="mtp" if mode == "replay-mtp" else None))  # fmt: skip


def _draft_ms(runner: ModelRunner, C: int) -> float:
    """The device drafter's work of one step (catch-up + T-1 drafts), alone, as a CUDA graph."""
    slots = torch.arange(C, dtype=torch.int32, device=runner.device)
    last = torch.zeros(C, dtype=torch.long, device=runner.device)
    step = Step.build(StepKind.VERIFY, slots, runner.cfg.window, runner.kv, contiguous=True)
    return time_graph(capture(lambda: runner.drafter.propose(step, last)), replays=5, trials=3) * 1e3


def _phase_times(runner: ModelRunner, kind: StepKind, C: int, T: int, accept) -> dict:
    """GDN state work alone, over all GDN layers, with the live pool: (conv + verify/decode + commit) and commit."""
    mc, pool, dev, dt = runner.model.config, runner.pool, runner.device, runner.dtype
    g = torch.Generator(device=dev).manual_seed(1)
    N = C * T
    x = {n: torch.randn(*s, device=dev, generator=g).to(dt) for n, s in (("q", (N, mc.H, mc.K)), ("k", (N, mc.H, mc.K)),
         ("v", (N, mc.HV, mc.V)), ("a", (N, mc.HV)), ("b", (N, mc.HV)), ("mixed", (N, mc.conv_channels)))}  # fmt: skip
    slots = torch.arange(C, dtype=torch.int32, device=dev)
    cu = torch.arange(0, N + 1, T, dtype=torch.int32, device=dev)
    layers = [runner.model.model.layers[i].linear_attn for i in mc.gdn_layers]

    def gdn_only():
        for i, m in enumerate(layers):
            pool.conv_update(i, x["mixed"], weight=m.conv1d.weight[:, 0, :], bias=None, slots=slots, cu_seqlens=cu)
            fn = pool.decode if kind is StepKind.DECODE else pool.verify
            fn(i, x["q"], x["k"], x["v"], x["a"], x["b"], A_log=m.A_log, dt_bias=m.dt_bias, slots=slots, cu_seqlens=cu)
        commit()

    def commit():
        pool.commit(slots, accept())

    t_all = time_graph(capture(gdn_only), replays=5, trials=3)
    t_commit = time_graph(capture(commit), replays=5, trials=3)
    return {"gdn_state_ms": (t_all - t_commit) * 1e3, "commit_ms": t_commit * 1e3}


def run_mode(model, mode: str, C: int, cfg: E2EConfig, prompts) -> dict:
    T = 1 if mode == "plain" else cfg.window
    max_new = (cfg.steps + 4) * T + 1
    runner = _runner(model, mode, C, cfg, cfg.prompt_len + max_new + T)
    bench = None
    if mode != "plain":
        bench = BenchmarkAcceptance(cfg.mean_accepted, T, seed=cfg.seed, meaningless_outputs=True)
    drafter = {"plain": "none", "replay-mtp": "mtp"}.get(mode, "ngram")
    eng = Engine(runner, drafter=drafter, benchmark_acceptance=bench)
    for p in prompts[:C]:
        eng.add(p, max_new)
    torch.cuda.reset_peak_memory_stats()
    eng.step()  # prefill everybody + first step (captures the graph)
    eng.step()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    step_ms, tpot, tokens = [], [], 0
    for _ in range(cfg.steps):
        before = [len(r.generated) for r in eng.requests]
        start.record()
        eng.step()
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
        emitted = [len(r.generated) - b for r, b in zip(eng.requests, before)]
        step_ms.append(ms)
        tpot += [ms / n for n in emitted if n > 0]
        tokens += sum(emitted)
    mem = runner.memory_report()
    row = {
        "mode": mode, "C": C, "T": T, "steps": cfg.steps, "tokens": tokens,
        "tokens_per_s": tokens / (sum(step_ms) / 1e3), "step_ms_median": statistics.median(step_ms),
        "tpot_ms_median": statistics.median(tpot), "tpot_ms_p90": sorted(tpot)[int(0.9 * (len(tpot) - 1))],
        "mean_accepted": tokens / (C * cfg.steps), "peak_gpu_bytes": torch.cuda.max_memory_allocated(),
        "speculative_scratch_bytes": mem["speculative_scratch"], "ring_bytes": mem["rings"],
        "state_bytes": mem["total"],
    }  # fmt: skip
    full = torch.full((C,), T, dtype=torch.int32, device=runner.device)  # T = 1 for plain decode
    row.update(_phase_times(runner, StepKind.DECODE if mode == "plain" else StepKind.VERIFY, C, T, lambda: full))
    row["draft_ms"] = _draft_ms(runner, C) if runner.drafter is not None else 0.0
    row["draft_share"] = row["draft_ms"] / row["step_ms_median"]
    row["rest_ms"] = row["step_ms_median"] - row["gdn_state_ms"] - row["commit_ms"] - row["draft_ms"]
    del eng, runner
    _free()
    return row


def max_concurrency(model, backend: str, cfg: E2EConfig, budget_bytes: int) -> int:
    """The most slots whose pool + KV cache can really be allocated within ``budget_bytes``."""
    base = torch.cuda.memory_allocated()

    def fits(C):
        try:
            r = _runner(model, backend, C, cfg, cfg.capacity_context)
            ok = torch.cuda.memory_allocated() - base <= budget_bytes
            del r
        except torch.OutOfMemoryError:
            ok = False
        _free()
        return ok

    lo, hi = 0, 1
    while hi <= 8192 and fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def run_e2e(cfg: E2EConfig, out_dir, tag: str = "e2e") -> dict:
    from pathlib import Path

    from .report import environment, format_table, header, plot_lines, write_json
    from .synthetic import preset_config, random_model

    out_dir = Path(out_dir)
    env = environment()
    print(header(env), flush=True)
    mc = preset_config(cfg.preset, cfg.layers)
    print(f"building {cfg.preset} ({mc.num_layers} layers: {len(mc.gdn_layers)} GDN + {len(mc.attention_layers)} "
          f"attention), random bf16 weights ...", flush=True)  # fmt: skip
    if "replay-mtp" in cfg.modes:  # a random one-layer MTP head, drafting on the device
        mc = replace(mc, mtp_num_hidden_layers=1)
    model = random_model(mc, seed=cfg.seed)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    g = torch.Generator().manual_seed(cfg.seed)
    prompts = [
        torch.randint(0, mc.vocab_size, (cfg.prompt_len,), generator=g).tolist() for _ in range(max(cfg.concurrency))
    ]
    payload = {"env": env, "config": repr(cfg), "weights_bytes": weights, "rows": [], "capacity": {}}
    runs = [(C, mode) for C in cfg.concurrency for mode in cfg.modes]
    with progress(len(runs), "e2e", unit="run") as bar:
        for C, mode in runs:
            bar.set_postfix_str(f"C={C} {mode}")
            try:
                row = run_mode(model, mode, C, cfg, prompts)
            except torch.OutOfMemoryError:
                _free()
                row = {"mode": mode, "C": C, "oom": True}
                bar.write(f"[C={C:>3} {mode:>9}] does not fit in GPU memory")
            else:
                r = row
                bar.write(f"[C={C:>3} {mode:>9}] {r['tokens_per_s']:9.1f} tok/s, step {r['step_ms_median']:.2f} ms, "
                          f"TPOT median {r['tpot_ms_median']:.2f} ms (GDN {r['gdn_state_ms']:.2f} + commit "
                          f"{r['commit_ms']:.2f} + draft {r['draft_ms']:.2f} + rest {r['rest_ms']:.2f} ms)"
                          )  # fmt: skip
            bar.update()
            payload["rows"].append(row)
            write_json(out_dir / f"{tag}.json", payload)
    free, _ = torch.cuda.mem_get_info()
    budget = int(cfg.capacity_budget_gib * 2**30) if cfg.capacity_budget_gib else int(free - (4 << 30))
    for backend in ("recurrent", "replay"):
        payload["capacity"][backend] = max_concurrency(model, backend, cfg, budget)
    payload["capacity"]["budget_bytes"] = budget
    payload["capacity"]["context"] = cfg.capacity_context
    print(f"max concurrency in {budget / 2**30:.1f} GiB at {cfg.capacity_context} tokens of context: recurrent "
          f"{payload['capacity']['recurrent']}, replay {payload['capacity']['replay']}", flush=True)  # fmt: skip
    ok = [r for r in payload["rows"] if not r.get("oom")]
    by = {(r["mode"], r["C"]): r for r in ok}
    for r in ok:
        if r["mode"] in ("replay", "replay-mtp"):
            for other in ("recurrent", "plain"):
                if (other, r["C"]) in by:
                    r[f"speedup_vs_{other}"] = r["tokens_per_s"] / by[(other, r["C"])]["tokens_per_s"]
    cols = [
        ("C", "C", "d"), ("mode", "mode", "s"), ("tokens_per_s", "tok/s", ".1f"), ("tpot_ms_median", "TPOT p50", ".2f"),
        ("tpot_ms_p90", "TPOT p90", ".2f"), ("gdn_state_ms", "GDN ms", ".2f"), ("commit_ms", "commit ms", ".2f"),
        ("draft_ms", "draft ms", ".2f"), ("draft_share", "draft/step", ".3f"), ("rest_ms", "rest ms", ".2f"),
        ("peak_gpu_bytes", "peak GB", ".3g"),
        ("speedup_vs_recurrent", "vs recur", ".2f"), ("speedup_vs_plain", "vs plain", ".2f"),
    ]  # fmt: skip
    for r in ok:
        r["peak_gpu_bytes"] = r["peak_gpu_bytes"] / 1e9
    payload["table"] = format_table(ok, cols)
    write_json(out_dir / f"{tag}.json", payload)
    names = {"plain": "plain decode", "recurrent": "recurrent spec", "replay": "ReplaySSM spec",
             "replay-mtp": "ReplaySSM spec, MTP drafts"}  # fmt: skip
    series = [(m, names[m]) for m in cfg.modes]
    panels = []
    for key, title in (("tokens_per_s", "output tokens/s"), ("tpot_ms_median", "median TPOT (ms)")):
        rows = [{"C": r["C"], **{m: r[key] for m in cfg.modes if r["mode"] == m}} for r in ok]
        panels.append((title, rows, series))
    plot_lines(out_dir / f"{tag}.png", panels, "C", "", header(env))
    print(payload["table"], flush=True)
    return payload
