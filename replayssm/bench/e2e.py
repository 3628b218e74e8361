"""``replayssm bench e2e``: end-to-end decoding of a Qwen3.5-shaped model on one GPU, per backend.

Modes, at each concurrency, same model and prompts: plain decode (no speculation), the recurrent
baseline speculative engine, and the ReplaySSM speculative engine, both speculative ones at the same
prescribed acceptance (``BenchmarkAcceptance``: the tokens are meaningless, the state traffic is
real) so that the comparison isolates the state handling. ``replay-mtp`` is the ReplaySSM engine
drafting with a (random) MTP head inside the step, at the same prescribed acceptance: what counts
there is the drafting's share of a step (``draft_ms``, timed alone as a CUDA graph). Every step is a
CUDA graph (forward, acceptance and commit: ``ModelRunner.launch``); times are wall-clock per engine
iteration (host work included). The engine overlaps its steps (``Engine(overlap=True)``: the next step is
launched before the previous one is read back) unless ``overlap=False`` (``--no-overlap``). Every row carries
the byte floor of its step (``bench.bytes``), and replay rows the byte-model bound over recurrent next to the
measured ratio; ``--peak`` finds each backend's best concurrency in one memory budget (``bench.peak``).
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import asdict, dataclass, replace

import torch

from ..engine.engine import Engine
from ..engine.runner import ModelRunner, RunnerConfig
from ..engine.spec import BenchmarkAcceptance
from ..models.step import Step, StepKind
from ..ops.ring import check_ring_geometry, ring_length_for
from .config_checks import choices, count, counts, flag, number
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
    ring_len: int | None = None  # None: derived from the window (RunnerConfig.ring_len)
    capacity_context: int = 1024
    capacity_budget_gib: float | None = None
    seed: int = 0
    modes: tuple[str, ...] = ("plain", "recurrent", "replay")
    phases: bool = True  # time the GDN state work alone (two extra graphs per row)
    peak: bool = False  # the peak-throughput search (bench.peak) after the rows
    peak_steps: int = 8
    draft_head: str = "auto"  # replay-mtp: the drafter's LM head ("auto", "model", "fp8"; engine/draft_head.py)
    draft_vocab: int | None = None  # replay-mtp: draft only the N lowest token ids (None: the whole vocabulary)
    overlap: bool = True  # the engine launches each step before reading the previous one back

    def __post_init__(self):
        own = "E2EConfig"
        counts(own, "concurrency", self.concurrency)
        for name in ("prompt_len", "steps", "window", "peak_steps"):
            count(own, name, getattr(self, name))
        count(own, "capacity_context", self.capacity_context, 0)
        count(own, "seed", self.seed, 0)
        choices(own, "modes", self.modes, MODES)
        number(own, "mean_accepted", self.mean_accepted)
        if not 1 <= self.mean_accepted <= self.window:
            raise ValueError(f"{own}.mean_accepted must be in [1, window={self.window}], got {self.mean_accepted}")
        number(own, "capacity_budget_gib", self.capacity_budget_gib, optional=True)
        for name in ("phases", "peak", "overlap"):
            flag(own, name, getattr(self, name))
        if self.layers is not None:
            count(own, "layers", self.layers)
        if self.ring_len is not None:  # a power of two >= 2 * window (RunnerConfig's rule)
            count(own, "ring_len", self.ring_len, 2)
            try:
                check_ring_geometry(self.ring_len, self.window)
            except ValueError as e:
                raise ValueError(f"{own}.ring_len: {e}") from None
        else:  # derived, as RunnerConfig does: the speculative modes' L
            object.__setattr__(self, "ring_len", ring_length_for(self.window))


def _free():
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class _Clock:
    """Milliseconds of one engine iteration, wall clock: the engine itself waits for the device (for the step it
    reads back), so an iteration's wall time is its share of the device's time plus whatever the host adds."""

    def start(self):
        self.t0 = time.perf_counter()

    def stop(self) -> float:
        return (time.perf_counter() - self.t0) * 1e3


def lengths(cfg: E2EConfig, mode: str, steps: int, context: int | None) -> tuple[int, int, int]:
    """(tokens generated per request, KV padding after the prompt, max_len) of a run of ``steps`` iterations;
    with ``context`` the padding puts the rows at that many KV tokens in the middle of the timed steps."""
    T = 1 if mode == "plain" else cfg.window
    max_new = (steps + 4) * T + 1
    extra = max(0, context - cfg.prompt_len - max_new // 2) if context else 0
    return max_new, extra, cfg.prompt_len + extra + max_new + T


def paged_tokens(C: int, max_len: int, page_size: int = 64) -> int:
    """KV tokens for C slots of ``max_len`` each in a paged cache: every slot rounds up to whole pages."""
    return C * -(-max_len // page_size) * page_size


def _runner(model, mode, C, cfg: E2EConfig, max_len, kv_tokens=None):
    backend = {"plain": "recurrent", "replay-mtp": "replay"}.get(mode, mode)
    window = 1 if mode == "plain" else cfg.window
    return ModelRunner(model, RunnerConfig(backend=backend, max_slots=C, max_len=max_len, window=window,
                                           ring_len=cfg.ring_len, cuda_graphs=True, validate=False,
                                           kv_tokens=kv_tokens,
                                           device_drafter="mtp" if mode == "replay-mtp" else None,
                                           draft_head=cfg.draft_head, draft_vocab=cfg.draft_vocab))  # fmt: skip


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


def run_mode(model, mode: str, C: int, cfg: E2EConfig, prompts, *, context: int | None = None,
             steps: int | None = None, phases: bool | None = None) -> dict:  # fmt: skip
    """One row: C requests of ``mode`` decoding for ``steps`` timed engine iterations. ``context``: the rows
    hold that many KV tokens in the middle of the run (the prompt, then padding: ``ModelRunner.pad_kv``), in a
    paged KV cache sized for exactly that (the peak mode); default: just the prompt and what is generated."""
    steps = steps or cfg.steps
    T = 1 if mode == "plain" else cfg.window
    max_new, extra, max_len = lengths(cfg, mode, steps, context)
    runner = _runner(model, mode, C, cfg, max_len, kv_tokens=paged_tokens(C, max_len) if context else None)
    bench = None
    if mode != "plain":
        bench = BenchmarkAcceptance(cfg.mean_accepted, T, seed=cfg.seed, meaningless_outputs=True)
    drafter = {"plain": "none", "replay-mtp": "mtp"}.get(mode, "ngram")
    eng = Engine(runner, drafter=drafter, benchmark_acceptance=bench, overlap=cfg.overlap)
    for p in prompts[:C]:
        eng.add(p, max_new)
    cuda = runner.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    eng.step()  # prefill everybody (batched) + first step (captures the graph)
    eng.drain()
    if extra:
        runner.pad_kv([r.slot for r in eng.requests], extra)
    eng.step()
    clock = _Clock()
    step_ms, tpot, tokens, held = [], [], 0, []
    for _ in range(steps):
        before = [len(r.generated) for r in eng.requests]
        held.append(sum(runner.kv_len(r.slot) for r in eng.requests if r.slot is not None) / C)
        clock.start()
        eng.step()
        ms = clock.stop()
        emitted = [len(r.generated) - b for r, b in zip(eng.requests, before)]
        step_ms.append(ms)
        tpot += [ms / n for n in emitted if n > 0]
        tokens += sum(emitted)
    eng.drain()
    mem = runner.memory_report()
    row = {
        "mode": mode, "C": C, "T": T, "steps": steps, "overlap": eng.overlap, "tokens": tokens,
        "context": statistics.mean(held),
        "tokens_per_s": tokens / (sum(step_ms) / 1e3), "step_ms_median": statistics.median(step_ms),
        "tpot_ms_median": statistics.median(tpot), "tpot_ms_p90": sorted(tpot)[int(0.9 * (len(tpot) - 1))],
        "mean_accepted": tokens / (C * steps), "peak_gpu_bytes": torch.cuda.max_memory_allocated() if cuda else 0,
        "snapshot_bytes": mem["snapshots"], "ring_bytes": mem["rings"],
        "state_bytes": mem["total"], "kv_bytes": runner.kv.nbytes,
    }  # fmt: skip
    if cuda and (cfg.phases if phases is None else phases):
        full = torch.full((C,), T, dtype=torch.int32, device=runner.device)  # T = 1 for plain decode
        row.update(_phase_times(runner, StepKind.DECODE if mode == "plain" else StepKind.VERIFY, C, T, lambda: full))
        row["draft_ms"] = _draft_ms(runner, C) if runner.drafter is not None else 0.0
        row["draft_share"] = row["draft_ms"] / row["step_ms_median"]
        row["rest_ms"] = row["step_ms_median"] - row["gdn_state_ms"] - row["commit_ms"] - row["draft_ms"]
    if runner.drafter is not None:
        row["draft_head"] = runner.drafter.head.kind
        row["draft_vocab"] = runner.drafter.head.vocab
    del eng, runner
    _free()
    return row


def describe(row: dict) -> str:
    if row.get("oom"):
        return "does not fit in GPU memory"
    if row.get("error"):
        return f"failed: {row['error']}"
    s = (f"{row['tokens_per_s']:9.1f} tok/s, step {row['step_ms_median']:.2f} ms (floor {row['floor_ms']:.2f} ms, "
         f"{row['x_floor']:.2f}x; serial {row['serial_floor_ms']:.2f} ms, {row['x_serial']:.2f}x), "
         f"TPOT median {row['tpot_ms_median']:.2f} ms")  # fmt: skip
    if "gdn_state_ms" in row:
        s += f" (GDN {row['gdn_state_ms']:.2f} + commit {row['commit_ms']:.2f} + rest {row['rest_ms']:.2f} ms)"
    return s


def measure(model, mode, C, cfg, prompts, machine, **kw) -> dict:
    """``run_mode`` with its floor (``bench.bytes``); a row that does not fit or fails is recorded as such."""
    from .bytes import step_bytes

    failed = None
    try:
        row = run_mode(model, mode, C, cfg, prompts, **kw)
    except torch.OutOfMemoryError:
        failed = {"mode": mode, "C": C, "oom": True}
    except Exception as e:  # noqa: BLE001 - one failing row must not lose the rest of a GPU run
        failed = {"mode": mode, "C": C, "error": f"{type(e).__name__}: {e}"[:300]}
    if failed is not None:  # freed only here: inside ``except`` the traceback still holds the failed runner
        _free()
        return failed
    sb = step_bytes(machine["model_bytes"], model.config, mode, C, row["T"], row["context"], ring_len=cfg.ring_len,
                    mean_accepted=1.0 if mode == "plain" else cfg.mean_accepted)  # fmt: skip
    row["bytes"] = sb.as_dict()
    row["byte_floor_ms"] = sb.total / machine["bandwidth"] * 1e3
    row["floor_ms"], row["floor_bound"] = sb.floor_ms(machine["bandwidth"], machine["gemm_rate"])
    row["x_floor"] = row["step_ms_median"] / row["floor_ms"]
    row["serial_floor_ms"] = sb.serial_ms(machine["bandwidth"], machine["gemm_rate"])
    row["x_serial"] = row["step_ms_median"] / row["serial_floor_ms"]
    return row


def run_e2e(cfg: E2EConfig, out_dir, tag: str = "e2e") -> dict:
    from pathlib import Path

    from .bytes import ModelBytes, gemm_rate
    from .e2e_report import compare, peak_summary, plot, tables
    from .peak import run_peak
    from .report import environment, header, write_json
    from .synthetic import preset_config, random_model
    from .timing import copy_bandwidth

    out_dir = Path(out_dir)
    env = environment()
    print(header(env), flush=True)
    mc = preset_config(cfg.preset, cfg.layers)
    kind = f"MoE, {mc.num_experts} experts, top {mc.top_k}" if mc.num_experts else "dense"
    print(f"building {cfg.preset} ({mc.num_layers} layers: {len(mc.gdn_layers)} GDN + {len(mc.attention_layers)} "
          f"attention; {kind}), random bf16 weights ...", flush=True)  # fmt: skip
    if "replay-mtp" in cfg.modes:  # a random one-layer MTP head, drafting on the device
        mc = replace(mc, mtp_num_hidden_layers=1)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # the CPU: a smoke run of the harness
    model = random_model(mc, seed=cfg.seed, device=dev, dtype=torch.bfloat16 if dev.type == "cuda" else torch.float32)
    model.fuse_projections()
    machine = {"bandwidth": copy_bandwidth(dev), "gemm_rate": gemm_rate(dev), "model_bytes": ModelBytes.of(model)}
    bw, rate, wb = machine["bandwidth"] / 1e12, machine["gemm_rate"] / 1e12, machine["model_bytes"].weights(1) / 1e9
    print(f"copy bandwidth {bw:.2f} TB/s, bf16 GEMM {rate:.0f} TFLOP/s, weights of a 1-token step {wb:.2f} GB",
          flush=True)  # fmt: skip
    g = torch.Generator().manual_seed(cfg.seed)
    pool = []

    def prompts(n):
        while len(pool) < n:
            pool.append(torch.randint(0, mc.vocab_size, (cfg.prompt_len,), generator=g).tolist())
        return pool[:n]

    payload = {"env": env, "config": asdict(cfg), "model": {"preset": cfg.preset, "layers": mc.num_layers,
               "experts": mc.num_experts}, "weights_bytes": sum(p.numel() * p.element_size() for p in
               model.parameters()), "bandwidth": machine["bandwidth"], "gemm_rate": machine["gemm_rate"],
               "rows": []}  # fmt: skip
    for C in cfg.concurrency:
        for mode in cfg.modes:
            print(f"[C={C:>3} {mode:>10}] ...", end=" ", flush=True)
            row = measure(model, mode, C, cfg, prompts(C), machine)
            print(describe(row), flush=True)
            payload["rows"].append(row)
            write_json(out_dir / f"{tag}.json", payload)
    compare(payload["rows"])
    if cfg.peak:
        free = torch.cuda.mem_get_info()[0] if dev.type == "cuda" else 0
        budget = int(cfg.capacity_budget_gib * 2**30) if cfg.capacity_budget_gib else int(free - (4 << 30))
        payload["peak_budget_bytes"], payload["peak_context"] = budget, cfg.capacity_context
        payload["peak"] = run_peak(model, cfg, prompts, machine, budget)
        payload["peak_summary"] = peak_summary(payload["peak"])
    payload["table"] = tables(payload)
    write_json(out_dir / f"{tag}.json", payload)
    plot(out_dir / f"{tag}.png", payload, cfg.modes, f"{header(env)}\n{cfg.preset}, T={cfg.window}, "
         f"{cfg.mean_accepted} accepted per step")  # fmt: skip
    print(payload["table"], flush=True)
    png = out_dir / f"{tag}.png"
    print(f"wrote {out_dir / f'{tag}.json'}" + (f" and {png}" if png.is_file() else ""))
    return payload
