"""Acceptance on the device: the rules of ``engine.spec`` for a whole batch, without leaving the GPU.

A step's window per row is ``window[b] = [last token, d_0, .., d_{T-2}]`` of which the first ``num_drafts[b]``
drafts are real (a host drafter may propose fewer; the rest is padding that is never accepted). Every function
here returns ``num_accepted`` [B] int32 (1 + accepted drafts) and ``tokens`` [B, T] int64 whose first
``num_accepted[b]`` entries are the tokens the step produced (accepted drafts, then the bonus or replacement
token); later entries are unspecified. They are plain tensor ops with shapes fixed by (B, T, vocab), no value
read back, so the runner captures them in the step's CUDA graph and only these [B, T + 1] integers cross to
the host. ``engine.spec.accept_greedy`` and ``accept_sampling`` are the per-row host references.

Randomness comes in as uniforms drawn on the host from the engine's seeded generator (``uniforms`` [B, 2T]:
T-1 acceptance draws, then T sampling draws): sampling stays reproducible per seed, and nothing random
happens inside the graph. Sampling from a distribution uses the inverse CDF with one uniform.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

GREEDY_BELOW = 1e-5  # a temperature below this samples as greedy decoding does (as vLLM treats it)


@dataclass(frozen=True)
class Greedy:
    """Keep the drafts that match the target's argmax; the bonus token is the argmax after them."""


@dataclass(frozen=True)
class Sampling:
    """Speculative sampling at ``temperature`` >= ``GREEDY_BELOW`` (drafts are deterministic: a one-hot draft
    distribution); below it, use ``Greedy``."""

    temperature: float

    def __post_init__(self):
        t = self.temperature
        if not isinstance(t, numbers.Real) or isinstance(t, bool) or not math.isfinite(t) or t < GREEDY_BELOW:
            raise ValueError(f"Sampling(temperature={t!r}): must be a finite number >= {GREEDY_BELOW} (below it, "
                             "use Greedy)")  # fmt: skip


@dataclass(frozen=True)
class Prescribed:
    """FOR BENCHMARKS ONLY: the accepted counts are given (``BenchmarkAcceptance``); the tokens are the argmax."""


Rule = Greedy | Sampling | Prescribed


def _leading(ok: torch.Tensor) -> torch.Tensor:
    """[B, K] bool -> [B] the length of each row's all-True prefix."""
    return torch.cumprod(ok.to(torch.int32), 1).sum(1, dtype=torch.int32)


def _positions(B: int, T: int, device) -> torch.Tensor:
    return torch.arange(T, device=device)[None, :].expand(B, T)


def accept_greedy_device(logits: torch.Tensor, window: torch.Tensor, num_drafts: torch.Tensor):
    """logits [B, T, vocab] (any float dtype; the argmax is exact in it); window [B, T] int64; num_drafts [B]."""
    B, T = window.shape
    argmax = logits.argmax(-1)  # [B, T]
    real = _positions(B, T - 1, window.device) < num_drafts[:, None]
    n = 1 + _leading((window[:, 1:] == argmax[:, :-1]) & real)
    return n, argmax  # where a draft was accepted it equals the argmax, so the argmax row is the output


def sample_inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One draw per row of ``probs`` [R, vocab] (non-negative, not necessarily normalised) with uniforms
    u [R] in [0, 1): the first token whose cumulative mass exceeds u * total. A zero-mass token is never drawn."""
    cdf = probs.float().cumsum(-1)
    x = (u * cdf[:, -1]).unsqueeze(1)
    return torch.searchsorted(cdf, x, right=True).squeeze(1).clamp_(max=probs.shape[-1] - 1)


def accept_sampling_device(logits: torch.Tensor, window: torch.Tensor, num_drafts: torch.Tensor,
                           uniforms: torch.Tensor, temperature: torch.Tensor):  # fmt: skip
    """Speculative sampling (``engine.spec.accept_sampling`` for every row at once).

    p_i = softmax(logits[:, i] / temperature) in fp32. Draft d_i is accepted with probability p_i(d_i)
    (``uniforms[:, i] < p_i(d_i)``); at the first rejection j the replacement is drawn from p_j with d_j
    removed (the normalised residual), and when every real draft passes the bonus is drawn from p_{num_drafts}.
    uniforms [B, 2T] fp32, temperature [B] fp32 > 0 (per row)."""
    B, T, V = logits.shape
    p = torch.softmax(logits.float() / temperature[:, None, None], -1)  # [B, T, V]
    drafts = window[:, 1:]
    real = _positions(B, T - 1, window.device) < num_drafts[:, None]
    p_draft = p[:, :-1].gather(2, drafts[..., None]).squeeze(2)  # [B, T-1]
    n = 1 + _leading((uniforms[:, : T - 1] < p_draft) & real)
    j = (n - 1).long()  # the position that is resampled
    rows = torch.arange(B, device=logits.device)
    pj = p[rows, j]  # [B, V]
    removed = torch.where(j < num_drafts, window.gather(1, torch.clamp(j + 1, max=T - 1)[:, None]).squeeze(1), -1)
    resid = pj.scatter(1, removed.clamp(min=0)[:, None], 0.0)
    resid = torch.where((removed >= 0)[:, None] & (resid.sum(1, keepdim=True) > 0), resid, pj)
    last = sample_inverse_cdf(resid, uniforms[rows, T - 1 + j])
    tokens = torch.cat([drafts, window[:, :1]], 1).scatter(1, j[:, None], last[:, None])
    return n, tokens


def accept_device(rule: Rule, logits: torch.Tensor, window: torch.Tensor, num_drafts: torch.Tensor, *,
                  uniforms: torch.Tensor, temperature: torch.Tensor, prescribed: torch.Tensor):  # fmt: skip
    """Dispatch on the rule; ``prescribed`` [B] int32 is read by ``Prescribed`` only, the uniforms and
    temperatures by ``Sampling`` only."""
    if isinstance(rule, Greedy):
        return accept_greedy_device(logits, window, num_drafts)
    if isinstance(rule, Sampling):
        return accept_sampling_device(logits, window, num_drafts, uniforms, temperature)
    if isinstance(rule, Prescribed):
        return prescribed.to(torch.int32), logits.argmax(-1)
    raise TypeError(f"rule must be Greedy, Sampling or Prescribed, got {rule!r}")
