"""Locate a bitwise mismatch between the exact fold and the recurrent baseline at a given geometry (GPU).

Runs one verify (which stores g, beta and raw k, v in the ring) and one recurrent step on the same
window from the same state, then checks: ring g/beta == the gating kernel's g/beta; fold(state,
records) == recurrent state, per token count. Usage: python scripts/diag_bitwise.py H HV K V DTYPE
"""

import sys

import torch

from replayssm.ops import Ring, gdn_exact_fold, gdn_gating, gdn_recurrent, gdn_replay_verify, ring_commit

H, HV, K, V = (int(x) for x in sys.argv[1:5])
dt = getattr(torch, sys.argv[5])
DEV = "cuda" if torch.cuda.is_available() else "cpu"
T, L, S = 4, 16, 3
g = torch.Generator(device=DEV).manual_seed(0)
r = lambda *s: torch.randn(*s, device=DEV, generator=g).to(dt)  # noqa: E731
q, k, v, a, b = r(T, H, K), r(T, H, K), r(T, HV, V), r(T, HV), r(T, HV)
A_log, dt_bias = torch.rand(HV, device=DEV) - 1, torch.randn(HV, device=DEV)
state = torch.randn(S, HV, V, K, device=DEV, generator=g) * 0.1
slots = torch.tensor([1], dtype=torch.int32, device=DEV)
cu = torch.tensor([0, T], dtype=torch.int32, device=DEV)
ring = Ring.allocate(S, H, HV, K, V, L=L, window=T, dtype=dt, device=DEV)
ck = state.clone()
gdn_replay_verify(q, k, v, a, b, A_log=A_log, dt_bias=dt_bias, checkpoint=ck, ring=ring, slots=slots, cu_seqlens=cu)
gg, bb = gdn_gating(a, b, A_log=A_log, dt_bias=dt_bias)
print(
    "ring g == gating kernel g:",
    torch.equal(ring.g[1, :, :T].t(), gg),
    " beta:",
    torch.equal(ring.beta[1, :, :T].t(), bb),
)
print(
    "ring k raw equal:",
    torch.equal(ring.k[1, :, :T].transpose(0, 1), k),
    " v:",
    torch.equal(ring.v[1, :, :T].transpose(0, 1), v),
)
for n in range(1, T + 1):
    st = state.clone()
    snaps = torch.empty(1, T, HV, V, K, device=DEV)
    gdn_recurrent(q, k, v, a, b, A_log=A_log, dt_bias=dt_bias, state=st, slots=slots, cu_seqlens=cu, snapshots=snaps,
                  update_state=False)  # fmt: skip
    rg = ring.clone()
    ring_commit(rg, slots, torch.tensor([n], dtype=torch.int32, device=DEV))
    out = torch.empty(1, HV, V, K, device=DEV)
    gdn_exact_fold(state.clone(), rg, slots, out=out)
    d = (out[0] - snaps[0, n - 1]).abs()
    print(f"n={n}: fold == recurrent snapshot: {torch.equal(out[0], snaps[0, n - 1])}, max diff {d.max().item():.3e}, "
          f"differing elements {(d > 0).sum().item()} of {d.numel()}")  # fmt: skip
