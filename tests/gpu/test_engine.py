"""The engine on the GPU with CUDA graphs: the embedded model, and a Qwen3.5-27B-shaped model with random weights."""

import pytest
import torch

from replayssm.bench.synthetic import preset_config, random_model
from replayssm.demo import run_model_demo
from replayssm.engine.engine import Engine
from replayssm.engine.runner import ModelRunner, RunnerConfig
from replayssm.engine.spec import BenchmarkAcceptance


def test_embedded_model_demo():
    """Plain greedy decode, n-gram and MTP speculative decoding on both backends, and replay with a recurrent
    shadow (fp32, the demo's default): greedy speculative output equals plain decode."""
    res = run_model_demo(device="cuda", max_new_tokens=128)
    for name, b in res["runs"].items():
        assert b["same_tokens_as_plain"], name
    assert res["runs"]["replay+recurrent-lockstep/mtp"]["bitwise_every_step"]
    assert res["runs"]["replay/mtp"]["mean_accepted"] > res["runs"]["replay/ngram"]["mean_accepted"]


def test_embedded_model_demo_bf16_lockstep():
    """In bf16 the speculative tokens may part from plain decode after a near tie (T-row and 1-row GEMMs round
    differently); the replay pool's committed state still equals the recurrent shadow's at every step."""
    res = run_model_demo(device="cuda", max_new_tokens=128, dtype=torch.bfloat16)
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


def _generate(model, prompts, n, bench=None, **rc):
    runner = ModelRunner(model, RunnerConfig(max_slots=len(prompts), max_len=256, **rc))
    eng = Engine(runner, drafter="ngram", benchmark_acceptance=bench)
    reqs = [eng.add(p, n) for p in prompts]
    states_equal = True
    while eng.step():
        live = [r.slot for r in reqs if r.slot is not None]
        if live and rc.get("shadow_backend"):
            states_equal &= eng.runner.states_equal(live)
    return [r.generated for r in reqs], states_equal, runner.use_graphs


@pytest.mark.parametrize("preset,layers", [("qwen3.5-27b", 8), ("qwen3.5-35b-a3b", 4)])
def test_whole_step_graphs_equal_eager_and_keep_lockstep(preset, layers):
    """The captured step (forward, device acceptance, commit; paged KV; the MoE router on the device) keeps a
    recurrent shadow's committed states bitwise equal at every step (n-gram drafts, greedy acceptance), and
    gives the eager step's tokens bit for bit (every window accepted, so the 4 rows stay 4 rows to the end and
    graph and eager run the same kernels on the same shapes)."""
    cfg = preset_config(preset, layers)
    model = random_model(cfg, device="cuda", dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, cfg.vocab_size, (40 + 8 * i,), generator=g).tolist() for i in range(4)]
    _, equal, used = _generate(model, prompts, 32, backend="replay", window=4, shadow_backend="recurrent")
    assert used and equal
    runs = []
    for graphs in (True, False):
        bench = BenchmarkAcceptance(4.0, 4, meaningless_outputs=True)
        tokens, _, used = _generate(model, prompts, 32, bench, backend="replay", window=4, cuda_graphs=graphs)
        assert used == graphs
        runs.append(tokens)
    assert runs[0] == runs[1]


def test_overlapped_steps_equal_step_by_step_in_graphs():
    """Overlapped steps (the next graph launched before the previous one is read back, its window read on the
    device): plain decode and the benchmark's prescribed acceptance give the step-by-step engine's tokens, and
    the replay pool stays bitwise its recurrent shadow."""
    cfg = preset_config("qwen3.5-27b", 8)
    model = random_model(cfg, device="cuda", dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, cfg.vocab_size, (32 + 8 * i,), generator=g).tolist() for i in range(3)]

    def serve(overlap, window, bench):
        rc = RunnerConfig(backend="replay", max_slots=3, max_len=256, window=window, shadow_backend="recurrent")
        eng = Engine(ModelRunner(model, rc), drafter="none" if window == 1 else "ngram", overlap=overlap,
                     benchmark_acceptance=bench)  # fmt: skip
        reqs = [eng.add(p, 24 + 8 * i, arrival=2 * i) for i, p in enumerate(prompts)]
        equal = True
        while eng.step():
            if eng.iteration % 4 == 0:
                eng.drain()
                live = [r.slot for r in reqs if r.slot is not None]
                equal &= not live or eng.runner.states_equal(live)
        assert eng.runner.use_graphs and eng.overlap == overlap
        return [(r.generated, r.accepted) for r in reqs], equal

    for window in (1, 4):
        runs = [serve(o, window, BenchmarkAcceptance(2.5, 4, seed=1, meaningless_outputs=True) if window > 1 else None)
                for o in (False, True)]  # fmt: skip
        assert runs[0] == runs[1] and runs[1][1], window


def test_a_short_shared_kv_cache_preempts_and_resumes_with_graphs_and_overlap():
    """The engine's KV budget with CUDA graphs and overlapped steps (MTP drafts inside the step): requests
    preempted for pages resume with the tokens each gets alone, and the committed state of the replay pool stays
    the recurrent shadow's at every step."""
    from replayssm.models.loader import load_model
    from replayssm.tiny import TINY_MODEL

    model = load_model(TINY_MODEL, device="cuda", mtp=True)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 256, (20 + 4 * i,), generator=g).tolist() for i in range(4)]

    def run(**kw):
        rc = RunnerConfig(backend="replay", max_len=256, window=4, device_drafter="mtp", **kw)
        runner = ModelRunner(model, rc)
        offloads = []
        real = runner.offload
        runner.offload = lambda slot: offloads.append(slot) or real(slot)
        eng = Engine(runner, drafter="mtp")
        reqs = [eng.add(p, 60, arrival=i) for i, p in enumerate(prompts)]
        equal = True
        while eng.step():
            if kw.get("shadow_backend"):
                eng.drain()  # committed, nothing in flight: the two pools can be compared
                live = [r.slot for r in reqs if r.slot is not None]
                equal &= not live or eng.runner.states_equal(live)
        return [r.generated for r in reqs], offloads, equal, runner.use_graphs

    want = []  # each prompt alone in a roomy runner (fp32: greedy tokens do not depend on the batch, as the demo's)
    for p in prompts:
        runner = ModelRunner(model, RunnerConfig(backend="replay", max_slots=1, max_len=256, window=4,
                                                 device_drafter="mtp"))  # fmt: skip
        eng = Engine(runner, drafter="mtp")
        r = eng.add(p, 60)
        eng.run()
        want.append(r.generated)
    got, offloads, equal, graphs = run(max_slots=4, kv_tokens=256, page_size=16, shadow_backend="recurrent")
    assert graphs and offloads, "the cache was meant to run short"
    assert got == want and equal
