"""Whole engine steps as CUDA graphs: the static buffers a step reads and writes, and their capture.

One captured step is model forward + acceptance + commit of the GDN state, the KV cache and the device
drafter. Its inputs are packed into one int64 buffer (slot, real draft count, prescribed accepted count, the
window's tokens) and one fp32 buffer (sampling uniforms, temperature) per row, each filled from a pinned host
copy with one non-blocking transfer; its output is one [B, T + 1] int64 buffer (accepted count, tokens) read
back with one transfer. Nothing else crosses between host and device during a step.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..models.step import Step, StepKind
from .accept import Rule, accept_device

INT_COLS = 3  # slot, num_drafts, prescribed num_accepted; then the T window tokens


@dataclass
class StepIO:
    """Static buffers of a step with ``B`` rows and window ``T``: the device inputs, and two sets of pinned host
    mirrors (inputs and output) used by alternate launches, so that a launch can be prepared while the previous
    one's transfers are still queued."""

    ints: torch.Tensor  # [B, 3 + T] int64
    floats: torch.Tensor  # [B, 2T + 1] fp32: uniforms, temperature
    host: tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], ...]  # 2 x (ints, floats, out [B, T + 1] int64)

    @classmethod
    def allocate(cls, B: int, T: int, device: torch.device) -> StepIO:
        pin = device.type == "cuda"
        ints = torch.zeros(B, INT_COLS + T, dtype=torch.int64, device=device)
        floats = torch.ones(B, 2 * T + 1, dtype=torch.float32, device=device)
        host = tuple((torch.zeros(B, INT_COLS + T, dtype=torch.int64, pin_memory=pin),
                      torch.ones(B, 2 * T + 1, dtype=torch.float32, pin_memory=pin),
                      torch.zeros(B, T + 1, dtype=torch.int64, pin_memory=pin)) for _ in range(2))  # fmt: skip
        return cls(ints, floats, host)

    def load(self, parity: int, slots: list[int], tokens: torch.Tensor | None, num_drafts: list[int],
             prescribed: list[int] | None, uniforms: torch.Tensor | None, temperature: float) -> None:  # fmt: skip
        """Fill the first len(slots) rows (the rest are padding: slot -1) of host set ``parity`` and send them to
        the device. ``tokens`` None: the window columns are left for the caller to write on the device."""
        B = len(slots)
        rows = [[s, d, 1] for s, d in zip(slots, num_drafts)] + [[-1, 0, 1]] * (self.ints.shape[0] - B)
        if prescribed is not None:
            for row, k in zip(rows, prescribed):
                row[2] = k
        hi, hf, _ = self.host[parity]
        hi[:, :INT_COLS] = torch.tensor(rows, dtype=torch.int64)
        hi[:, INT_COLS:] = 0
        if tokens is not None:
            hi[:B, INT_COLS : INT_COLS + tokens.shape[1]] = tokens
        self.ints.copy_(hi, non_blocking=True)
        if uniforms is not None:
            hf.fill_(1.0)
            T2 = uniforms.shape[1]
            hf[:B, :T2] = uniforms
            hf[:, T2] = temperature
            self.floats.copy_(hf, non_blocking=True)


