"""Engine: continuous batching of requests over a ModelRunner, with speculative decoding.

Host side only: the request queue, drafting and bookkeeping. Every iteration admits arrived requests
(one batched prefill), runs one batched verify (or decode) step for all running requests -- forward,
acceptance and commit on the device (``ModelRunner.step_and_commit``), only the accepted counts and tokens
come back -- and retires finished requests. Requests can be preempted to the CPU and resumed later; they
continue with identical tokens. ``add``, ``cancel``, ``preempt``, ``resume`` and ``release`` are in
``engine/control.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .accept import Greedy, Prescribed, Sampling, sample_inverse_cdf
from .admission import KVBudget, evict, pick, put_back, why_stuck
from .checks import check_seed, check_temperature, is_int
from .control import RequestControl
from .drafter import check_host_drafter
from .graphs import PendingStep
from .requests import Request, proposal
from .runner import ModelRunner
from .spec import BenchmarkAcceptance, NgramDrafter


class Engine(RequestControl):
    """Continuous batching over ``runner``. The window T (last accepted token + T-1 drafts) is the runner's
    (``RunnerConfig.window``), or 1 (plain decode) with ``drafter="none"``; ``self.window`` says which.
    ``drafter``: "auto" (default, as ``LLM``'s: the runner's device drafter if it has one, else n-gram; none at
    window 1), "ngram", "none", "mtp" (the runner's device drafter: ``RunnerConfig(device_drafter="mtp")``), or
    a host drafter (``engine.drafter.HostDrafter``).
    ``overlap``: launch each step of an unchanged batch before reading the previous one back, where the next
    window needs nothing from the host (no host drafter, greedy or the benchmark's acceptance; ``self.overlap``
    says whether it applies; docs/engine.md). ``self.drafter`` is the host drafter, or None where there is none:
    plain decoding, or the runner's device drafter (``self.on_device``; ``LLM.drafter`` names it "mtp").

    Failures: a request whose prefill fails is given up (``error`` set, its slot freed), but for an interrupt
    (Ctrl-C), which leaves it waiting to be prefilled afresh by the next ``step``; a batch step that fails
    is aborted (no request moves; requests whose state it destroyed, a recurrent backend's in-place decode
    failing half-way, are given up) and the exception propagates; ``release()`` gives back everything the
    engine's requests hold. The engine stays usable after any of them, and ``step`` raises instead of idling
    when no request can make progress. With a shared KV cache (``RunnerConfig.kv_tokens``) the engine admits
    requests while their pages fit and preempts the newest running ones when a step's do not (docs/engine.md,
    "a shared KV cache"). ``cancel`` gives up one request."""

    def __init__(self, runner: ModelRunner, *, drafter="auto", temperature: float = 0.0, seed: int = 0,
                 eos_token_id: int | Sequence[int] | None = None,
                 benchmark_acceptance: BenchmarkAcceptance | None = None, overlap: bool = True):  # fmt: skip
        if not isinstance(runner, ModelRunner):
            raise TypeError(f"runner must be a ModelRunner, got {type(runner).__name__}")
        if isinstance(drafter, str) and drafter not in ("ngram", "none", "mtp", "auto"):
            raise ValueError(f"drafter must be 'ngram', 'none', 'mtp', 'auto' or a HostDrafter, got {drafter!r}")
        if not isinstance(drafter, str):
            check_host_drafter(drafter, ("ngram", "none", "mtp", "auto"))
        if drafter == "mtp" and runner.drafter is None:
            raise ValueError("drafter='mtp' needs a runner built with RunnerConfig(device_drafter='mtp')")
        if benchmark_acceptance is not None and not isinstance(benchmark_acceptance, BenchmarkAcceptance):
            raise TypeError("benchmark_acceptance must be a BenchmarkAcceptance")
        temperature = check_temperature(temperature)
        if not isinstance(overlap, bool):
            raise TypeError(f"overlap must be a bool, got {overlap!r}")
        seed = check_seed(seed)
        eos = None
        if eos_token_id is not None:  # one end token, or several (``ModelConfig.eos_token_id``): any of them ends
            eos = eos_token_id.reshape(-1).tolist() if isinstance(eos_token_id, torch.Tensor) else eos_token_id
            eos = [eos] if is_int(eos) else eos
            if isinstance(eos, (str, bytes)) or not isinstance(eos, Sequence):
                raise TypeError(f"eos_token_id must be a token id or a sequence of them, got {eos_token_id!r}")
            if not eos:
                raise ValueError("eos_token_id: an empty sequence (pass None for no end token)")
            runner.check_token_ids(list(eos), "eos_token_id")
            eos = frozenset(int(t) for t in eos)
        if drafter == "auto":  # as LLM's: plain decoding at window 1
            drafter = "mtp" if runner.drafter is not None else ("ngram" if runner.cfg.window > 1 else "none")
        window = runner.cfg.window if drafter != "none" else 1
        if benchmark_acceptance is not None and benchmark_acceptance.window != window:
            raise ValueError(f"benchmark_acceptance was built for windows of {benchmark_acceptance.window} tokens; "
                             f"this engine's window is {window}")  # fmt: skip
        self.runner = runner
        self.window = window
        self.on_device = drafter == "mtp" and self.window > 1  # drafts written inside the runner's step
        self.drafter = NgramDrafter() if drafter == "ngram" else (None if drafter in ("none", "mtp") else drafter)
        self.temperature, self.eos = temperature, eos
        self.gen = torch.Generator().manual_seed(seed)
        self.bench = benchmark_acceptance
        self.kv_budget = KVBudget(runner, window)
        # Overlapped steps (docs/engine.md, "overlapped steps"): only where the next window needs nothing from the
        # host -- no host drafter (or the benchmark's meaningless drafts) and no host-drawn uniforms.
        self.overlap = overlap and (self.bench is not None or (self.drafter is None and temperature <= 0))
        self.requests: list[Request] = []
        self.iteration = 0
        # called with the slots of every step once it is committed, when no other step is in flight and before any
        # of its slots is freed (``LLM``'s lockstep check); an exception it raises propagates from ``step``
        self.on_commit = None
        self._steps: list[tuple[PendingStep, list[Request]]] = []  # launched, not emitted (oldest first, at most 2)
        self._held: list[int] = []  # slots of finished requests that a step in flight still runs: freed after it

    @property
    def running(self) -> list[Request]:
        """The requests that hold a slot now (admitted, not done, not preempted)."""
        return [r for r in self.requests if r.slot is not None and not r.done]

    def _pick(self, logits: torch.Tensor) -> int:
        """The first token after a prompt from its logits [vocab] (on the device; one integer comes back)."""
        if self.temperature <= 0:
            return int(logits.argmax())
        u = torch.rand(1, generator=self.gen).to(logits.device)
        return int(sample_inverse_cdf(torch.softmax(logits[None].float() / self.temperature, -1), u)[0])

    def _emit(self, r: Request, tokens: list[int]) -> None:
        for t in tokens:
            if r.done:
                break
            r.generated.append(t)
            if len(r.generated) >= r.max_new_tokens or (self.eos is not None and t in self.eos):
                r.done = True
        if r.done and r.slot is not None:
            self._free_slot(r.slot)
            r.slot = None

    def _waiting(self, r: Request) -> bool:
        return r.slot is None and not r.done and r.parked is None and not r.generated

    def _admit(self) -> None:
        """Resume the requests the engine preempted for KV pages, then prefill arrived ones (in one batched
        prefill), first come first served while free slots and pages take them (``engine/admission.py``)."""
        parked = [r for r in self.requests if r.auto_resume and r.parked is not None and not r.done]
        arrived = [r for r in self.requests if self._waiting(r) and r.arrival <= self.iteration]
        taken = pick(self.kv_budget, parked + arrived, self.running, self.runner.num_free)
        for r in taken:
            if r.parked is not None:
                r.slot, r.parked, r.auto_resume = self.runner.restore(r.parked), None, False
        new = [r for r in taken if r.slot is None]
        if not new:
            return
        gen = self.gen.get_state()
        try:  # a request that fails here gives back its slot (and KV pages) and is marked done with the reason
            for r in new:
                r.slot = self.runner.alloc()
            logits = self.runner.prefill([r.slot for r in new], [r.prompt for r in new])
            first = [self._pick(row) for row in logits]
        except BaseException as e:
            self._unadmit(new, e)
            self.gen.set_state(gen)
            raise
        for r, t in zip(new, first):
            self._emit(r, [t])

    def step(self) -> bool:
        """One engine iteration. Returns False when nothing is left to do; raises ``RuntimeError`` when requests
        are left that cannot make progress (the call after the one that emits the last step's tokens). A failed
        step is aborted before the exception propagates: no request moved, and the engine can step again; but a
        request whose state the failed step destroyed or advanced anyway (its slot in ``ModelRunner.lost``: an
        in-place decode or a commit that failed part-way where it cannot be undone, ``engine/step_end.py``) is
        given up, with that exception.

        With ``overlap`` (where it applies, see ``__init__``) an iteration launches the next step before it reads
        back the previous one, whose tokens it then emits: the device never waits for the host between steps of
        the same batch, and tokens arrive one iteration later. ``drain()`` waits for the step in flight. When the
        launch of the next step fails, the step in flight is finished first (its tokens emitted), then the
        exception propagates as above. A step of the runner's that the engine did not start (a caller's ``step``
        not committed, or ``launch`` not finished) is refused before anything is admitted."""
        self._check_runner()
        emits = bool(self._steps)  # a step in flight: this call emits its tokens, whatever else it does
        if self._steps and not self._can_chain(self.running):
            self.drain()  # the batch changes (a request ended): emit first, so that its slot can be admitted now
        self._admit()
        batch = self.running
        self.iteration += 1
        try:
            launched = self._iterate(batch, emits)
        except BaseException:  # nothing launched: a retry is this iteration again (arrivals admitted as in a first try)
            self.iteration -= 1
            raise
        if launched is None:
            return any(not r.done for r in self.requests)
        if not self.overlap or len(self._steps) > 1:  # (a chained step: the one before it is collected now)
            self._collect()
        return True

    def _iterate(self, batch: list[Request], emits: bool) -> PendingStep | None:
        """Launch this iteration's step (recorded in ``_steps``), or None when nothing runs; raises before it is
        recorded when it fails, the step in flight finished first (its tokens emitted). When no request can make
        progress it raises, but not in a call that emits a step's tokens (``emits``): the next one does."""
        if self._steps and self._can_chain(batch):
            try:
                nxt = self._launch(batch, chain=True)
            except BaseException:  # the step in flight is done all the same: its tokens are emitted
                self.drain()
                raise
            self._steps.append((nxt, batch))
            return nxt
        self.drain()
        batch, evicted = evict(self, self.running)
        if not batch:
            why = why_stuck(self)
            if why and emits:  # this call's work was emitting the step in flight's tokens: the next one raises
                return None
            if why:
                raise RuntimeError(f"the engine cannot make progress: {why}")
            later = [r.arrival for r in self.requests if self._waiting(r) and r.arrival > self.iteration]
            if later:  # nothing runs until the next arrival: skip the idle iterations
                self.iteration = min(later)
            return None
        mark = self.runner.kv.mark() if evicted else None
        try:
            launched = self._launch(batch, chain=False)
        except BaseException as e:  # the requests preempted for it come back as they were
            if evicted:
                try:
                    put_back(self, evicted, mark)
                except Exception as again:  # (they stay parked, and resume by themselves)
                    e.add_note(f"the requests preempted for this step stay parked: putting them back failed: {again!r}")
            raise
        self._steps.append((launched, batch))
        return launched

    def drain(self) -> None:
        """Wait for the steps in flight, if any, and emit their tokens (``step`` with ``overlap`` leaves one)."""
        while self._steps:
            self._collect()

    def _can_chain(self, batch: list[Request]) -> bool:
        """One step is in flight, it ran exactly ``batch``, and no row of it can reach ``max_new_tokens`` in that
        step (one that stops on EOS runs one extra step, whose tokens are dropped)."""
        if not self.overlap or len(self._steps) != 1:
            return False
        prev = self._steps[0][1]
        return (len(batch) == len(prev) and all(a is b for a, b in zip(batch, prev))
                and all(len(r.generated) + self.window < r.max_new_tokens for r in batch)
                and self.kv_budget.short([r.slot for r in batch], ahead=self.window) <= 0)  # fmt: skip

    def _collect(self) -> None:
        """Finish the oldest step in flight and emit its tokens; free the slots it still held for finished
        requests. An interrupt while waiting for it leaves it in flight (``drain`` or the next ``step`` finish it)."""
        p, batch = self._steps[0]
        counts, produced = self.runner.finish(p)
        self._steps.pop(0)
        if self.on_commit is not None and not self._steps:  # committed, nothing else in flight, no slot freed yet
            self.on_commit([r.slot for r in batch if r.slot is not None])
        for r, n, new in zip(batch, counts, produced):
            if r.done:  # finished (EOS) in the step before; this one ran on for it
                continue
            r.steps += 1
            r.accepted.append(n)
            self._emit(r, new)
        held, self._held = self._held, []
        for s in held:
            self._free_slot(s)

    def _free_slot(self, slot: int) -> None:
        if any(slot in p.slots for p in self.runner.pending):
            self._held.append(slot)
        else:
            self.runner.free(slot)

    def _launch(self, batch: list[Request], chain: bool) -> PendingStep:
        gen = self.gen.get_state()
        bench = self.bench.gen.get_state() if self.bench is not None else None
        try:  # launch checks everything first; a failed step is aborted (no request moved, nothing committed) or,
            # where it cannot be, its requests are given up (below)
            return self._enqueue(batch, chain)
        except BaseException as e:
            self.gen.set_state(gen)  # a retry draws the uniforms (and prescribed counts) this attempt drew
            if bench is not None:
                self.bench.gen.set_state(bench)
            for r in batch:  # a failed in-place decode (recurrent backend) can destroy its rows' states
                if r.slot in self.runner.lost:
                    self._give_up(r, e)
            raise

    def _enqueue(self, batch: list[Request], chain: bool) -> PendingStep:
        T = self.window
        rule, kw = self._rule(len(batch), T)
        slots = [r.slot for r in batch]
        if self.on_device:  # the runner's device drafter writes the drafts inside the step
            last = None if chain else torch.tensor([[r.generated[-1]] for r in batch], dtype=torch.long)
            return self.runner.launch(slots, last, None, rule, device_drafts=True, **kw)
        if chain:  # the window: the last token, repeated as the benchmark's drafts (T = 1: plain decode)
            return self.runner.launch(slots, None, [T - 1] * len(batch), rule, **kw)
        drafts = [self._drafts(r, T - 1) for r in batch]
        tokens = torch.tensor([[r.generated[-1]] + d + [r.generated[-1]] * (T - 1 - len(d)) for r, d in
                               zip(batch, drafts)], dtype=torch.long)  # fmt: skip
        return self.runner.launch(slots, tokens, [len(d) for d in drafts], rule, **kw)

    def _drafts(self, r: Request, k: int) -> list[int]:
        if self.bench is not None:
            return [r.generated[-1]] * k  # any tokens: the prescribed acceptance ignores them
        if not self.drafter:
            return []
        return proposal(self.drafter, self.drafter.propose(r.context, k), k, self.runner)

    def _rule(self, B: int, T: int) -> tuple:
        """How the device accepts this step's drafts, and the host-drawn inputs the rule reads."""
        if self.bench is not None:
            return Prescribed(), {"prescribed": self.bench.draw(B)}
        if self.temperature <= 0:
            return Greedy(), {}
        u = torch.rand(B, 2 * T, generator=self.gen)
        return Sampling(self.temperature), {"uniforms": u, "temperature": self.temperature}

    def run(self, max_iterations: int | None = None) -> list[Request]:
        """Step until every request is done. Every running request gains a token per step, so this ends; it
        raises when requests are left that cannot make progress, or after ``max_iterations`` steps."""
        if max_iterations is not None and (not is_int(max_iterations) or max_iterations < 1):
            raise ValueError(f"max_iterations={max_iterations!r}: must be None or an int >= 1")
        n = 0
        while self.step():
            n += 1
            if max_iterations is not None and n >= max_iterations:
                left = [r.id for r in self.requests if not r.done]
                raise RuntimeError(f"requests {left} are not done after max_iterations={max_iterations} steps")
        return self.requests
