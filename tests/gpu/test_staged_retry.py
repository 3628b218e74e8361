"""A retried staged verify at the real shape, where the main kernel keeps its stream's buffers in the rows of a
folding row's history keys (``verify_launch.pack_in_keys``): a retry finds its heads folded, leaves its copies of the
history in flight, and must wait for them before the stream writes the same shared memory (ops/verify_kernel.py).
The window products a folding row takes with its fold (``verify_launch.dots_in_fold``) must be the stream's bits."""

import pytest
import torch

from replayssm.ops import gdn_replay_verify
from replayssm.ops.verify_launch import pack_in_keys
from tests.helpers.chain import Chain, call
from tests.helpers.inputs import make_gdn_inputs, slot_tensor

H, HV, K, V = 16, 64, 128, 128


def _mixed_step(T, L, dtype=torch.bfloat16):
    """A chain of 96 rows whose next step has some rows folding and the others streaming their history: the chain,
    that step's inputs and the slots."""
    S = 96
    c = Chain(S, H, HV, K, V, T=T, L=L, dtype=dtype, device="cuda", impl="triton", seed=7, rng_device="cuda")
    g = torch.Generator().manual_seed(7)
    for _ in range(400):  # random halves of the rows step, so that they reach their folds at different steps
        if 8 <= int(c.ring.cursors.flush.sum()) < S // 2:
            break
        rows = sorted(torch.randperm(S, generator=g)[: S // 2].tolist())
        lens = torch.randint(1, T + 1, (len(rows),), generator=g).tolist()
        c.verify(rows, lens)
        c.commit([int(torch.randint(1, n + 1, (1,), generator=g)) for n in lens])
    assert 8 <= int(c.ring.cursors.flush.sum()) < S // 2
    lens = torch.randint(1, T + 1, (S,), generator=g).tolist()
    x = make_gdn_inputs(lens, H, HV, K, V, dtype=dtype, device="cuda", gen=c.gen)
    x["A_log"], x["dt_bias"] = c.A_log, c.dt_bias
    return c, x, slot_tensor(list(range(S)), "cuda")


@pytest.mark.parametrize(
    "T, L, NX, dif",
    [(1, 32, 2, "0"), (4, 16, 8, "0"), (4, 16, 8, "1"), (4, 16, 8, "2"), (4, 16, 8, "3"), (4, 32, 8, "1")],
)  # NX: the window vectors (T=4: tensor cores, 8)
def test_a_retried_staged_verify_gives_the_first_attempts_bits(T, L, NX, dif, monkeypatch):
    """A step in which some rows fold and the others stream their history, then three retries of it: outputs,
    checkpoints and update vectors torch.equal to the first attempt's. With ``dif`` 1 to 3 the first attempt's
    folding rows take their window products with the fold (``verify_launch.dots_in_fold``); the retries stream."""
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", "0")
    monkeypatch.setenv("REPLAYSSM_VERIFY_DIF", dif)
    assert pack_in_keys(L, K, T, NX, V, 2)
    c, x, slots = _mixed_step(T, L)
    before = c.checkpoint.clone()
    first = call(gdn_replay_verify, x, checkpoint=c.checkpoint, ring=c.ring, slots=slots).clone()
    folded, u = c.checkpoint.clone(), c.ring.u.clone()
    assert not torch.equal(folded, before)
    for _ in range(3):  # the retries
        again = call(gdn_replay_verify, x, checkpoint=c.checkpoint, ring=c.ring, slots=slots)
        assert torch.equal(again, first)
        assert torch.equal(c.checkpoint, folded) and torch.equal(c.ring.u.nan_to_num(), u.nan_to_num())


@pytest.mark.parametrize(
    "T, L, dif, dtype",
    [
        (4, 16, "1", torch.bfloat16),
        (4, 16, "2", torch.bfloat16),
        (4, 16, "3", torch.bfloat16),
        (4, 32, "1", torch.bfloat16),
        (4, 16, "2", torch.float32),  # fp32 activations: not packed, the vectors copied early into their own buffer
        (4, 16, "3", torch.float32),
    ],
)
def test_window_products_with_the_fold_are_the_streams_bits(T, L, dif, dtype, monkeypatch):
    """The same mixed step with the folding rows' products taken with their fold (``REPLAYSSM_VERIFY_DIF`` 1 to 3)
    and streamed back (0): outputs, checkpoints and update vectors torch.equal."""
    monkeypatch.setenv("REPLAYSSM_VERIFY_ONE_LAUNCH", "0")
    assert pack_in_keys(L, K, T, 8, V, torch.finfo(dtype).bits // 8) == (dtype == torch.bfloat16)
    got = []
    for mode in ("0", dif):
        monkeypatch.setenv("REPLAYSSM_VERIFY_DIF", mode)
        c, x, slots = _mixed_step(T, L, dtype)
        o = call(gdn_replay_verify, x, checkpoint=c.checkpoint, ring=c.ring, slots=slots).clone()
        got.append((o, c.checkpoint.clone(), c.ring.u.nan_to_num()))
    assert torch.equal(got[0][0], got[1][0])
    assert torch.equal(got[0][1], got[1][1]) and torch.equal(got[0][2], got[1][2])
