"""Benchmark steps: one speculative (or decode) step over every GDN layer, one class per backend.

Every backend, ours here and the peers in ``bench/peers``, implements one protocol (``Step``): it is
built from a ``StepCase`` (geometry, window, ring, inputs, initial states, acceptance), a call is
one multi-layer step (verify or decode every layer into ``outputs``, then the backend's commit),
``committed(layer)`` gives the committed state for the correctness gates, and ring backends
(``RingStep``) can freeze their cursors with ``set_cursors`` to time pure non-flush and pure flush
steps. Every layer has its own state tensors (as in a real model) so the working set is far larger
than the L2 cache; activations are shared by the layers (they are tiny). A step ends with the
commit, so replaying a captured step evolves the ring cursors through the real protocol and folds
happen at their real rate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from ..ops import (
    GDNShape,
    RingLayers,
    fold_ahead_pays,
    fold_phase_pays,
    gdn_exact_fold,
    gdn_fold_ahead,
    gdn_recurrent,
    gdn_replay_verify,
    ring_commit,
)
from ..ops.snapshots import commit_snapshots


@dataclass(frozen=True, eq=False)
class StepCase:
    """What every backend's step at one grid point is built from.

    ``inputs``: q, k [N, H, K], v [N, HV, V], a, b [N, HV] (``dtype``), A_log, dt_bias [HV] fp32,
    cu_seqlens [B+1] int32 (every window ``T`` tokens), slots [B] int32, and ``mixed_qkv``
    [N, 2*H*K + HV*V], the same q | k | v packed (SGLang's decode reads it so). ``state0``:
    [layers, S, HV, V, K] fp32, each layer's initial state of every slot. ``accept()`` gives
    num_accepted [B] int32 in 1..T inside a CUDA graph.
    """

    geo: GDNShape
    T: int
    L: int
    dtype: torch.dtype
    inputs: dict
    state0: torch.Tensor
    accept: Callable[[], torch.Tensor]

    @property
    def layers(self) -> int:
        return self.state0.shape[0]

    @property
    def num_slots(self) -> int:
        return self.state0.shape[1]

    @property
    def B(self) -> int:
        return self.inputs["slots"].shape[0]

    @property
    def device(self) -> torch.device:
        return self.state0.device

    def with_accept(self, accept: Callable[[], torch.Tensor]) -> StepCase:
        return dataclasses.replace(self, accept=accept)


class Step(Protocol):
    """One backend's step over every layer of a ``StepCase``."""

    outputs: Sequence[torch.Tensor]  # outputs[layer]: [N, HV, V], written by every call

    @classmethod
    def build(cls, case: StepCase) -> Step: ...

    def __call__(self) -> None:
        """Verify (or decode) every layer, then commit ``case.accept()`` tokens per row."""

    def committed(self, layer: int) -> torch.Tensor:
        """[B, HV, V, K] fp32: the committed state of each row's slot (padding rows zero), no mutation."""


class RingStep(Step, Protocol):
    def set_cursors(self, flush: bool) -> int:
        """Freeze every row at the protocol's worst case, so each later call does the same work: a pure
        non-flush step (verify over the longest history a non-flush step reads) or a pure flush step
        (fold of the most records a fold sees). Returns the records each row folds per call (0 for
        non-flush). Fill the rings with a few real steps first."""


def refresh_inputs(x: dict, generator: torch.Generator) -> None:
    """New random activations in place (q, k, v, a, b and the packed ``mixed_qkv`` kept equal)."""
    N, H, K = x["q"].shape
    HV, V = x["v"].shape[1:]
    for name in ("q", "k", "v", "a", "b"):
        t = x[name]
        t.copy_(torch.randn(t.shape, device=t.device, generator=generator).to(t.dtype))
    x["mixed_qkv"].copy_(torch.cat([x["q"].reshape(N, H * K), x["k"].reshape(N, H * K), x["v"].reshape(N, HV * V)], 1))


def make_case(geo: GDNShape, B: int, T: int, L: int, layers: int, dtype, *, accept="random", seed=0, device="cuda"):
    """Random inputs of ``B`` rows of ``T`` tokens, slots a permutation of ``range(B)``, small random states."""
    g = torch.Generator(device=device).manual_seed(seed)
    N = B * T
    x = {
        "q": torch.empty(N, geo.H, geo.K, dtype=dtype, device=device),
        "k": torch.empty(N, geo.H, geo.K, dtype=dtype, device=device),
        "v": torch.empty(N, geo.HV, geo.V, dtype=dtype, device=device),
        "a": torch.empty(N, geo.HV, dtype=dtype, device=device),
        "b": torch.empty(N, geo.HV, dtype=dtype, device=device),
        "mixed_qkv": torch.empty(N, geo.conv_channels, dtype=dtype, device=device),
        "A_log": torch.rand(geo.HV, device=device, generator=g) - 1.0,
        "dt_bias": torch.randn(geo.HV, device=device, generator=g) * 0.5,
        "cu_seqlens": torch.arange(0, N + 1, T, dtype=torch.int32, device=device),
        "slots": torch.randperm(B, device=device, generator=g).to(torch.int32),
    }
    refresh_inputs(x, g)
    state0 = torch.randn(layers, B, geo.HV, geo.V, geo.K, device=device, generator=g) * 0.05
    return StepCase(geo, T, L, dtype, x, state0, acceptance(B, T, accept, device))


def acceptance(B: int, T: int, mode: str, device="cuda"):
    """A function giving num_accepted [B] int32 inside a graph: "full" (T each) or "random" (uniform 1..T)."""
    full = torch.full((B,), T, dtype=torch.int32, device=device)
    if mode == "full":
        return lambda: full
    return lambda: torch.randint(1, T + 1, (B,), device=device, dtype=torch.int32)


def _outputs(case: StepCase) -> torch.Tensor:
    return torch.empty(case.layers, *case.inputs["v"].shape, dtype=case.dtype, device=case.device)


def gather_rows(state: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """state[slots] [B, ...] with padding rows (slot -1) zero."""
    rows = state.index_select(0, slots.long().clamp(min=0))
    return torch.where((slots >= 0).view(-1, *[1] * (rows.dim() - 1)), rows, 0.0)


class RecurrentStep:
    """The baseline: verify writing a snapshot per token, then copy the accepted snapshots (one launch)."""

    def __init__(self, case: StepCase):
        self.case, self.x, self.accept = case, case.inputs, case.accept
        self.state = case.state0.clone()  # [layers, S, HV, V, K]
        geo = case.geo
        self.snaps = torch.empty(case.layers, case.B, case.T, geo.HV, geo.V, geo.K, device=case.device)
        self.outputs = _outputs(case)

    @classmethod
    def build(cls, case: StepCase) -> RecurrentStep:
        return cls(case)

    def verify(self, layer: int, **kw) -> torch.Tensor:
        x = self.x
        return gdn_recurrent(x["q"], x["k"], x["v"], x["a"], x["b"], A_log=x["A_log"], dt_bias=x["dt_bias"],
                             state=self.state[layer], slots=x["slots"], cu_seqlens=x["cu_seqlens"],
                             out=self.outputs[layer], validate=False, **kw)  # fmt: skip

    def __call__(self) -> None:
        for layer in range(self.case.layers):
            self.verify(layer, snapshots=self.snaps[layer], update_state=False)
        commit_snapshots(self.state, self.snaps, self.x["slots"], self.accept(), validate=False)

    def committed(self, layer: int) -> torch.Tensor:
        return gather_rows(self.state[layer], self.x["slots"])


class RecurrentDecode(RecurrentStep):
    """Plain decode (T=1): one token per request, state updated in place, nothing to commit."""

    def __call__(self) -> None:
        for layer in range(self.case.layers):
            self.verify(layer)


class ReplayStep:
    """ReplaySSM: verify from checkpoint + ring for every layer, then one device-side cursor commit (with the fold
    phase where ``fold_phase_pays``, and, for a batch that fits in one wave of the verify's programs, the fold of every
    layer of the rows that will flush next, ``gdn_fold_ahead``, as the pool's commit does)."""

    def __init__(self, case: StepCase):
        self.case, self.x, self.accept = case, case.inputs, case.accept
        self.commit = True
        geo, dev = case.geo, case.device
        self.checkpoint = case.state0.clone()
        self.ring_layers = RingLayers.allocate(case.layers, case.num_slots, geo.H, geo.HV, geo.K, geo.V, L=case.L,
                                               window=case.T, dtype=case.dtype, device=dev)  # fmt: skip
        self.cursors, self.rings = self.ring_layers.cursors, self.ring_layers.layers
        self.fold_ahead = fold_ahead_pays(case.B, geo.HV, case.T, case.L, dev)
        self.fold_phase = fold_phase_pays(case.B, geo.HV, case.T, dev)
        self.outputs = _outputs(case)

    @classmethod
    def build(cls, case: StepCase) -> ReplayStep:
        return cls(case)

    def __call__(self) -> None:
        x = self.x
        for layer in range(self.case.layers):
            gdn_replay_verify(x["q"], x["k"], x["v"], x["a"], x["b"], A_log=x["A_log"], dt_bias=x["dt_bias"],
                              checkpoint=self.checkpoint[layer], ring=self.rings[layer], slots=x["slots"],
                              cu_seqlens=x["cu_seqlens"], out=self.outputs[layer], validate=False)  # fmt: skip
        if self.commit:
            ring_commit(self.cursors, x["slots"], self.accept(), fold_phase=self.fold_phase, validate=False)
            if self.fold_ahead:
                gdn_fold_ahead(self.checkpoint, self.ring_layers, x["slots"], validate=False)
        else:  # a frozen step still ends its epoch, as a commit would, so a flushing row folds every time
            self.cursors.epoch.add_(1)

    def committed(self, layer: int) -> torch.Tensor:
        slots = self.x["slots"]
        out = torch.zeros(slots.shape[0], *self.checkpoint.shape[2:], device=slots.device)
        return gdn_exact_fold(self.checkpoint[layer], self.rings[layer], slots, out=out, validate=False)

    def set_cursors(self, flush: bool) -> int:
        """Flush: a fold of L-T records, then the window from the folded checkpoint; non-flush: a window
        over L-2T history records. No commit, so the cursors never move."""
        T, L = self.case.T, self.case.L
        self.commit = False
        self.cursors.write_pos.fill_(L - T if flush else L - 2 * T)
        self.cursors.flush.fill_(int(flush))
        return L - T if flush else 0
