"""What an engine may take from a shared paged KV cache (``RunnerConfig(kv_tokens=...)``): the pages a request can
ever need, what admitting or resuming one leaves for the running batch, and which running requests give way when a
step's pages do not fit.

The policy (docs/engine.md, "a shared KV cache"):

- ``Engine.add`` refuses a request that could not fit in the whole cache alone (``request_pages``), so one running
  request always fits once the others give way.
- Admission is first come, first served: requests the engine preempted for room resume first (oldest first), then
  new ones in arrival order; it stops at the first that does not fit, so a long request is not passed over for
  ever. A request fits when its slot is free and its pages, with those the running requests need for their next
  two steps (``headroom_lengths``), are free.
- Before a step, if its pages are short, the newest running requests are preempted to the CPU (their state moves,
  exactly as ``Engine.preempt``) until the rest fit; they resume by themselves when room comes back, and continue
  with identical tokens.

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

    def request_pages(self, tokens: int) -> int:
        """Pages a request of ``tokens`` KV positions (prompt + max_new_tokens + window) holds at most."""
        return self.kv.pages_for(tokens)

    def check_fits_alone(self, tokens: int) -> None:
        """Raise when a request of ``tokens`` KV positions could not fit the whole cache alone."""
        if self.kv.dynamic and self.request_pages(tokens) > self.kv.num_pages:
            kv = self.kv
            raise ValueError(f"the request needs {tokens} KV positions ({self.request_pages(tokens)} pages of "
                             f"{kv.page_size}), the runner's shared KV cache holds {kv.num_pages * kv.page_size} "
                             f"(RunnerConfig.kv_tokens, {kv.num_pages} pages)")  # fmt: skip

    def _lens(self, slots: list[int], ahead: int) -> list[int]:
        return [self.runner.kv_len(s) + ahead for s in slots]

    def headroom_lengths(self, slots: list[int]) -> list[int]:
        """The lengths running ``slots`` may reserve in their next two steps (a step in flight and the next, or
        an overlapped pair)."""
        return self._lens(slots, 2 * self.T)

    def room(self, running: list[int]) -> int:
        """Free pages once the running slots have their headroom (may be negative)."""
        return self.kv.free_pages - self.kv.pages_needed(running, self.headroom_lengths(running))

    def new_pages(self, prompt_len: int) -> int:
        """Pages a new request takes by its first step (its prefill reserves the runner's window)."""
        return self.kv.pages_for(min(self.kv.max_len, prompt_len + max(self.runner.cfg.window, 2 * self.T)))

    def resume_pages(self, r: Request) -> int:
        """Pages a preempted request takes by its first step after it resumes."""
        n = int(r.parked.kv["lens"][0])
        return self.kv.pages_for(min(self.kv.max_len, n + 2 * self.T))

    def short(self, slots: list[int], ahead: int = 0) -> int:
        """Pages a step of ``slots`` (after ``ahead`` tokens of a step in flight) lacks; 0 or less: it fits."""
        return self.kv.pages_needed(slots, self._lens(slots, ahead + self.T)) - self.kv.free_pages


def pick(budget: KVBudget, candidates: list[Request], running: list[int], free_slots: int) -> list[Request]:
    """The prefix of ``candidates`` (first come, first served) that free slots and pages can take now."""
    room, taken = budget.room(running), []
    for r in candidates:
        need = budget.resume_pages(r) if r.parked is not None else budget.new_pages(len(r.prompt))
        if len(taken) == free_slots or need > room:
            break
        taken.append(r)
        room -= need
    return taken


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
