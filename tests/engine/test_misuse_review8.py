"""An eighth misuse review (2026-12-05, twenty-eighth session), the engine's part: each test failed before its fix."""

import pytest
import torch

from replayssm.engine.runner import ModelRunner, RunnerConfig
from replayssm.models.loader import load_model


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(tiny_model_dir).float()


@pytest.mark.parametrize("backend", ["replay", "recurrent"])
def test_a_page_size_the_attention_kernel_cannot_take_is_refused_when_the_runner_is_built(model, monkeypatch,
                                                                                           backend):  # fmt: skip
    """page_size=8 was accepted; with the kernels on (every GPU run; here REPLAYSSM_IMPL=triton) each step then
    raised inside the attention, after a recurrent decode had written its slots' state in place (the slot lost)."""
    cfg = RunnerConfig(backend=backend, window=1 if backend == "recurrent" else 2, page_size=8, max_slots=2,
                       max_len=64, cuda_graphs=False)  # fmt: skip
    monkeypatch.setenv("REPLAYSSM_IMPL", "triton")
    with pytest.raises(ValueError, match=r"page_size=8: the paged attention kernel, which runs on cpu, needs a power "
                                         r"of two >= 16"):  # fmt: skip
        ModelRunner(model, cfg)
    monkeypatch.delenv("REPLAYSSM_IMPL")
    r = ModelRunner(model, cfg)  # the reference attention takes any power of two
    slot = r.alloc()
    r.prefill(slot, [1, 2, 3, 4])
    r.step([slot], torch.tensor([[5] + [6] * (cfg.window - 1)]))


def test_a_parked_request_with_two_slots_of_gdn_state_is_refused_before_anything_is_allocated(model):
    """restore allocated the parcel's two GDN slots, then the KV part (one row) refused: one slot leaked per try."""
    from replayssm.engine.config import ParkedRequest
    from replayssm.state import ParkedSlots

    r = ModelRunner(model, RunnerConfig(backend="replay", window=2, max_slots=4, max_len=64, cuda_graphs=False))
    a, b = r.alloc(), r.alloc()
    r.prefill(a, [1, 2, 3])
    r.prefill(b, [4, 5, 6])
    p, two = r.offload(a), r.pool.offload(torch.tensor([b], dtype=torch.int32))
    g = ParkedSlots(p.gdn.config, *(torch.cat([getattr(p.gdn, n), getattr(two, n)], 1) for n in ("checkpoint",
                    "conv_state")), {k: torch.cat([p.gdn.ring[k], two.ring[k]], 1) for k in p.gdn.ring},
                    {k: torch.cat([p.gdn.cursors[k], two.cursors[k]]) for k in p.gdn.cursors})  # fmt: skip
    free, live = r.pool.num_free, sorted(r.pool.tracker.live)
    for _ in range(2):
        with pytest.raises(ValueError, match="parked GDN state of 2 slots: a ParkedRequest holds one request's"):
            r.restore(ParkedRequest(g, p.kv, p.drafter))
        assert (r.pool.num_free, sorted(r.pool.tracker.live)) == (free, live)
    assert r.restore(p) is not None
