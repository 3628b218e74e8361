"""Drafting and acceptance: the pure functions of speculative decoding."""

from __future__ import annotations

import torch

from .checks import check_positive_int


class NgramDrafter:
    """Prompt-lookup drafting: after the most recent earlier occurrence of the context's last n tokens
    (n = max_n down to min_n) within the last ``lookback`` tokens, propose the tokens that followed it.
    Deterministic; may propose fewer than asked. The lookback bounds the host cost per step."""

    def __init__(self, max_n: int = 3, min_n: int = 1, lookback: int = 2048):
        for name, value in (("max_n", max_n), ("min_n", min_n), ("lookback", lookback)):
            check_positive_int(name, value)
        if not min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        self.max_n, self.min_n, self.lookback = int(max_n), int(min_n), int(lookback)

    def propose(self, context: list[int], k: int) -> list[int]:
        """Up to ``k`` tokens that followed the latest earlier occurrence of ``context``'s last n tokens."""
        if k <= 0:
            return []
        context = context[-self.lookback :]
        for n in range(min(self.max_n, len(context) - 1), self.min_n - 1, -1):
            tail = tuple(context[-n:])
            first = tail[0]
            for start in range(len(context) - n - 1, -1, -1):
                if context[start] == first and tuple(context[start : start + n]) == tail:
                    return context[start + n : start + n + k]
        return []


def accept_greedy(argmax: list[int], drafts: list[int]) -> tuple[int, list[int]]:
    """Window = [pending, *drafts]; argmax[i] is the model's token after window position i.

    Returns (num_accepted, new_tokens): the window positions kept (1 + matching drafts) and the tokens
    produced by this step (accepted drafts + the bonus token).
    """
    n = 1
    while n - 1 < len(drafts) and drafts[n - 1] == argmax[n - 1]:
        n += 1
    return n, drafts[: n - 1] + [argmax[n - 1]]


def accept_sampling(probs: torch.Tensor, drafts: list[int], gen: torch.Generator) -> tuple[int, list[int]]:
    """Speculative sampling with a deterministic drafter (q = one-hot at the draft).

    probs: [T, vocab] target probabilities at each window position (CPU). Draft d at position i is
    accepted with probability p_i(d); on rejection the replacement is drawn from p_i with d removed
    (the normalised residual max(p - q, 0)); if all drafts pass, a bonus token is drawn from p_T.
    The output distribution equals sampling from the target model token by token.
    """
    out = []
    for i, d in enumerate(drafts):
        p = probs[i]
        if torch.rand((), generator=gen) < p[d]:
            out.append(d)
            continue
        resid = p.clone()
        resid[d] = 0
        if resid.sum() <= 0:  # p was one-hot at d: cannot happen after a rejection, kept for safety
            resid = p
        out.append(int(torch.multinomial(resid / resid.sum(), 1, generator=gen)))
        return i + 1, out
    out.append(int(torch.multinomial(probs[len(drafts)], 1, generator=gen)))
    return len(drafts) + 1, out


class BenchmarkAcceptance:
    """FOR BENCHMARKS ONLY: accept a prescribed mean number of tokens per step, ignoring the model.

    The generated text is meaningless; this exists so that backends can be timed at a fixed mean
    acceptance. The engine only takes it through ``Engine(..., benchmark_acceptance=...)``, and the
    constructor refuses to build one unless ``meaningless_outputs=True`` is passed explicitly.
    """

    def __init__(self, mean_accepted: float, window: int, *, seed: int = 0, meaningless_outputs: bool = False):
        if meaningless_outputs is not True:
            raise ValueError(
                "BenchmarkAcceptance makes the engine emit meaningless tokens; pass meaningless_outputs=True"
            )
        if not 1 <= mean_accepted <= window:
            raise ValueError(f"mean_accepted must be in [1, {window}], got {mean_accepted}")
        self.mean, self.window = mean_accepted, window
        self.alpha = draft_acceptance_rate(mean_accepted, window)
        self.gen = torch.Generator().manual_seed(seed)

    def draw(self, n: int) -> list[int]:
        """num_accepted for n rows: 1 + the drafts accepted before the first rejection, each of the T-1 drafts
        accepted independently with probability ``alpha`` (the usual model of speculative decoding), so that the
        expectation is ``mean``. Rows and steps differ, as they do with a real drafter: a fixed count per row
        (every row accepting exactly 3 at a mean of 3.0) would make every row's ring fill, and fold, in the same
        step (docs/engine.md)."""
        ok = torch.rand(n, self.window - 1, generator=self.gen) < self.alpha
        return (1 + torch.cumprod(ok.to(torch.int32), 1).sum(1)).tolist()


def draft_acceptance_rate(mean_accepted: float, window: int) -> float:
    """The per-draft acceptance probability a whose expected tokens per step, 1 + a + ... + a^(window-1), is
    ``mean_accepted`` (bisection; 0 at a mean of 1, 1 at a mean of ``window``)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**i for i in range(window)) < mean_accepted:
            lo = mid
        else:
            hi = mid
    return lo if mean_accepted < window else 1.0
