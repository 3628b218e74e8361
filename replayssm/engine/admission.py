"""What an engine may take from a shared paged KV cache (``RunnerConfig(kv_tokens=...)``): the pages a request can
ever need, what admitting or resuming one leaves for the running batch, and which running requests give way when a
step's pages do not fit.

The policy (docs/engine.md, "a shared KV cache"):

- ``Engine.add`` refuses a request that could not fit in the whole cache alone (``KVBudget.check_fits_alone``), so
  one running request always fits once the others give way.
- Admission is first come, first served: requests the engine preempted for room resume first (oldest first), then
  new ones in arrival order; it stops at the first that does not fit, so a long request is not passed over for
  ever. A request fits when its slot is free and its pages, with those the running requests need for their next
  two steps (``KVBudget.room``), are free.
- Before a step, if its pages are short, the newest running requests are preempted to the CPU (their state moves,
  exactly as ``Engine.preempt``) until the rest fit (``evict``); they resume by themselves when room comes back, and
  continue with identical tokens; if the step then fails, they are put back as they were (``put_back``).
- No count goes past what a request can ever reserve (``KVBudget.lifetime``).

A static cache (``kv_tokens=None``: ``max_len`` per slot) is never short: every check here passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .engine import Engine, Request
    from .runner import ModelRunner


class KVBudget:
    """The page arithmetic of one engine (``window`` T, the engine's) over its runner's KV cache."""

    def __init__(self, runner: ModelRunner, window: int):
        self.runner, self.kv, self.T = runner, runner.kv, window

    def lifetime(self, prompt_len: int, max_new_tokens: int) -> int:
        """The most KV positions a request ever reserves: its prompt + max_new_tokens + window, or its prompt + the
        runner's window (what its prefill reserves), capped at ``max_len`` (what ``add`` checks)."""
        need = max(prompt_len + max_new_tokens + self.T, prompt_len + self.runner.cfg.window)
        return min(need, self.kv.max_len)

    def check_fits_alone(self, tokens: int) -> None:
        """Raise when a request of ``tokens`` KV positions could not fit the whole cache alone."""
        kv = self.kv
        if kv.dynamic and kv.pages_for(tokens) > kv.num_pages:
            raise ValueError(f"the request needs {tokens} KV positions ({kv.pages_for(tokens)} pages of "
                             f"{kv.page_size}), the runner's shared KV cache holds {kv.num_pages * kv.page_size} "
                             f"(RunnerConfig.kv_tokens, {kv.num_pages} pages)")  # fmt: skip

    def _ahead(self, r: Request, tokens: int) -> int:
        """``tokens`` positions, but never past what ``r`` ever reserves."""
        return min(tokens, self.lifetime(len(r.prompt), r.max_new_tokens))

    def room(self, running: list[Request]) -> int:
        """Free pages once the running requests have pages for their next two steps (a step in flight and the
        next, or an overlapped pair), never past their lifetime (may be negative)."""
        lens = [self._ahead(r, self.runner.kv_len(r.slot) + 2 * self.T) for r in running]
        return self.kv.free_pages - self.kv.pages_needed([r.slot for r in running], lens)

    def pages(self, r: Request) -> int:
        """Pages a waiting request takes by its first step: a new one's prefill reserves the runner's window; a
        preempted one resumes with its tokens; either then steps (two steps' headroom, within its lifetime)."""
        n = int(r.parked.kv["lens"][0]) if r.parked is not None else len(r.prompt)
        extra = 2 * self.T if r.parked is not None else max(self.runner.cfg.window, 2 * self.T)
        return self.kv.pages_for(self._ahead(r, n + extra))

    def short(self, slots: list[int], ahead: int = 0) -> int:
        """Pages a step of ``slots`` (after ``ahead`` tokens of a step in flight) lacks; 0 or less: it fits."""
        lens = [self.runner.kv_len(s) + ahead + self.T for s in slots]
        return self.kv.pages_needed(slots, lens) - self.kv.free_pages


def pick(budget: KVBudget, candidates: list[Request], running: list[Request], free_slots: int) -> list[Request]:
    """The prefix of ``candidates`` (first come, first served) that free slots and pages can take now."""
    room, taken = budget.room(running), []
    for r in candidates:
        need = budget.pages(r)
        if len(taken) == free_slots or need > room:
            break
        taken.append(r)
        room -= need
    return taken


def evict(eng: Engine, batch: list[Request]) -> tuple[list[Request], list[tuple[Request, int]]]:
    """``batch`` less its newest requests, preempted to the CPU until the rest's step has its KV pages (a shared
    cache only; one request always fits: ``add`` checked it); and the preempted ones with the pages each held, for
    ``put_back``."""
    out = []
    while len(batch) > 1 and eng.kv_budget.short([r.slot for r in batch]) > 0:
        r = max(batch, key=lambda q: q.id)
        held = eng.runner.kv.pages_held(r.slot)
        r.parked, r.auto_resume = eng.runner.offload(r.slot), True
        r.slot = None
        out.append((r, held))
        batch = [q for q in batch if q is not r]
    return batch, out


def put_back(eng: Engine, evicted: list[tuple[Request, int]], mark) -> None:
    """Undo ``evict`` after the step it made room for failed: the pages that step reserved are given back
    (``KVCache.give_back``, to ``mark``), then each request is restored, the last preempted first, so that it gets
    its slot and its pages again (both are handed out last in, first out)."""
    kv = eng.runner.kv
    kv.give_back(mark)
    for r, held in reversed(evicted):
        r.slot, r.parked, r.auto_resume = eng.runner.restore(r.parked), None, False
        kv.reserve([r.slot], [min(held * kv.page_size, kv.max_len)])


def why_stuck(eng: Engine) -> str | None:
    """Why no request can make progress, or None when one can (running, or arriving later)."""
    left = [r for r in eng.requests if not r.done]
    if not left or any(eng._waiting(r) and r.arrival >= eng.iteration for r in left):
        return None
    parked = [r.id for r in left if r.parked is not None and not r.auto_resume]
    ready = [r.id for r in left if eng._waiting(r) or r.auto_resume]
    why = []
    if ready:
        if eng.runner.num_free == 0:
            why.append(f"requests {ready} wait for a slot, but no slot of {eng.runner.cfg.max_slots} is free "
                       "and none is running in this engine (slots held elsewhere)")  # fmt: skip
        else:
            kv = eng.runner.kv
            why.append(f"requests {ready} wait for KV pages, but {kv.free_pages} of {kv.num_pages} are free and "
                       "no request of this engine holds any (pages held elsewhere)")  # fmt: skip
    if parked:
        why.append(f"requests {parked} are preempted: resume() them")
    return "; ".join(why)
