"""Driving GDN state pools through steps in tests: small random geometry, per-layer weights, whole steps."""

from __future__ import annotations

import torch

from replayssm.state import GDNStatePool, PoolConfig

SMALL = dict(H=1, HV=2, K=16, V=16)


def pool(backend: str = "replay", **kw) -> GDNStatePool:
    cfg = dict(num_slots=4, num_layers=2, **SMALL, window=3, ring_len=8, backend=backend, dtype=torch.float32)
    cfg.update(kw)
    return GDNStatePool(PoolConfig(**cfg))


def slots(ids) -> torch.Tensor:
    return torch.tensor(list(ids), dtype=torch.int32)


class Weights:
    """Random per-layer GDN weights (A_log, dt_bias, conv weight and bias) for a pool config."""

    def __init__(self, cfg: PoolConfig, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
        C, W = cfg.channels, cfg.conv_kernel
        self.layers = [dict(A_log=r(cfg.HV) * 0.5 - 1, dt_bias=r(cfg.HV) * 0.5, weight=r(C, W) * 0.5, bias=r(C))
                       for _ in range(cfg.num_layers)]  # fmt: skip


def inputs(cfg: PoolConfig, lens, gen: torch.Generator) -> dict:
    """Random step inputs for rows of window lengths ``lens``: x (conv input), q, k, v, a, b, cu_seqlens."""
    N = sum(lens)
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    return dict(x=r(N, cfg.channels), q=r(N, cfg.H, cfg.K), k=r(N, cfg.H, cfg.K), v=r(N, cfg.HV, cfg.V),
                a=r(N, cfg.HV), b=r(N, cfg.HV), cu=cu)  # fmt: skip


def conv(p, w: Weights, layer: int, ids, x: dict, *, layer_index=None):
    """conv_update of ``layer`` with its weights (``layer_index``: pass another index, for misuse tests)."""
    lw = w.layers[layer]
    idx = layer if layer_index is None else layer_index
    return p.conv_update(idx, x["x"], weight=lw["weight"], bias=lw["bias"], slots=slots(ids), cu_seqlens=x["cu"])


def ssm(p, w: Weights, layer: int, ids, x: dict, *, decode: bool = False, layer_index=None, **kw):
    """verify (or decode) of ``layer`` with its weights; ``kw`` goes to the pool (e.g. ``scale``)."""
    lw = w.layers[layer]
    fn = p.decode if decode else p.verify
    extra = {} if decode else {"cu_seqlens": x["cu"]}
    idx = layer if layer_index is None else layer_index
    return fn(idx, x["q"], x["k"], x["v"], x["a"], x["b"], A_log=lw["A_log"], dt_bias=lw["dt_bias"],
              slots=slots(ids), **extra, **kw)  # fmt: skip


def layers(p, w: Weights, ids, x: dict, *, decode: bool = False, which=None) -> list:
    """conv + verify (or decode) of ``which`` layers (default all); returns the SSM outputs."""
    out = []
    for layer in range(p.cfg.num_layers) if which is None else which:
        conv(p, w, layer, ids, x)
        out.append(ssm(p, w, layer, ids, x, decode=decode))
    return out


def step(p, w: Weights, ids, x: dict, accepted, *, decode: bool = False) -> list:
    out = layers(p, w, ids, x, decode=decode)
    p.commit(slots(ids), slots(accepted))
    return out


def device_state(p, *, scratch: bool = False) -> list[torch.Tensor]:
    """Every device tensor of a pool (NaN-free copies, so torch.equal compares never-written records too);
    with ``scratch`` also the step's scratch (conv inputs, the recurrent backend's snapshots)."""
    parts = [p.checkpoint, p.conv_state]
    if scratch:
        parts += [p.conv_scratch] + ([p.snapshots] if p.snapshots is not None else [])
    if p.cfg.backend == "replay":
        c, r = p.cursors, p.ring_layers
        parts += [r.k, r.v, r.g, r.beta, r.u, c.write_pos, c.base, c.flush, c.pending, r.folded, c.epoch]
    return [t.clone().nan_to_num() for t in parts]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def slot_state(p, ids) -> list[torch.Tensor]:
    """The committed SSM and conv state of ``ids`` in every layer."""
    s = slots(ids)
    return [t for layer in range(p.cfg.num_layers)
            for t in (p.committed_state(layer, s), p.committed_conv_state(layer, s))]  # fmt: skip
