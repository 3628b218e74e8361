"""``replayssm demo``: the embedded hybrid model, decoded plainly and speculatively (n-gram and MTP drafts)
on both backends, with the accepted length of every prompt."""

from __future__ import annotations

import time

import torch

from .engine.engine import Engine
from .engine.runner import ModelRunner, RunnerConfig
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


def _run(runner: ModelRunner, prompts: list[list[int]], max_new: int, drafter: str, check_lockstep=False) -> dict:
    eng = Engine(runner, drafter=drafter)
    reqs = [eng.add(p, max_new) for p in prompts]
    bitwise, steps = True, 0
    t0 = time.perf_counter()
    while eng.step():
        steps += 1
        live = [r.slot for r in reqs if r.slot is not None]
        if check_lockstep and live:
            bitwise &= runner.states_equal(live)
    dt = time.perf_counter() - t0
    acc = [a for r in reqs for a in r.accepted]
    return {"tokens": [r.generated for r in reqs], "tokens_per_s": sum(len(r.generated) for r in reqs) / dt,
            "steps": steps, "bitwise_every_step": bitwise, "mean_accepted": sum(acc) / len(acc),
            "per_prompt": [sum(r.accepted) / len(r.accepted) for r in reqs]}  # fmt: skip


def run_model_demo(model_dir=TINY_MODEL, max_new_tokens: int = 96, device=None, window: int = 4) -> dict:
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = load_model(model_dir, mtp="auto", dtype=dtype, device=device)
    tok = load_tokenizer(model_dir)
    labelled = demo_prompts(model_dir)
    prompts = [tok.encode(text).ids for _, text in labelled]
    max_len = max(map(len, prompts)) + max_new_tokens + window + 1

    def runner(backend, shadow=None, T=window, drafter=None):
        return ModelRunner(model, RunnerConfig(backend=backend, max_slots=len(prompts), max_len=max_len, window=T,
                                               shadow_backend=shadow, device_drafter=drafter))  # fmt: skip

    plain = _run(runner("recurrent", T=1), prompts, max_new_tokens, "none")
    out = {"device": str(device), "window": window, "prompts": labelled, "plain": plain, "runs": {},
           "mtp": model.mtp is not None}  # fmt: skip
    for backend, shadow, drafter in RUNS:
        if drafter == "mtp" and model.mtp is None:
            continue
        r = runner(backend, shadow, drafter="mtp" if drafter == "mtp" else None)
        res = _run(r, prompts, max_new_tokens, drafter, check_lockstep=shadow is not None)
        mem = r.memory_report()
        res.update(same_tokens_as_plain=res["tokens"] == plain["tokens"], lockstep=shadow is not None,
                   speculative_scratch_bytes=mem["speculative_scratch"] + mem["rings"])  # fmt: skip
        out["runs"][f"{backend}+{shadow}-lockstep/{drafter}" if shadow else f"{backend}/{drafter}"] = res
    out["samples"] = [(text, tok.decode(t)) for (_, text), t in zip(labelled[: len(TINY_PROMPTS)], plain["tokens"])]
    return out


def print_model_demo(res: dict, window: int) -> bool:
    head = "and its MTP head" if res["mtp"] else "(no MTP head: n-gram drafts only)"
    print(f"replayssm demo: embedded hybrid GDN model ({TINY_MODEL.name}) {head}, window T={window}, {res['device']}")
    for prompt, text in res["samples"]:
        print("-" * 72)
        print(prompt + text)
    print("-" * 72)
    runs = {k: v for k, v in res["runs"].items() if "lockstep" not in k}
    print("mean accepted tokens per step (plain decode: 1.00)")
    print(f"{'prompt':<40}" + "".join(f"{k:>17}" for k in runs))
    for i, (label, _) in enumerate(res["prompts"]):
        print(f"{label[:39]:<40}" + "".join(f"{v['per_prompt'][i]:>17.2f}" for v in runs.values()))
    print(f"{'all prompts':<40}" + "".join(f"{v['mean_accepted']:>17.2f}" for v in runs.values()))
    print("-" * 72)
    print(f"{'plain greedy decode':<36} {res['plain']['tokens_per_s']:8.1f} tokens/s, {res['plain']['steps']} steps")
    ok = True
    for name, b in res["runs"].items():
        kind = "ring records" if name.startswith("replay") else "per-token snapshots"
        print(f"{name:<36} {b['tokens_per_s']:8.1f} tokens/s, {b['steps']} steps, mean accepted "
              f"{b['mean_accepted']:.2f}/{window}, same tokens as plain: {b['same_tokens_as_plain']}, "
              f"scratch {b['speculative_scratch_bytes']:,} B ({kind})")  # fmt: skip
        if b["lockstep"]:
            print(f"{'':<36} committed state bitwise equal to the recurrent baseline at every step and layer: "
                  f"{b['bitwise_every_step']}")  # fmt: skip
            ok &= b["bitwise_every_step"]
        ok &= b["same_tokens_as_plain"]
    return ok
