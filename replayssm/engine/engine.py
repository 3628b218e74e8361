"""Engine: continuous batching of requests over a ModelRunner, with speculative decoding.

Host side only: the request queue, drafting and bookkeeping. Every iteration admits arrived requests
(prefill, one at a time), runs one batched verify (or decode) step for all running requests -- forward,
acceptance and commit on the device (``ModelRunner.step_and_commit``), only the accepted counts and tokens
come back -- and retires finished requests. Requests can be preempted to the CPU and resumed later; they
continue with identical tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .accept import Greedy, Prescribed, Sampling, sample_inverse_cdf
from .drafter import HostDrafter
from .runner import ModelRunner, ParkedRequest
from .spec import BenchmarkAcceptance, NgramDrafter


@dataclass
class Request:
    id: int
    prompt: list[int]
    max_new_tokens: int
    arrival: int = 0
    generated: list[int] = field(default_factory=list)
    slot: int | None = None
    done: bool = False
    steps: int = 0
    accepted: list[int] = field(default_factory=list)  # num_accepted of every verify step
    parked: ParkedRequest | None = None  # its state on the CPU while preempted

    @property
    def context(self) -> list[int]:
        return self.prompt + self.generated


class Engine:
    """``window`` = T (last accepted token + T-1 drafts; 1 = plain decode). ``drafter``: "ngram", "none",
    "mtp" (the runner's device drafter: ``RunnerConfig(device_drafter="mtp")``), "auto" (the runner's device
    drafter if it has one, else n-gram), or a host drafter (``engine.drafter.HostDrafter``)."""

    def __init__(self, runner: ModelRunner, *, drafter="ngram", temperature: float = 0.0, seed: int = 0,
                 eos_token_id: int | None = None, benchmark_acceptance: BenchmarkAcceptance | None = None):  # fmt: skip
        if isinstance(drafter, str) and drafter not in ("ngram", "none", "mtp", "auto"):
            raise ValueError(f"drafter must be 'ngram', 'none', 'mtp', 'auto' or a HostDrafter, got {drafter!r}")
        if not isinstance(drafter, str) and not isinstance(drafter, HostDrafter):
            raise TypeError(f"a drafter object needs propose(context, k), got {type(drafter).__name__}")
        if drafter == "mtp" and runner.drafter is None:
            raise ValueError("drafter='mtp' needs a runner built with RunnerConfig(device_drafter='mtp')")
        if benchmark_acceptance is not None and not isinstance(benchmark_acceptance, BenchmarkAcceptance):
            raise TypeError("benchmark_acceptance must be a BenchmarkAcceptance")
        if drafter == "auto":
            drafter = "mtp" if runner.drafter is not None else "ngram"
        self.runner = runner
        self.window = runner.cfg.window if drafter != "none" else 1
        self.on_device = drafter == "mtp" and self.window > 1  # drafts written inside the runner's step
        self.drafter = NgramDrafter() if drafter == "ngram" else (None if drafter in ("none", "mtp") else drafter)
        self.temperature, self.eos = temperature, eos_token_id
        self.gen = torch.Generator().manual_seed(seed)
        self.bench = benchmark_acceptance
        self.requests: list[Request] = []
        self.iteration = 0

    def add(self, prompt: list[int], max_new_tokens: int, arrival: int = 0) -> Request:
        if not prompt:
            raise ValueError("prompt must hold at least one token")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        need = len(prompt) + max_new_tokens + self.window
        if need > self.runner.cfg.max_len:
            raise ValueError(f"request needs {need} KV positions, the runner's max_len is {self.runner.cfg.max_len}")
        r = Request(len(self.requests), list(prompt), max_new_tokens, arrival)
        self.requests.append(r)
        return r

    @property
    def running(self) -> list[Request]:
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
            if len(r.generated) >= r.max_new_tokens or (self.eos is not None and t == self.eos):
                r.done = True
        if r.done and r.slot is not None:
            self.runner.free(r.slot)
            r.slot = None

    def _admit(self) -> None:
        """Prefill every arrived request that a free slot can take, in one batched prefill."""
        new = []
        for r in self.requests:
            if r.slot is None and not r.done and r.parked is None and r.arrival <= self.iteration and not r.generated:
                if self.runner.num_free == 0:
                    break
                r.slot = self.runner.alloc()
                new.append(r)
        if new:
            logits = self.runner.prefill([r.slot for r in new], [r.prompt for r in new])
            for r, row in zip(new, logits):
                self._emit(r, [self._pick(row)])

    def step(self) -> bool:
        """One engine iteration. Returns False when nothing is left to do."""
        self._admit()
        batch = self.running
        self.iteration += 1
        if not batch:
            return any(not r.done for r in self.requests)
        T = self.window
        rule, kw = self._rule(len(batch), T)
        slots = [r.slot for r in batch]
        if self.on_device:  # the runner's device drafter writes the drafts inside the step
            last = torch.tensor([[r.generated[-1]] for r in batch], dtype=torch.long)
            counts, produced = self.runner.step_and_commit(slots, last, None, rule, device_drafts=True, **kw)
        else:
            drafts = [self._drafts(r, T - 1) for r in batch]
            tokens = torch.tensor([[r.generated[-1]] + d + [r.generated[-1]] * (T - 1 - len(d)) for r, d in
                                   zip(batch, drafts)], dtype=torch.long)  # fmt: skip
            counts, produced = self.runner.step_and_commit(slots, tokens, [len(d) for d in drafts], rule, **kw)
        for r, n, new in zip(batch, counts, produced):
            r.steps += 1
            r.accepted.append(n)
            self._emit(r, new)
        return True

    def _drafts(self, r: Request, k: int) -> list[int]:
        if self.bench is not None:
            return [r.generated[-1]] * k  # any tokens: the prescribed acceptance ignores them
        return self.drafter.propose(r.context, k) if self.drafter else []

    def _rule(self, B: int, T: int) -> tuple:
        """How the device accepts this step's drafts, and the host-drawn inputs the rule reads."""
        if self.bench is not None:
            return Prescribed(), {"prescribed": self.bench.draw(B)}
        if self.temperature <= 0:
            return Greedy(), {}
        u = torch.rand(B, 2 * T, generator=self.gen)
        return Sampling(self.temperature), {"uniforms": u, "temperature": self.temperature}

    def run(self, max_iterations: int = 1_000_000) -> list[Request]:
        for _ in range(max_iterations):
            if not self.step():
                break
        return self.requests

    def preempt(self, r: Request) -> None:
        """Move a running request's state (GDN checkpoint + ring + cursors, conv, KV, drafter) to the CPU; free
        its slot."""
        if r.slot is None:
            raise ValueError(f"request {r.id} is not running")
        r.parked = self.runner.offload(r.slot)
        r.slot = None

    def resume(self, r: Request) -> None:
        if r.parked is None:
            raise ValueError(f"request {r.id} is not preempted")
        r.slot, r.parked = self.runner.restore(r.parked), None
