"""SGLang 0.5.16 and 0.5.23 peers (their own kernel files) against replayssm's recurrent baseline, at tiny shapes.

On a machine without a GPU the kernels run in the Triton interpreter (tests/conftest.py sets
TRITON_INTERPRET before anything is imported). The chains run through ``bench.check.lockstep``, the
gate the benchmark runs before timing, with rows moved between slots and padding rows between steps.
Smallest shapes SGLang's kernels accept: K >= 32 (the ReplaySSM verify splits K into two tiles that
must be >= 16 wide for ``tl.dot``); any V, T and L (the verify pads the window to 4, the history to 16).

Bounds (norm-relative, fp16 activations, fp32 states; tighter than the benchmark's gate because the
interpreter has no tf32): outputs 2e-3 (every side rounds them to fp16, 2^-11); committed states of
the recurrent verify kernels and 0.5.16's exact fold 1e-6 (the same fp32 recurrence, other reduction
order); 0.5.23's compact fold 2e-4 (products of hi/lo fp16 parts, ~fp32, in closed form rather than
record by record); the ring decode and the packed decode 2e-3 (both round beta to fp16; the ring folds
open-loop).
"""

import dataclasses
import functools

import pytest
import torch

from replayssm.bench.check import lockstep, verdict
from replayssm.bench.peers.sglang import ROLES, load_release
from replayssm.bench.steps import RecurrentDecode, RecurrentStep, ReplayStep, make_case
from replayssm.ops import GDNShape

GEO = GDNShape(H=1, HV=2, K=32, V=16)
S, B = 4, 3  # slots, rows: one slot is idle every step
DTYPE = torch.float16


@pytest.fixture(scope="module", params=["0.5.16", "0.5.23"])
def kernels(request, sglang_root):
    return load_release(request.param, sglang_root)


def tiny_case(T, L, layers, device, seed=0):
    case = make_case(GEO, B, T, L, layers, DTYPE, seed=seed, device=device)
    g = torch.Generator().manual_seed(seed)
    state0 = torch.randn(layers, S, GEO.HV, GEO.V, GEO.K, generator=g) * 0.2
    return dataclasses.replace(case, state0=state0.to(device))


def mover(case, seed=0, pad_every=3):
    """``on_step``: rows take a random subset of the slots in random order; every ``pad_every``-th step
    one row is padding (-1)."""
    g = torch.Generator().manual_seed(seed)

    def on_step(i):
        rows = torch.randperm(S, generator=g)[:B]
        if i % pad_every == pad_every - 1:
            rows[int(torch.randint(0, B, (1,), generator=g))] = -1
        case.inputs["slots"].copy_(rows.to(torch.int32))

    return on_step


def keeping(built, label, build):
    """A builder that also records what it built."""

    def make(case):
        built[label] = build(case)
        return built[label]

    return make


def test_verify_chain(kernels, device):
    """Recurrent verify + scatter and ReplaySSM verify + commit of the release, in lockstep with ours."""
    T, L = 3, 8  # T=3 pads SGLang's window lanes; a slot folds once write_pos > 2
    case = tiny_case(T, L, layers=2, device=device)
    roles, built = ROLES[kernels.version], {}
    candidates = {
        "ours": ReplayStep.build,
        "recurrent": keeping(built, "recurrent", functools.partial(roles["recurrent"].build, kernels=kernels)),
        "replay": keeping(built, "replay", functools.partial(roles["replay"].build, kernels=kernels)),
    }
    stats = lockstep(case, RecurrentStep.build, candidates, steps=10, on_step=mover(case))
    print(f"\nsglang {kernels.version}: {stats}")
    assert stats["ours"]["bitwise"] and verdict(stats["ours"], "bitwise")["passed"]
    assert stats["replay"]["folds"] >= S
    for role in ("recurrent", "replay"):
        assert verdict(stats[role], "tolerance")["passed"], stats[role]
        assert stats[role]["max_out_err"] <= 2e-3 and not stats[role]["nan"]
    assert stats["recurrent"]["max_state_err"] <= 1e-6
    if kernels.version == "0.5.16":
        assert stats["replay"]["max_state_err"] <= 1e-6
        for layer in range(case.layers):  # its exact fold replays its recurrent kernel bit for bit
            assert torch.equal(built["replay"].committed(layer), built["recurrent"].committed(layer))
    else:
        assert 0 < stats["replay"]["max_state_err"] <= 2e-4  # the compact fold: close, not exact


def test_decode_chain(kernels, device):
    """The ring decode and the plain (packed) recurrent decode of the release, in lockstep with ours."""
    L = 8
    case = tiny_case(1, L, layers=1, device=device, seed=1)
    roles = ROLES[kernels.version]
    candidates = {
        "ours": ReplayStep.build,
        "ring": functools.partial(roles["ring_decode"].build, kernels=kernels),
        "decode": functools.partial(roles["recurrent_decode"].build, kernels=kernels),
    }
    stats = lockstep(case, RecurrentDecode.build, candidates, steps=16, on_step=mover(case, seed=1, pad_every=4))
    print(f"\nsglang {kernels.version} decode: {stats}")
    assert stats["ours"]["bitwise"]
    assert stats["ring"]["folds"] >= 2  # slots decode ~11 of the 16 steps; the ring flushes at the 8th
    assert verdict(stats["ring"], "tolerance")["passed"], stats["ring"]
    assert stats["ring"]["max_out_err"] <= 2e-3 and stats["ring"]["max_state_err"] <= 2e-3
    assert verdict(stats["decode"], "tolerance")["passed"], stats["decode"]
    assert stats["decode"]["max_out_err"] <= 2e-3 and stats["decode"]["max_state_err"] <= 2e-3  # beta in fp16


@pytest.mark.parametrize("flush", [False, True])
def test_set_cursors_repeats_the_same_step(kernels, device, flush):
    """Every call of a frozen step sees the same cursors; a flush step folds (changes the checkpoint)
    at every call, a non-flush step never does and repeats its outputs."""
    T, L = 2, 8
    case = tiny_case(T, L, layers=1, device=device, seed=2)
    case = dataclasses.replace(case, state0=case.state0[:, :B])
    case.inputs["slots"].copy_(torch.arange(B, dtype=torch.int32))
    step = ROLES[kernels.version]["replay"].build(case, kernels=kernels)
    for _ in range(L):
        step()
    assert step.set_cursors(flush) == (L - T if flush else 0)
    seen, checkpoints, outputs = [], [step.temporal.clone()], []
    for _ in range(3):
        step()
        seen.append([c.clone() for c in (step.write_pos, step.cache_base, step.is_flush)])
        checkpoints.append(step.temporal.clone())
        outputs.append(step.outputs[0].clone())
    for later in seen[1:]:
        assert all(torch.equal(a, b) for a, b in zip(seen[0], later))
    for before, after in zip(checkpoints, checkpoints[1:]):
        assert torch.equal(before, after) != flush
    if not flush:
        assert torch.equal(outputs[0], outputs[2])
