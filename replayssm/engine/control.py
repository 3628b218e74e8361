"""The engine's request API besides stepping: ``add`` a request, and ``cancel``, ``preempt``, ``resume`` or
``release`` what requests hold. A base class of ``Engine`` (``engine/engine.py``), which holds the runner, the
requests, the KV budget and the steps in flight that these methods read."""

from __future__ import annotations

from .checks import check_positive_int, is_int
from .requests import Request


class RequestControl:
    """Request lifecycle calls for ``Engine`` (which sets ``runner``, ``requests``, ``window``, ``kv_budget`` and
    provides ``drain`` and ``_free_slot``)."""

    def add(self, prompt: list[int], max_new_tokens: int, arrival: int = 0) -> Request:
        """Queue a request: ``prompt`` a non-empty list of token ids in [0, vocab); it joins at engine iteration
        ``arrival`` (iterations where nothing runs and nothing has arrived are skipped). Checked here, before
        anything is queued: it must fit the runner's ``max_len`` and, with a shared KV cache, the whole cache."""
        if not isinstance(prompt, (list, tuple)) or not prompt:
            raise ValueError(f"prompt must be a non-empty list of token ids, got {prompt!r:.80}")
        self.runner.check_token_ids(prompt, "prompt token ids")
        max_new_tokens = check_positive_int("max_new_tokens", max_new_tokens)
        if not is_int(arrival) or arrival < 0:
            raise ValueError(f"arrival={arrival!r}: must be an int >= 0")
        need = len(prompt) + max_new_tokens + self.window
        if need > self.runner.cfg.max_len:
            raise ValueError(f"the request needs {need} KV positions (prompt {len(prompt)} + max_new_tokens "
                             f"{max_new_tokens} + window {self.window}), the runner's max_len is "
                             f"{self.runner.cfg.max_len}")  # fmt: skip
        if len(prompt) + self.runner.cfg.window > self.runner.cfg.max_len:  # its prefill reserves the runner's
            raise ValueError(f"the prompt of {len(prompt)} tokens + the runner's window {self.runner.cfg.window} "
                             f"(its prefill reserves a whole window) exceed the runner's max_len "
                             f"{self.runner.cfg.max_len}")  # fmt: skip
        self.kv_budget.check_fits_alone(self.kv_budget.lifetime(len(prompt), max_new_tokens))
        r = Request(len(self.requests), list(prompt), max_new_tokens, arrival)
        self.requests.append(r)
        return r

    def release(self) -> None:
        """Give back everything the engine's unfinished requests hold (slots, parked state) and mark them done
        with an error; the steps in flight, if any, are finished first (their tokens emitted). The runner is left
        as if they never ran. A step of the runner's that the engine did not start is left to its caller; if it
        holds slots of the engine's requests, nothing is released (``RuntimeError``): commit or abort it first."""
        caller, launched = self._foreign_steps()
        foreign = {s for slots in [caller or [], *(p.slots for p in launched)] for s in slots}
        held = sorted(foreign & {r.slot for r in self.requests if not r.done and r.slot is not None})
        if held:
            raise RuntimeError(f"slots {held} of this engine's requests are in a step the engine did not start; "
                               "commit() or abort() it (or finish() it) before release()")  # fmt: skip
        self.drain()
        for r in self.requests:
            if not r.done:
                self._give_up(r, RuntimeError("released before it finished"))

    def preempt(self, r: Request) -> None:
        """Move a running request's state (GDN checkpoint + ring + cursors, conv, KV, drafter) to the CPU; free
        its slot. The step in flight, if any, is finished first (its tokens emitted); a request that is not
        running is refused before that."""
        if not any(r is q for q in self.requests):
            raise ValueError(f"r must be a Request of this engine (from add), got {r!r:.80}")
        if r.slot is None or r.done:  # (before the drain: a refused call finishes no step)
            raise ValueError(f"request {r.id} is not running")
        self.drain()
        if r.slot is None or r.done:  # it finished in the step the drain completed
            raise ValueError(f"request {r.id} is not running (it finished in the step in flight)")
        r.parked, r.auto_resume = self.runner.offload(r.slot), False
        r.slot = None

    def resume(self, r: Request) -> None:
        """Restore a preempted request into a free slot (``ModelRunner.restore``). Refused before anything moves
        when ``r`` is not this engine's or not preempted, or its parked state does not fit this runner; a step in
        flight is then finished first (its tokens emitted, as the next ``step`` would), since only then is it known
        whether it frees a slot (and the pages) for ``r``."""
        if not any(r is q for q in self.requests):
            raise ValueError(f"r must be a Request of this engine (from add), got {r!r:.80}")
        if r.parked is None:
            raise ValueError(f"request {r.id} is not preempted")
        self.runner.check_restore(r.parked, room=False)
        self.drain()
        r.slot, r.parked, r.auto_resume = self.runner.restore(r.parked), None, False

    def cancel(self, r: Request) -> None:
        """Give up ``r`` (waiting, running or preempted): it is marked done with ``error="cancelled"`` and what it
        holds is given back; a step in flight that runs it finishes for the others (its slot is freed after it).
        Refused, with nothing changed, when ``r`` is not this engine's or already done."""
        if not any(r is q for q in self.requests):
            raise ValueError(f"r must be a Request of this engine (from add), got {r!r:.80}")
        if r.done:
            raise ValueError(f"request {r.id} is already done")
        if r.slot is not None:
            self._free_slot(r.slot)
        r.slot, r.parked, r.done, r.auto_resume, r.error = None, None, True, False, "cancelled"

    def _foreign_steps(self) -> tuple[list[int] | None, list]:
        """The runner's steps the engine did not start: a caller's ``step`` not committed yet (its slots, or None)
        and the launched steps that are not the engine's."""
        own = [p for p, _ in self._steps]
        caller = self.runner._in_flight[1] if self.runner._in_flight is not None else None
        return caller, [p for p in self.runner.pending if all(p is not q for q in own)]

    def _check_runner(self) -> None:
        """Refuse to step while the runner holds a step the engine did not start (``Engine.step``)."""
        caller, launched = self._foreign_steps()
        if caller is not None:
            raise RuntimeError("the runner has a step() of its caller's not committed yet; commit() or abort() it "
                               "before the engine steps")  # fmt: skip
        if launched:
            raise RuntimeError("the runner has a launched step that is not the engine's; the engine steps only a "
                               "runner whose steps in flight are its own")  # fmt: skip

    def _give_up(self, r: Request, e: BaseException) -> None:
        """Release what ``r`` holds and mark it done with the reason."""
        if r.slot is not None:
            self._free_slot(r.slot)
        r.slot, r.parked, r.done = None, None, True
        r.error = f"{type(e).__name__}: {e}"

    def _unadmit(self, new: list[Request], e: BaseException) -> None:
        """Requests whose admission (slot, prefill, first token) failed with ``e``: an interrupt (Ctrl-C) leaves them
        waiting, their slots freed, so that a retry prefills them afresh as a first try would; any other failure
        gives them up with the reason."""
        for r in new:
            if not isinstance(e, KeyboardInterrupt):
                self._give_up(r, e)
            elif r.slot is not None:
                self._free_slot(r.slot)
                r.slot = None
