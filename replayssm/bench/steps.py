"""Benchmark steps: one speculative (or decode) step over ``nl`` GDN layers, for each backend.

Every layer has its own state tensors (as in a real model) so that the working set is far larger
than the L2 cache; activations are shared across layers (they are tiny). A step ends with the
backend's commit, so replaying a captured step evolves the ring cursors through the real
protocol and flush steps occur at their real rate.
"""

from __future__ import annotations

import torch

from ..ops import GDNShape, Ring, RingCursors, gdn_exact_fold, gdn_recurrent, gdn_replay_verify, ring_commit
from ..ops.snapshots import commit_snapshots


def make_inputs(geo: GDNShape, B: int, T: int, dtype, seed: int = 0, device="cuda") -> dict:
    g = torch.Generator(device=device).manual_seed(seed)
    N = B * T

    def r(*s, scale=1.0):
        return (torch.randn(*s, device=device, generator=g) * scale).to(dtype)

    return dict(
        q=r(N, geo.H, geo.K), k=r(N, geo.H, geo.K), v=r(N, geo.HV, geo.V), a=r(N, geo.HV), b=r(N, geo.HV),
        A_log=torch.rand(geo.HV, device=device, generator=g) - 1.0,
        dt_bias=torch.randn(geo.HV, device=device, generator=g) * 0.5,
        cu_seqlens=torch.arange(0, N + 1, T, dtype=torch.int32, device=device),
        slots=torch.randperm(B, device=device, generator=g).to(torch.int32),
    )  # fmt: skip


def acceptance(B: int, T: int, mode: str, device="cuda"):
    """A function giving num_accepted [B] int32 inside a graph: "full" (T each) or "random" (uniform 1..T)."""
    full = torch.full((B,), T, dtype=torch.int32, device=device)
    if mode == "full":
        return lambda: full
    return lambda: torch.randint(1, T + 1, (B,), device=device, dtype=torch.int32)


class RecurrentStep:
    """The baseline: verify writing a snapshot per token, then copy the accepted snapshot (per layer)."""

    def __init__(self, geo: GDNShape, B: int, T: int, nl: int, x: dict, accept, state0: torch.Tensor):
        self.x, self.nl, self.accept, self.T = x, nl, accept, T
        self.state = state0.clone()  # [nl, B, HV, V, K]
        self.snaps = torch.empty(nl, B, T, geo.HV, geo.V, geo.K, device=state0.device)
        self.out = torch.empty_like(x["v"])

    def verify(self, layer: int):
        x = self.x
        return gdn_recurrent(x["q"], x["k"], x["v"], x["a"], x["b"], A_log=x["A_log"], dt_bias=x["dt_bias"],
                             state=self.state[layer], slots=x["slots"], cu_seqlens=x["cu_seqlens"],
                             snapshots=self.snaps[layer], update_state=False, out=self.out, validate=False)  # fmt: skip

    def __call__(self):
        for layer in range(self.nl):
            self.verify(layer)
        commit_snapshots(self.state, self.snaps, self.x["slots"], self.accept(), validate=False)


class RecurrentDecode(RecurrentStep):
    """Plain decode: one token per request, state updated in place."""

    def __call__(self):
        x = self.x
        for layer in range(self.nl):
            gdn_recurrent(x["q"], x["k"], x["v"], x["a"], x["b"], A_log=x["A_log"], dt_bias=x["dt_bias"],
                          state=self.state[layer], slots=x["slots"], cu_seqlens=x["cu_seqlens"], out=self.out,
                          validate=False)  # fmt: skip


class ReplayStep:
    """ReplaySSM: verify from checkpoint + ring for every layer, then one device-side cursor commit."""

    def __init__(self, geo, B, T, nl, x, accept, state0, *, L, dtype, commit=True):
        self.x, self.nl, self.accept, self.commit = x, nl, accept, commit
        self.checkpoint = state0.clone()
        dev = state0.device
        self.cursors = RingCursors.allocate(B, L=L, window=T, device=dev)
        self.rings = [Ring.allocate(B, geo.H, geo.HV, geo.K, geo.V, L=L, window=T, dtype=dtype, device=dev,
                                    cursors=self.cursors) for _ in range(nl)]  # fmt: skip
        self.out = torch.empty_like(x["v"])

    def verify(self, layer: int):
        x = self.x
        return gdn_replay_verify(x["q"], x["k"], x["v"], x["a"], x["b"], A_log=x["A_log"], dt_bias=x["dt_bias"],
                                 checkpoint=self.checkpoint[layer], ring=self.rings[layer], slots=x["slots"],
                                 cu_seqlens=x["cu_seqlens"], out=self.out,
                                 validate=False)  # fmt: skip

    def __call__(self):
        for layer in range(self.nl):
            self.verify(layer)
        if self.commit:
            ring_commit(self.cursors, self.x["slots"], self.accept(), validate=False)
        else:  # a frozen step still ends its epoch, as a commit would, so a flushing row folds every time
            self.cursors.epoch.add_(1)

    def committed(self, layer: int) -> torch.Tensor:
        slots = self.x["slots"]
        out = torch.empty(slots.shape[0], *self.checkpoint.shape[2:], device=slots.device)
        return gdn_exact_fold(self.checkpoint[layer], self.rings[layer], slots, out=out, validate=False)

    def set_cursors(self, write_pos: int, flush: bool):
        """Freeze the cursors of every slot (for timing pure non-flush or pure flush steps without commit)."""
        self.cursors.write_pos.fill_(write_pos)
        self.cursors.flush.fill_(int(flush))
