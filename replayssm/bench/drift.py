"""``replayssm drift``: accuracy of the committed state over long generations.

(a) the recurrent baseline, (b) ReplaySSM with the closed-loop exact fold, (c) the EXPERIMENTAL
open-loop fold (``bench.openloop``). Two measurements:

- teacher forcing: (a) drives a speculative greedy generation; (b) and (c) are lockstep pools fed
  exactly (a)'s per-layer inputs, so any difference in their committed states is numerical drift of
  the state itself, never token divergence. Reported every ``every`` tokens: relative error of the
  committed state (all GDN layers) against (a), and whether (b) is bitwise equal.
- free running: each variant generates greedily on its own (plain decode); reported: the first
  token that differs from (a), the top-1/top-2 logit margin of (a) at that position (a near-tie
  flips under output rounding), and the fraction of repeated 4-grams in the last window.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import torch

from ..engine.engine import Engine
from ..engine.runner import ModelRunner, RunnerConfig, pool_config
from ..state import GDNStatePool
from ..state.lockstep import LockstepPool
from .config_checks import count, flag
from .openloop import OpenLoopReplayPool


@dataclass(frozen=True)
class DriftConfig:
    tokens: int = 16384
    every: int = 512
    window: int = 4
    ring_len: int | None = None  # None: derived from the window (RunnerConfig.ring_len)
    repetition_window: int = 512
    cuda_graphs: bool = True

    def __post_init__(self):
        for name in ("tokens", "every", "repetition_window"):
            count("DriftConfig", name, getattr(self, name))
        count("DriftConfig", "window", self.window, 2)  # n-gram drafts: a window of 2 or more
        flag("DriftConfig", "cuda_graphs", self.cuda_graphs)


def repetition(tokens: list[int], window: int, n: int = 4) -> float:
    """Fraction of the n-grams in the last ``window`` tokens that already occurred earlier in that window."""
    t = tokens[-window:]
    grams = [tuple(t[i : i + n]) for i in range(len(t) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300)).item()


def teacher_forced(model, prompt: list[int], cfg: DriftConfig, progress=None) -> list[dict]:
    """Checks every ``cfg.every`` generated tokens and at the end (``cfg.tokens``); ``progress(n)`` is called
    with the number of tokens each step generated."""
    rc = RunnerConfig(
        backend="recurrent",
        max_slots=1,
        max_len=len(prompt) + cfg.tokens + 2 * cfg.window,
        window=cfg.window,
        ring_len=cfg.ring_len,
        cuda_graphs=cfg.cuda_graphs,
        validate=False,
    )
    pc = pool_config(model, rc)
    base = GDNStatePool(pc)
    exact = GDNStatePool(replace(pc, backend="replay"))
    open_loop = OpenLoopReplayPool(replace(pc, backend="replay"))
    runner = ModelRunner(model, rc, pool=LockstepPool(base, exact, open_loop))
    eng = Engine(runner, drafter="ngram")
    # room for one window past the last check: the request must still hold its slot when it is measured
    req = eng.add(prompt, cfg.tokens + cfg.window)
    rows, next_mark, done = [], cfg.every, 0
    while len(req.generated) < cfg.tokens and eng.step():
        if progress is not None:
            progress(min(len(req.generated), cfg.tokens) - done)
            done = min(len(req.generated), cfg.tokens)
        if len(req.generated) < min(next_mark, cfg.tokens):
            continue
        while next_mark <= len(req.generated):
            next_mark += cfg.every
        s = torch.tensor([req.slot], dtype=torch.int32, device=runner.device)
        a = torch.cat([base.committed_state(i, s) for i in range(base.cfg.num_layers)])
        b = torch.cat([exact.committed_state(i, s) for i in range(base.cfg.num_layers)])
        c = torch.cat([open_loop.committed_state(i, s) for i in range(base.cfg.num_layers)])
        rows.append(
            {
                "tokens": len(req.generated),
                "exact_rel_err": _rel(b, a),
                "exact_bitwise": torch.equal(a, b),
                "open_loop_rel_err": _rel(c, a),
                "mean_accepted": sum(req.accepted) / len(req.accepted),
            }
        )
    return rows


@torch.no_grad()
def free_running(model, prompt: list[int], variant: str, cfg: DriftConfig, progress=None) -> tuple[list, list]:
    """Greedy plain decode; returns the tokens and the top-1/top-2 logit margin at every position
    (``progress(1)`` after each token)."""
    backend = "recurrent" if variant == "recurrent" else "replay"
    rc = RunnerConfig(
        backend=backend,
        max_slots=1,
        max_len=len(prompt) + cfg.tokens + 2,
        window=1,
        ring_len=cfg.ring_len,
        cuda_graphs=cfg.cuda_graphs,
        validate=False,
    )
    runner = ModelRunner(model, rc, pool=OpenLoopReplayPool(pool_config(model, rc)) if variant == "open_loop" else None)
    slot = runner.alloc()
    logits = runner.prefill(slot, prompt)
    tokens, margins = [], []
    for _ in range(cfg.tokens):
        top = torch.topk(logits.float(), 2)
        tokens.append(int(top.indices[0]))
        margins.append(float(top.values[0] - top.values[1]))
        if progress is not None:
            progress(1)
        if len(tokens) == cfg.tokens:
            break
        logits = runner.step([slot], torch.tensor([[tokens[-1]]]))[0, 0]
        runner.commit([1])
    return tokens, margins


VARIANTS = ("recurrent", "exact", "open_loop")


def run_drift(model, prompts: list[list[int]], cfg: DriftConfig, progress=None) -> dict:
    """``progress(phase, n)``: ``n`` more tokens generated in ``phase`` (4 phases of ``cfg.tokens`` per prompt)."""
    out = {"config": asdict(cfg), "teacher_forced": [], "free_running": []}
    for i, p in enumerate(prompts):
        tick = (lambda phase: lambda n: progress(phase, n)) if progress else (lambda phase: None)
        out["teacher_forced"].append(teacher_forced(model, p, cfg, tick(f"prompt {i}: teacher-forced")))
        runs = {v: free_running(model, p, v, cfg, tick(f"prompt {i}: free-running {v}")) for v in VARIANTS}
        base, margins = runs["recurrent"]
        row = {"prompt_tokens": len(p), "tokens": len(base)}
        for v in ("exact", "open_loop"):
            toks = runs[v][0]
            first = next((i for i, (x, y) in enumerate(zip(base, toks)) if x != y), None)
            row[v] = {
                "first_diff": first,
                "margin_at_first_diff": margins[first] if first is not None else None,
                "repetition": repetition(toks, cfg.repetition_window),
            }
        row["recurrent"] = {"repetition": repetition(base, cfg.repetition_window)}
        out["free_running"].append(row)
    return out


def load_drift_model(spec: str, device, dtype, layers: int | None = None):
    """ "tiny" (the embedded model), a model folder, or a preset of ``models.presets`` (real widths, random weights;
    ``layers`` keeps its first n layers, default all)."""
    from pathlib import Path

    from ..models.loader import load_model, load_tokenizer
    from ..models.presets import PRESETS

    if spec in PRESETS:
        from .synthetic import preset_config, random_model

        model = random_model(preset_config(spec, layers), device=device, dtype=dtype)
        g = torch.Generator().manual_seed(0)
        prompts = [torch.randint(0, model.config.vocab_size, (64,), generator=g).tolist() for _ in range(3)]
        return model, prompts
    from ..tiny import TINY_MODEL, TINY_PROMPTS

    path = Path(TINY_MODEL if spec == "tiny" else spec)
    model = load_model(path, dtype=dtype, device=device)
    if (path / "tokenizer.json").is_file():
        tok = load_tokenizer(path)
        return model, [tok.encode(p).ids for p in TINY_PROMPTS]
    g = torch.Generator().manual_seed(0)
    return model, [torch.randint(0, model.config.vocab_size, (32,), generator=g).tolist() for _ in range(3)]
