"""The engine on the GPU with CUDA graphs: the embedded model, and a Qwen3.5-27B-shaped model with random weights."""

import torch

from replayssm.bench.synthetic import preset_config, random_model
from replayssm.demo import run_model_demo
from replayssm.engine.engine import Engine
from replayssm.engine.runner import ModelRunner, RunnerConfig


def test_embedded_model_demo():
    """Plain greedy decode, n-gram and MTP speculative decoding on both backends, and replay with a recurrent
    shadow (bf16)."""
    res = run_model_demo(device="cuda", max_new_tokens=128)
    for name, b in res["runs"].items():
        assert b["same_tokens_as_plain"], name
    assert res["runs"]["replay+recurrent-lockstep/mtp"]["bitwise_every_step"]
    assert res["runs"]["replay/mtp"]["mean_accepted"] > res["runs"]["replay/ngram"]["mean_accepted"]


def test_27b_shaped_model_lockstep_bitwise():
    """8 layers at Qwen3.5-27B widths, 8 requests, n-gram drafts: the replay pool's committed state equals the
    recurrent shadow's at every step and layer (the shadow is fed the replay run's exact layer inputs)."""
    cfg = preset_config("qwen3.5-27b", 8)
    model = random_model(cfg, device="cuda", dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, cfg.vocab_size, (64,), generator=g).tolist() for _ in range(8)]
    rc = RunnerConfig(backend="replay", max_slots=8, max_len=256, window=4, shadow_backend="recurrent")
    eng = Engine(ModelRunner(model, rc), drafter="ngram")
    reqs = [eng.add(p, 48) for p in prompts]
    assert eng.runner.use_graphs
    steps = 0
    while eng.step():
        steps += 1
        live = [r.slot for r in reqs if r.slot is not None]
        if live:
            assert eng.runner.states_equal(live), f"step {steps}"
    assert all(len(r.generated) == 48 for r in reqs)
