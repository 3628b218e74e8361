"""An independent float64 implementation of docs/design.md ("the math"), written for the tests from the formulas.

It shares no code with replayssm: gating, normalisation and the delta-rule recurrence are spelled
out again here so that a mistake in the library's references cannot hide behind itself.
"""

import math

import torch


def gates64(a, b, A_log, dt_bias):
    x = a.double() + dt_bias.double()
    softplus = torch.where(x <= 20, torch.log1p(torch.exp(torch.clamp(x, max=20))), x)
    return -torch.exp(A_log.double()) * softplus, torch.sigmoid(b.double())


def unit64(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def run64(S, q, k, v, a, b, A_log, dt_bias, scale=None):
    """Recurrence over one request's tokens. S: [HV, V, K] (any float); q, k: [T, H, K]; v: [T, HV, V];
    a, b: [T, HV]. Returns (outputs [T, HV, V], states after each token [T, HV, V, K]) in float64."""
    T, H, K = q.shape
    HV = v.shape[1]
    scale = 1 / math.sqrt(K) if scale is None else scale
    g, beta = gates64(a, b, A_log, dt_bias)
    S = S.double().clone()
    outs, states = [], []
    for t in range(T):
        kt = unit64(k[t].double()).repeat_interleave(HV // H, 0)  # [HV, K]
        qt = unit64(q[t].double()).repeat_interleave(HV // H, 0) * scale
        decay = torch.exp(g[t])[:, None, None]
        pred = torch.einsum("hvk,hk->hv", decay * S, kt)
        u = beta[t][:, None] * (v[t].double() - pred)
        S = decay * S + u[:, :, None] * kt[:, None, :]
        outs.append(torch.einsum("hvk,hk->hv", S, qt))
        states.append(S.clone())
    return torch.stack(outs), torch.stack(states)


def rel_err(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()
