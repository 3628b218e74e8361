"""Replay the small-shape GPU chain (tests/ops/test_chain.py) and report the first step where the
committed state leaves the baseline, with the cursors involved and whether the verify kernel's
fused fold agrees with the standalone fold kernel on the same inputs. Usage: python scripts/diag_chain.py"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replayssm.ops import gdn_exact_fold  # noqa: E402
from tests.ops.chain import Chain  # noqa: E402


def run(G, T, L, dtype, steps=64, num_slots=3, seed=0):
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    c = Chain(num_slots, 2, 2 * G, 16, 16, T=T, L=L, dtype=dtype, device=dev, impl="triton", seed=seed)
    rng = torch.Generator().manual_seed(seed + 1)
    for step in range(steps):
        perm = torch.randperm(num_slots, generator=rng).tolist()
        slots = perm[: int(torch.randint(1, num_slots + 1, (1,), generator=rng))]
        if torch.rand(1, generator=rng) < 0.3:
            slots.insert(int(torch.randint(0, len(slots) + 1, (1,), generator=rng)), -1)
        lens = [int(torch.randint(1, T + 1, (1,), generator=rng)) for _ in slots]
        ck0, ring0 = c.checkpoint.clone(), c.ring.clone()
        cur = {k: getattr(c.ring.cursors, k).tolist() for k in ("write_pos", "base", "flush")}
        c.verify(slots, lens)
        live = [s for s in slots if s >= 0]
        flushed = [s for s in live if cur["flush"][s]]
        if flushed:
            idx = torch.tensor(flushed, dtype=torch.int32, device=dev)
            ref = torch.empty(len(flushed), *ck0.shape[1:], device=dev)
            gdn_exact_fold(ck0, ring0, idx, out=ref)
            fused_ok = torch.equal(c.checkpoint[idx.long()], ref)
        else:
            fused_ok = None
        acc = [int(torch.randint(1, n + 1, (1,), generator=rng)) for n in lens]
        c.commit(acc)
        committed = c.committed_replay(list(range(num_slots)))
        bad = [s for s in range(num_slots) if not torch.equal(committed[s], c.state[s])]
        if bad or fused_ok is False:
            print(f"step {step}: slots {slots} lens {lens} acc {acc} cursors-before {cur}")
            print(f"  diverged slots {bad}; flushed {flushed}; fused fold == standalone fold: {fused_ok}")
            for s in bad:
                d = (committed[s] - c.state[s]).abs()
                print(f"  slot {s}: max diff {d.max().item():.3e}, {(d > 0).sum().item()} of {d.numel()} differ")
            return False
    print(f"G={G} T={T} L={L} {dtype}: {steps} steps bitwise")
    return True


if __name__ == "__main__":
    for cfg in [
        (2, 4, 8, torch.float16),
        (2, 4, 8, torch.float32),
        (2, 4, 16, torch.float16),
        (1, 4, 8, torch.float16),
    ]:
        run(*cfg)
