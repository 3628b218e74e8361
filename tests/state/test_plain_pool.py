"""A window-1 pool only decodes: the recurrent backend keeps no snapshots then (plain decoding updates the
state in place), so plain decoding's memory is the checkpoint alone, as the memory planner counts it."""

import pytest
import torch

from replayssm.state.memory import pool_memory_report
from tests.helpers.pools import Weights, device_state, inputs, pool, same, step


def test_recurrent_window_1_keeps_no_snapshots_and_decodes_like_replay():
    plain = pool("recurrent", window=1, ring_len=4)
    assert plain.snapshots is None and pool_memory_report(plain)["snapshots"] == 0
    assert plain.ring_layers is None and plain.rings == ()  # (it allocated a ring it never used, counted nowhere)
    assert pool("recurrent", window=2, ring_len=4).snapshots is not None
    ref = pool("replay", window=1, ring_len=4)
    w, g = Weights(plain.cfg, seed=1), torch.Generator().manual_seed(2)
    ids = plain.alloc(3).tolist()
    assert ref.alloc(3).tolist() == ids
    for _ in range(6):
        x = inputs(plain.cfg, [1, 1, 1], g)
        step(plain, w, ids, x, [1, 1, 1], decode=True)
        step(ref, w, ids, x, [1, 1, 1], decode=True)
        t = torch.tensor(ids, dtype=torch.int32)
        assert all(torch.equal(plain.committed_state(layer, t), ref.committed_state(layer, t)) for layer in range(2))


def test_a_verify_on_a_window_1_recurrent_pool_is_refused_before_anything_moves():
    p = pool("recurrent", window=1, ring_len=4)
    ids = p.alloc(1)
    before = device_state(p)
    x = inputs(p.cfg, [1], torch.Generator().manual_seed(3))
    w = Weights(p.cfg)
    with pytest.raises(ValueError, match="window=1 and keeps no snapshots: it can only decode"):
        p.verify(
            0,
            x["q"],
            x["k"],
            x["v"],
            x["a"],
            x["b"],
            A_log=w.layers[0]["A_log"],
            dt_bias=w.layers[0]["dt_bias"],
            slots=ids,
            cu_seqlens=x["cu"],
        )
    assert same(before, device_state(p))
