"""``replayssm demo``: the embedded hybrid model, decoded plainly and speculatively on both backends."""

from __future__ import annotations

import time

import torch

from .engine.engine import Engine
from .engine.llm import LLM
from .tiny import TINY_MODEL, TINY_PROMPTS


def _run(llm: LLM, prompts, max_new, drafter, check_lockstep=False):
    eng = Engine(llm.runner, drafter=drafter)
    reqs = [eng.add(llm.encode(p), max_new) for p in prompts]
    bitwise, steps = True, 0
    t0 = time.perf_counter()
    while eng.step():
        steps += 1
        if check_lockstep:
            live = [r.slot for r in reqs if r.slot is not None]
            if live:
                bitwise &= llm.runner.states_equal(live)
    dt = time.perf_counter() - t0
    tokens = sum(len(r.generated) for r in reqs)
    acc = [a for r in reqs for a in r.accepted]
    return reqs, tokens / dt, (sum(acc) / len(acc) if acc else 1.0), bitwise, steps


def run_model_demo(model_dir=TINY_MODEL, max_new_tokens: int = 96, device=None, window: int = 4) -> dict:
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    kw = dict(device=device, max_slots=len(TINY_PROMPTS), max_len=512)
    plain = LLM(model_dir, backend="recurrent", drafter="none", **kw)
    ref, plain_tps, _, _, _ = _run(plain, TINY_PROMPTS, max_new_tokens, "none")
    out = {"device": str(device), "plain_tokens_per_s": plain_tps, "backends": {}}
    for backend, shadow in (("recurrent", None), ("replay", None), ("replay", "recurrent")):
        # with a shadow: the same engine, plus a recurrent pool fed the replay run's exact layer inputs
        llm = LLM(model_dir, backend=backend, window=window, shadow_backend=shadow, **kw)
        run = _run(llm, TINY_PROMPTS, max_new_tokens, "ngram", check_lockstep=bool(shadow))
        reqs, tps, mean_acc, bitwise, steps = run
        mem = llm.runner.memory_report()
        name = f"{backend}+{shadow}-lockstep" if shadow else backend
        out["backends"][name] = {
            "tokens_per_s": tps, "mean_accepted": mean_acc, "steps": steps, "bitwise_every_step": bitwise,
            "same_tokens_as_plain": all(a.generated == b.generated for a, b in zip(reqs, ref)),
            "speculative_scratch_bytes": mem["speculative_scratch"] + mem["rings"], "memory": mem,
        }  # fmt: skip
    out["samples"] = [(p, plain.decode(r.generated)) for p, r in zip(TINY_PROMPTS, ref)]
    return out


def print_model_demo(res: dict, window: int) -> bool:
    print(f"replayssm demo: embedded hybrid GDN model ({TINY_MODEL.name}), window T={window}, {res['device']}")
    for prompt, text in res["samples"]:
        print("-" * 72)
        print(prompt + text)
    print("-" * 72)
    print(f"plain greedy decode            {res['plain_tokens_per_s']:8.1f} tokens/s")
    ok = True
    for name, b in res["backends"].items():
        scratch = b["speculative_scratch_bytes"]
        kind = "ring records" if name.startswith("replay") else "per-token snapshots"
        print(f"{name:<30} {b['tokens_per_s']:8.1f} tokens/s, mean accepted {b['mean_accepted']:.2f}/{window}, "
              f"{b['steps']} steps, same tokens as plain: {b['same_tokens_as_plain']}, "
              f"scratch {scratch:,} B ({kind})")  # fmt: skip
        if "lockstep" in name:
            print(f"{'':<30} committed state bitwise equal to the recurrent baseline at every step and layer: "
                  f"{b['bitwise_every_step']}")  # fmt: skip
            ok &= b["bitwise_every_step"]
        ok &= b["same_tokens_as_plain"]
    return ok
