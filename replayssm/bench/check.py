"""Correctness gates run before any timing: candidates in lockstep with a reference step.

``lockstep`` drives a reference and candidate steps built from one ``StepCase`` through the same
verify -> commit steps (fresh random activations every step, one random acceptance per row shared
by all), long enough that every row folds at least once, and measures each candidate's worst
output and committed-state error against the reference. ``verdict`` turns that into pass / fail:

- ``bitwise`` (replayssm's ReplaySSM against replayssm's recurrent baseline): the committed state
  ``torch.equal`` after every step, outputs within ``OUT_BOUND``;
- ``tolerance`` (the peers, which are not bitwise to our baseline): outputs within ``OUT_BOUND`` and
  committed states within ``STATE_BOUND`` of replayssm's recurrent baseline (fp32 state).

Errors are norm-relative over all live rows, ``||x - ref|| / ||ref||``. ``OUT_BOUND = 1e-2``: bf16
outputs round at 2^-9 relative and the chunked verifies use tf32 dots (~1e-3); our replay measures
~1.6e-3. ``STATE_BOUND = 1e-2``: the peers are not bitwise to our baseline and some of their error
grows with the folds of a run: SGLang 0.5.23's compact fold is ~3-6e-4 off after a few folds, its
ring decode (both releases) rounds beta to the activation dtype (bf16: up to 2^-9 relative per
record, ~1e-3 in the state), 0.5.16's exact fold and the recurrent kernels differ from ours by
reduction order only (~1e-6). A kernel reading a wrong record or slot is off by 1e-1 or more.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch

from .steps import Step, StepCase, refresh_inputs

OUT_BOUND = 1e-2
STATE_BOUND = 1e-2


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.float(), ref.float()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def gate_steps(T: int, L: int) -> int:
    """Steps after which every row has folded at least once even if it accepts one token per step: its
    ring flags a fold once ``write_pos + 2T > L`` (at most ``L - 2T + 1`` steps) and folds at the next."""
    return max(8, L - 2 * T + 2)


def count_folds(history: list[tuple[list[int], list[int]]], T: int, L: int) -> int:
    """Slot-folds of the ring protocol (docs/design.md, "the ring protocol") over steps of (slots, accepted) per row."""
    write_pos: dict[int, int] = {}
    flush: dict[int, bool] = {}
    folds = 0
    for slots, accepted in history:
        for slot, n in zip(slots, accepted):
            if slot < 0:
                continue
            folds += flush.get(slot, False)
            write_pos[slot] = n if flush.get(slot, False) else write_pos.get(slot, 0) + n
            flush[slot] = write_pos[slot] + 2 * T > L
    return folds


def lockstep(case: StepCase, reference: Callable[[StepCase], Step], candidates: dict[str, Callable[[StepCase], Step]],
             *, steps: int | None = None, seed: int = 0, on_step=None) -> dict[str, dict]:  # fmt: skip
    """Run ``reference`` and every candidate builder on ``case`` (its acceptance replaced by a shared
    random one) for ``steps`` steps (default ``gate_steps``); per candidate: ``max_out_err``,
    ``max_state_err``, ``bitwise`` (committed state equal after every step), ``nan``, ``steps``,
    ``folds`` (slot-folds of the ring protocol over the run), and ``error`` if building or running the
    candidate raised (it is dropped from the run then; an error of the reference propagates).
    ``on_step(i)``, if given, runs before step ``i`` (tests use it to move rows to other slots or to
    padding)."""
    steps = steps or gate_steps(case.T, case.L)
    accepted = torch.ones(case.B, dtype=torch.int32, device=case.device)
    case = case.with_accept(lambda: accepted)
    rng = random.Random(seed)
    gen = torch.Generator(device=case.device).manual_seed(seed)
    ref = reference(case)
    stats = {label: {"max_out_err": 0.0, "max_state_err": 0.0, "bitwise": True, "nan": False} for label in candidates}
    cands = {}
    for label, build in candidates.items():
        try:
            cands[label] = build(case)
        except Exception as e:  # a peer that cannot run here is a failed gate, not a failed bench
            stats[label]["error"] = f"{type(e).__name__}: {e}"
    history = []
    for i in range(steps):
        if on_step is not None:
            on_step(i)
        live_tokens = torch.repeat_interleave(case.inputs["slots"] >= 0, case.T)
        row = [rng.randint(1, case.T) for _ in range(case.B)]
        history.append((case.inputs["slots"].tolist(), row))
        accepted.copy_(torch.tensor(row, dtype=torch.int32))
        refresh_inputs(case.inputs, gen)
        ref()
        for label, step in list(cands.items()):
            try:
                _compare(step, ref, case.layers, live_tokens, stats[label])
            except Exception as e:
                stats[label]["error"] = f"{type(e).__name__}: {e}"
                del cands[label]
    folds = count_folds(history, case.T, case.L)
    for s in stats.values():
        s.update(steps=steps, folds=folds)
    return stats


def _compare(step: Step, ref: Step, layers: int, live_tokens: torch.Tensor, s: dict) -> None:
    """One step of ``step``, then its outputs and committed states against the reference's, into ``s``."""
    step()
    for layer in range(layers):
        out, want = step.outputs[layer][live_tokens], ref.outputs[layer][live_tokens]
        s["nan"] |= bool(torch.isnan(out).any())
        s["max_out_err"] = max(s["max_out_err"], rel_err(out, want))
        got, want = step.committed(layer), ref.committed(layer)
        s["bitwise"] &= torch.equal(got, want)
        s["max_state_err"] = max(s["max_state_err"], rel_err(got, want))


def verdict(stats: dict, kind: str) -> dict:
    """``stats`` of one candidate plus ``kind``, ``passed`` and, when it failed, ``reason``."""
    out = dict(stats, kind=kind)
    reasons = [f"raised {stats['error']}"] if "error" in stats else []
    if stats["nan"]:
        reasons.append("NaN in the outputs")
    if not stats["max_out_err"] <= OUT_BOUND:
        reasons.append(f"output error {stats['max_out_err']:.2e} > {OUT_BOUND:.0e}")
    if kind == "bitwise" and not stats["bitwise"]:
        reasons.append("committed state not bitwise equal to the recurrent baseline")
    if kind == "tolerance" and not stats["max_state_err"] <= STATE_BOUND:
        reasons.append(f"committed-state error {stats['max_state_err']:.2e} > {STATE_BOUND:.0e}")
    out["passed"] = not reasons
    if reasons:
        out["reason"] = "; ".join(reasons)
    return out
