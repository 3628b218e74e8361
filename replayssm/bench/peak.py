"""Peak throughput in one memory budget: for each backend, the most requests of a given context that fit, and
the best tokens/s among a few concurrencies up to that.

A request holds ``context`` KV tokens (a paged cache sized for exactly that: the prompt, padding, and what the
run generates) and its GDN state; what fits is what really allocates (``max_concurrency`` builds the runner).
Throughput is then measured at the largest fitting concurrency and at the largest CUDA-graph batch size below
it (no padding rows), and the better one is the backend's peak: more requests are not always faster once the
step is compute-bound.
"""

from __future__ import annotations

import torch

from ..engine.runner import GRAPH_BATCH_SIZES
from .e2e import E2EConfig, _free, _runner, describe, lengths, measure, paged_tokens


def max_concurrency(model, mode: str, cfg: E2EConfig, budget_bytes: int, context: int) -> int:
    """The most slots of ``mode`` whose GDN pool + paged KV cache (``context`` tokens each) allocate within
    ``budget_bytes``."""
    cuda = next(model.parameters()).is_cuda
    base = torch.cuda.memory_allocated() if cuda else 0
    max_len = lengths(cfg, mode, cfg.peak_steps, context)[2]  # what run_mode allocates for the peak rows

    def fits(C):
        try:
            r = _runner(model, mode, C, cfg, max_len, kv_tokens=paged_tokens(C, max_len))
            used = torch.cuda.memory_allocated() - base if cuda else r.memory_report()["total"] + r.kv.nbytes
            ok = used <= budget_bytes
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


def run_peak(model, cfg: E2EConfig, prompts, machine: dict, budget_bytes: int) -> dict:
    """{mode: {"max_concurrency", "rows", "best"}} for every mode of ``cfg``, at ``cfg.capacity_context``."""
    out = {}
    ctx = cfg.capacity_context
    for mode in cfg.modes:
        C_max = max_concurrency(model, mode, cfg, budget_bytes, ctx)
        print(f"[peak {mode:>10}] {C_max} requests of {ctx} tokens fit in {budget_bytes / 2**30:.1f} GiB", flush=True)
        rows = []
        below = max((b for b in GRAPH_BATCH_SIZES if b < C_max), default=0)
        for C in sorted({C_max, below} - {0}, reverse=True):
            print(f"[peak {mode:>10} C={C:>4}] ...", end=" ", flush=True)
            row = measure(model, mode, C, cfg, prompts(C), machine, context=ctx, steps=cfg.peak_steps, phases=False)
            print(describe(row), flush=True)
            rows.append(row)
        ok = [r for r in rows if "tokens_per_s" in r]
        best = max(ok, key=lambda r: r["tokens_per_s"]) if ok else None
        out[mode] = {"max_concurrency": C_max, "rows": rows, "best": best}
    return out
