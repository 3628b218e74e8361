"""The runner's step protocol: one step in flight, committed once, pool and KV cache together."""

from dataclasses import replace

import pytest
import torch

from replayssm.engine.runner import ModelRunner, RunnerConfig, pool_config
from replayssm.models.loader import load_model
from replayssm.state import GDNStatePool


def test_step_commit_protocol(tiny_model_dir):
    model = load_model(tiny_model_dir)
    runner = ModelRunner(model, RunnerConfig(max_slots=2, max_len=64, window=3))
    with pytest.raises(RuntimeError, match="no step to commit"):
        runner.commit([1])
    slot = runner.alloc()
    runner.prefill(slot, [5, 6, 7])
    logits = runner.step([slot], torch.tensor([[8, 9, 10]]))
    assert logits.shape == (1, 3, model.config.vocab_size)
    with pytest.raises(RuntimeError, match="not committed yet"):
        runner.step([slot], torch.tensor([[8, 9, 10]]))
    with pytest.raises(ValueError, match="num_accepted has 2 entries for a step of 1 rows"):
        runner.commit([1, 1])
    runner.commit([2])
    assert int(runner.kv.lens[slot]) == 3 + 2  # the KV cache moved with the GDN state
    assert int(runner.pool.cursors.write_pos[slot]) == 2


def test_pool_is_configured_not_swapped(tiny_model_dir):
    model = load_model(tiny_model_dir)
    cfg = RunnerConfig(max_slots=2, max_len=64)
    pool = GDNStatePool(pool_config(model, cfg))
    assert ModelRunner(model, cfg, pool=pool).pool is pool
    with pytest.raises(ValueError, match="pool must be built for pool_config"):
        ModelRunner(model, replace(cfg, window=2), pool=pool)
