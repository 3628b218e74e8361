"""Argument checks of the engine's public calls. They run on the host before anything is written or launched
(never inside a captured CUDA graph): a call that fails them leaves every slot, page and request as it was."""

from __future__ import annotations

import math
import numbers

import torch

from ..ops._ints import is_int
from .accept import GREEDY_BELOW, Greedy, Prescribed, Sampling


def check_positive_int(name: str, val) -> int:
    if not is_int(val) or val < 1:
        raise ValueError(f"{name}={val!r}: must be a positive int")
    return int(val)


TEMPERATURE_MAX = float(torch.finfo(torch.float32).max)  # the sampler holds the temperature as an fp32


def check_temperature(val) -> float:
    """A finite number from 0 to fp32's largest (the sampler holds it as an fp32); below ``GREEDY_BELOW`` it is 0
    (greedy): logits / 1e-40 overflow fp32, and a sample at such a temperature is the argmax anyway."""
    if (not isinstance(val, numbers.Real) or isinstance(val, bool) or not math.isfinite(val) or val < 0
            or val > TEMPERATURE_MAX):  # fmt: skip
        raise ValueError(f"temperature={val!r}: must be a finite number from 0 (greedy) to {TEMPERATURE_MAX:.6g} "
                         "(fp32's largest)")  # fmt: skip
    return 0.0 if val < GREEDY_BELOW else float(val)


def check_seed(val) -> int:
    """An int in [0, 2**63) (what ``torch.Generator.manual_seed`` takes), NumPy integers included."""
    if not is_int(val) or not 0 <= val < 2**63:
        raise ValueError(f"seed={val!r}: must be an int from 0 to 2**63 - 1")
    return int(val)


def check_token_ids(ids, vocab: int, name: str = "token ids") -> None:
    """``ids``: an integer tensor, or a sequence of ints, all in [0, vocab)."""
    if isinstance(ids, torch.Tensor):
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise TypeError(f"{name} must be integers, got a {ids.dtype} tensor")
        if ids.is_meta:
            raise ValueError(f"{name} must be on the CPU or the model's device, got a meta tensor (it has no values)")
        wide = ids.long()  # (a uint8 id compared with a vocabulary of more than 255 would wrap)
        bad = ids[(wide < 0) | (wide >= vocab)].tolist() if ids.numel() else []
    else:
        wrong = [t for t in ids if not is_int(t)]
        if wrong:
            raise TypeError(f"{name} must be ints, got {wrong[:3]!r}")
        bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"{name} {bad[:5]} are outside the vocabulary [0, {vocab})")


def check_int_list(name: str, vals, n: int, lo: int, hi: int) -> list[int]:
    """``vals``: a list of ``n`` ints in [lo, hi]."""
    if not isinstance(vals, (list, tuple)):
        raise ValueError(f"{name} must be a list of {n} ints (one per row), got {type(vals).__name__}")
    if len(vals) != n:
        raise ValueError(f"{name} has {len(vals)} entries for a step of {n} rows")
    kinds = [v for v in vals if not is_int(v)]  # (is_int refuses bools: True is not a count)
    if kinds:
        raise TypeError(f"{name} must hold ints, got {kinds[:5]!r:.80}")
    bad = [v for v in vals if not lo <= v <= hi]
    if bad:
        raise ValueError(f"{name} {bad[:5]} are outside [{lo}, {hi}]")
    return [int(v) for v in vals]


def check_tokens(tokens, window: int, device_drafts: bool = False) -> tuple[int, int]:
    """A step's tokens: an integer [B, T] tensor on the CPU or the device, B >= 1, 1 <= T <= window (a device-drafted
    step's: [B, 1])."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.shape[0] == 0:
        got = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else f"{tokens!r:.60}"
        raise ValueError(f"tokens must be a [B, T] tensor of token ids with B >= 1, got {got}")
    if tokens.dtype not in (torch.int64, torch.int32):  # what the embedding takes (uint8, int16 would fail in it)
        raise TypeError(f"tokens must be integers: int64 (or int32) token ids, got {tokens.dtype}")
    B, T = tokens.shape
    if device_drafts and T != 1:
        raise ValueError(f"tokens has windows of {T} tokens; with device_drafts=True they are [B, 1], each row's last "
                         "emitted token (the drafter fills the window)")  # fmt: skip
    if not 1 <= T <= window:
        raise ValueError(f"tokens has windows of {T} tokens; this runner verifies 1..{window} (window={window})")
    return B, T


def check_slots(slots, n: int, live: set[int]) -> list[int]:
    """A step's rows: ``n`` distinct slots, each allocated (in ``live``)."""
    if not isinstance(slots, (list, tuple)) or len(slots) != n:
        raise ValueError(f"slots must list one slot per row of tokens ({n} rows), got {slots!r:.80}")
    if any(not is_int(s) for s in slots) or len(set(slots)) != n:
        raise ValueError(f"slots must be {n} distinct ints, got {list(slots)}")
    dead = [s for s in slots if s not in live]
    if dead:
        raise ValueError(f"slots {dead} are not allocated (alloc() or restore() them first)")
    return [int(s) for s in slots]