class Launched:
    """A step enqueued on the device (``DeviceStep.launch``): ``result()`` waits for it and returns its first B
    output rows on the host; ``out`` is its output on the device (what a chained launch reads)."""

    def __init__(self, out: torch.Tensor, host_out: torch.Tensor, B: int):
        self.out, self.B = out, B
        self._host = host_out
        self._event = None
        if out.device.type == "cuda":
            host_out.copy_(out, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record()
        else:
            self._host = out[:B].clone()

    def result(self) -> torch.Tensor:
        if self._event is not None:
            self._event.synchronize()
        return self._host[: self.B].clone()


@dataclass
class PendingStep:
    """An engine step launched by ``ModelRunner.launch`` and not finished: its rows' slots, window T, acceptance
    rule (class) and the enqueued work."""

    slots: list[int]
    T: int
    rule: type
    launched: Launched


@contextmanager
def gc_paused():
    """Collect garbage now and not again until the block ends. Wrap every CUDA-graph capture in it: a runner
    and its captured steps form a reference cycle, so an old graph is destroyed whenever the cycle collector
    happens to run, and if that is during another capture, the destroy call (illegal while capturing)
    invalidates the capture -- on an H200 a capture then failed at a random later launch with "operation failed
    due to a previous error during capture" (PyTorch no longer collects before a capture by default)."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def capture(run, pool=None) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """Warm ``run`` up twice on a side stream (compiles kernels; the buffers must hold padding rows only, so no
    state moves), then capture it. Returns the graph and its static output."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()
        run()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with gc_paused(), torch.cuda.graph(g, pool=pool):
        out = run()
    return g, out


class DeviceStep:
    """One shape of the engine's step (kind, B rows, window T, acceptance rule, device drafts or not): its
    buffers and, when the runner uses CUDA graphs, its graph (captured on padding rows, so nothing moves).
    Without graphs the same body runs eagerly."""

    def __init__(self, runner, kind: StepKind, B: int, T: int, rule: Rule, device_drafts: bool):
        self.runner, self.kind, self.T, self.rule, self.device_drafts = runner, kind, T, rule, device_drafts
        self.io = StepIO.allocate(B, T, runner.device)
        self.graph = self.out = None
        self._parity = 0  # host mirror set of the last launch
        self.commit_began = self.commit_done = False
        if runner.use_graphs:
            self.io.load(0, [], torch.zeros(0, T, dtype=torch.long), [], None, None, 1.0)
            self.graph, self.out = capture(self._body, runner._graph_pool)

    def launch(self, slots, tokens, num_drafts, prescribed, uniforms, temperature, after: Launched | None = None
               ) -> Launched:  # fmt: skip
        """Load the rows and enqueue the step; nothing waits for it. ``after``: the previous step of the same rows
        (still in flight, or done); this step's window is then each row's last emitted token of ``after``, read on
        the device (``tokens`` is None): every column, so a plain decode, a device-drafted window (first column)
        and a window of repeated last tokens are all served."""
        self._parity ^= 1
        self.commit_began = self.commit_done = False  # (eager: how far the body got, for ``ModelRunner.launch``)
        self.io.load(self._parity, slots, tokens, num_drafts, prescribed, uniforms, temperature)
        if after is not None:
            B = len(slots)
            prev = after.out[:B]
            self.io.ints[:B, INT_COLS:] = prev.gather(1, prev[:, :1])
        if self.graph is None:
            out = self._body()
        else:
            self.graph.replay()
            out = self.out
        return Launched(out, self.io.host[self._parity][2], len(slots))

    def _body(self) -> torch.Tensor:
        """Everything of one step on the device (graph-capturable): forward (the device drafter's propose and
        observe inside it), acceptance, commit of the GDN state, the KV cache and the drafter."""
        r, io, T = self.runner, self.io, self.T
        slots = io.ints[:, 0].to(torch.int32)
        step = Step.build(self.kind, slots, T, r.kv)
        logits, window = r._forward(step, io.ints[:, INT_COLS:], self.device_drafts)
        n, tokens = accept_device(self.rule, logits, window, io.ints[:, 1], uniforms=io.floats[:, : 2 * T],
                                  temperature=io.floats[:, 2 * T], prescribed=io.ints[:, 2])  # fmt: skip
        n = torch.where(slots >= 0, n, 1).to(torch.int32)
        out = torch.cat([n[:, None].long(), tokens], 1)
        self.commit_began = True  # the lengths first, then the GDN state: eagerly, ``ModelRunner.launch`` undoes a
        r.kv.commit(slots, n)  # failure in either (the lengths from copies, the pool by its abort)
        if r.drafter is not None:
            r.drafter.commit(slots, n)
        r.pool.commit(slots, n)
        self.commit_done = True
        return out
