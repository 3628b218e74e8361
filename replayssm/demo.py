"""``replayssm demo``: the embedded hybrid model, decoded plainly and speculatively (n-gram and MTP drafts)
on both backends, with the accepted length of every prompt."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from .engine.engine import Engine
from .engine.runner import ModelRunner, RunnerConfig
from .models.config import ModelConfig
from .models.loader import load_model, load_tokenizer
from .tiny import TINY_MODEL, TINY_PROMPTS, heldout_prompts

# (backend, shadow backend, drafter): every speculative run of the demo
RUNS = (("recurrent", None, "ngram"), ("recurrent", None, "mtp"), ("replay", None, "ngram"), ("replay", None, "mtp"),
        ("replay", "recurrent", "mtp"))  # fmt: skip


def demo_prompts(model_dir=TINY_MODEL) -> list[tuple[str, str]]:
    """(label, text): the demo prompts, then the held-out ones shipped with the model."""
    return [(f"demo {i}", p) for i, p in enumerate(TINY_PROMPTS)] + [
        (f"held-out {p['file']}", p["text"]) for p in heldout_prompts(model_dir)
    ]


def _run(runner: ModelRunner, prompts: list[list[int]], max_new: int, drafter: str, check_lockstep=False,
         progress=None) -> dict:  # fmt: skip
    eng = Engine(runner, drafter=drafter)
    reqs = [eng.add(p, max_new) for p in prompts]
    bitwise, steps, done = True, 0, 0
    t0 = time.perf_counter()
    while True:
        more = eng.step()  # the last call (False) may still emit the tokens of the step it drained
        if progress is not None:
            now = sum(len(r.generated) for r in reqs)
            progress(now - done)
            done = now
        if not more:
            break
        steps += 1
        live = [r.slot for r in reqs if r.slot is not None]
        if check_lockstep and live:
            bitwise &= runner.states_equal(live)
    dt = time.perf_counter() - t0
    acc = [a for r in reqs for a in r.accepted]
    return {"tokens": [r.generated for r in reqs], "tokens_per_s": sum(len(r.generated) for r in reqs) / dt,
            "steps": steps, "bitwise_every_step": bitwise if check_lockstep else None,  # (None: not checked)
            "mean_accepted": sum(acc) / len(acc),
            "per_prompt": [sum(r.accepted) / len(r.accepted) for r in reqs]}  # fmt: skip


def check_positions(model_dir, max_new_tokens: int, window: int):
    """Before any weight loads: the demo's prompts, encoded, and their room in the model's positions (the longest
    prompt + ``max_new_tokens`` + the window + 1, a spare position the demo's runners keep (``_runner``), within
    ``max_position_embeddings``; ``ValueError`` otherwise). Returns (tokenizer, labelled prompts, token ids)."""
    tokenizer = load_tokenizer(model_dir)
    labelled = demo_prompts(model_dir)
    prompts = [tokenizer.encode(text).ids for _, text in labelled]
    limit = ModelConfig.from_file(Path(model_dir) / "config.json").max_position_embeddings
    longest = max(map(len, prompts))
    if limit is not None and longest + max_new_tokens + window + 1 > limit:
        raise ValueError(f"max_new_tokens={max_new_tokens}: the longest prompt ({longest} tokens) + max_new_tokens + "
                         f"the window ({window}) + 1 must fit the model's {limit} positions, so at most "
                         f"{limit - longest - window - 1}")  # fmt: skip
    return tokenizer, labelled, prompts


class ModelDemo:
    """The embedded model (or ``model_dir``) loaded once, its prompts encoded; ``run()`` does every run."""

    def __init__(self, model_dir=TINY_MODEL, max_new_tokens: int = 48, device=None, window: int = 4,
                 dtype: torch.dtype = torch.float32):  # fmt: skip
        """fp32 by default on every device: in bf16 a T-row verify and a 1-row decode round their GEMMs
        differently, so greedy speculative and plain outputs may legitimately part after a near tie. What
        replayssm guarantees at any dtype is replay == recurrent, bitwise (the lockstep run)."""
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = dtype
        self.tokenizer, self.labelled, self.prompts = check_positions(model_dir, max_new_tokens, window)
        self.max_new_tokens, self.window = max_new_tokens, window
        self.model = load_model(model_dir, mtp="auto", dtype=dtype, device=self.device)
        self.runs = [r for r in RUNS if self.model.mtp is not None or r[2] != "mtp"]

    @property
    def total_tokens(self) -> int:
        """Tokens generated in all (plain decoding + every speculative run)."""
        return len(self.prompts) * self.max_new_tokens * (1 + len(self.runs))

    def _runner(self, backend, shadow=None, T=None, drafter=None) -> ModelRunner:
        max_len = max(map(len, self.prompts)) + self.max_new_tokens + self.window + 1
        return ModelRunner(self.model, RunnerConfig(backend=backend, max_slots=len(self.prompts), max_len=max_len,
                                                    window=T or self.window, shadow_backend=shadow,
                                                    device_drafter=drafter))  # fmt: skip

    def run(self, *, progress=None, on_run=None) -> dict:
        """``progress(n)``: n more tokens generated; ``on_run(name, result)`` after each run, plain decoding
        first (name ``"plain"``, its result with the decoded ``samples``)."""
        on_run = on_run or (lambda name, res: None)
        n = self.max_new_tokens
        plain = _run(self._runner("recurrent", T=1), self.prompts, n, "none", progress=progress)
        samples = [(text, self.tokenizer.decode(t)) for (_, text), t in zip(self.labelled[: len(TINY_PROMPTS)],
                                                                            plain["tokens"])]  # fmt: skip
        out = {"device": str(self.device), "window": self.window, "prompts": self.labelled, "plain": plain,
               "runs": {}, "mtp": self.model.mtp is not None, "samples": samples}  # fmt: skip
        on_run("plain", {**plain, "samples": samples})
        for backend, shadow, drafter in self.runs:
            r = self._runner(backend, shadow, drafter="mtp" if drafter == "mtp" else None)
            res = _run(r, self.prompts, n, drafter, check_lockstep=shadow is not None, progress=progress)
            mem = r.memory_report()
            res.update(same_tokens_as_plain=res["tokens"] == plain["tokens"], lockstep=shadow is not None,
                       speculative_scratch_bytes=mem["snapshots"] + mem["rings"])  # fmt: skip
            name = f"{backend}+{shadow}-lockstep/{drafter}" if shadow else f"{backend}/{drafter}"
            out["runs"][name] = res
            on_run(name, res)
        return out


def run_model_demo(model_dir=TINY_MODEL, max_new_tokens: int = 48, device=None, window: int = 4,
                   dtype: torch.dtype = torch.float32) -> dict:  # fmt: skip
    return ModelDemo(model_dir, max_new_tokens, device, window, dtype).run()


def demo_passed(res: dict) -> bool:
    """Every speculative run gave the plain tokens, and every lockstep run was bitwise at every step."""
    return all(
        r["same_tokens_as_plain"] and (r["bitwise_every_step"] or not r["lockstep"]) for r in res["runs"].values()
    )