def check_uniforms(uniforms, B: int, T: int) -> None:
    """Sampling's host-drawn uniforms: a finite fp32 [B, 2T] tensor in [0, 1) (as ``torch.rand`` draws: the
    inverse-CDF draw of a 1.0 would run past the last token with mass)."""
    if not isinstance(uniforms, torch.Tensor) or tuple(uniforms.shape) != (B, 2 * T):
        got = tuple(uniforms.shape) if isinstance(uniforms, torch.Tensor) else type(uniforms).__name__
        raise ValueError(f"uniforms must be a [{B}, {2 * T}] fp32 tensor for Sampling, got {got}")
    if uniforms.dtype != torch.float32 or not bool(((uniforms >= 0) & (uniforms < 1)).all()):
        raise ValueError("uniforms must be fp32 values in [0, 1)")


def check_acceptance(B: int, T: int, num_drafts, rule, prescribed, uniforms, temperature, device_drafts,
                     drafter_window: int | None) -> tuple:  # fmt: skip
    """``ModelRunner.step_and_commit``'s acceptance inputs for B rows of T tokens (1 with device drafts, whose
    window is ``drafter_window``: None when the runner has no device drafter). Returns the real draft counts
    and (prescribed, uniforms, temperature) as the device step reads them."""
    if not isinstance(rule, (Greedy, Sampling, Prescribed)):
        raise TypeError(f"rule must be Greedy(), Sampling(t) or Prescribed(), got {rule!r}")
    if not isinstance(device_drafts, bool):
        raise TypeError(f"device_drafts must be a bool, got {device_drafts!r}")
    if device_drafts:
        if drafter_window is None:
            raise ValueError("device_drafts needs a runner with a device drafter (RunnerConfig(device_drafter=))")
        if num_drafts is not None:
            raise ValueError("num_drafts must be None with device_drafts (the drafter fills the window)")
        T = drafter_window
        nd = [T - 1] * B
    else:
        nd = check_int_list("num_drafts", num_drafts, B, 0, T - 1)
    if isinstance(rule, Prescribed):
        prescribed = check_int_list("prescribed", prescribed, B, 1, T)
    elif prescribed is not None:
        raise ValueError("prescribed is read by the Prescribed rule only")
    if isinstance(rule, Sampling):
        check_uniforms(uniforms, B, T)  # (first: a missing one is the likelier slip than the temperature)
        if check_temperature(temperature) == 0 or temperature != rule.temperature:
            raise ValueError(f"temperature={temperature!r} must be >= {GREEDY_BELOW} and equal Sampling.temperature "
                             f"({rule.temperature!r}): pass temperature={rule.temperature!r}")  # fmt: skip
    elif uniforms is not None:
        raise ValueError("uniforms are read by the Sampling rule only")
    return nd, (prescribed, uniforms, float(temperature) if isinstance(rule, Sampling) else 1.0)


def check_prompts(ids, vocab: int, window: int, max_len: int) -> None:
    """``ModelRunner.prefill``'s prompts: a non-empty list of non-empty token-id lists in [0, vocab), the longest
    with a window after it within ``max_len``."""
    if not isinstance(ids, (list, tuple)) or not ids:
        raise ValueError(f"ids must be a non-empty list of prompts (token-id lists), got {ids!r:.80}")
    for i, p in enumerate(ids):
        if not isinstance(p, (list, tuple)) or not p:
            raise ValueError(f"prompt {i} must be a non-empty list of token ids, got {p!r:.80}")
        check_token_ids(p, vocab, f"prompt {i} token ids")
    longest = max(len(p) for p in ids)
    if longest + window > max_len:
        raise ValueError(f"prompt of {longest} tokens + window {window} exceeds max_len={max_len}")
