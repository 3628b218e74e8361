"""Weights moved in place after a runner was built (a ``.to()`` round trip): ``LLM`` notices and the runner drops
its captured steps (``ModelRunner.weights_moved``); on the GPU the captured graphs themselves are checked by
``tests/gpu/test_llm.py``."""

import pytest
import torch

from replayssm.engine.llm import LLM
from replayssm.engine.runner import ModelRunner, RunnerConfig
from replayssm.models.layers import is_fused
from replayssm.models.loader import load_model
from replayssm.tiny import TINY_MODEL

PROMPTS = [[100, 101, 102, 103, 100, 101], [7, 8, 9]]


def test_generate_reads_the_weights_where_they_now_live():
    """On the CPU no graph reads the old memory (``tests/gpu/test_llm.py`` checks the graphs); what else the runner
    built from the weights is built again: the fused projections and the MTP drafter's copy of its head rows."""
    model = load_model(TINY_MODEL, mtp=True)
    kw = dict(drafter="mtp", draft_vocab=200, device="cpu", dtype=torch.float32, max_slots=2, max_len=96)
    llm = LLM(model, **kw)
    before = llm.generate(PROMPTS, 16)
    old = [p.detach() for p in model.parameters()]  # kept: the new weights get new memory
    model.to(dtype=torch.float64).to(dtype=torch.float32)
    with torch.no_grad():
        model.lm_head.weight.mul_(-1.0)  # (tied: the embedding too)
    after = llm.generate(PROMPTS, 16)
    fresh = LLM(model, **kw).generate(PROMPTS, 16)
    assert [o.token_ids for o in after] == [o.token_ids for o in fresh] != [o.token_ids for o in before]
    assert all(p.data_ptr() != q.data_ptr() for p, q in zip(model.parameters(), old))
    assert torch.equal(llm.runner.drafter.head.w, model.lm_head.weight[:200])  # the head's rows copied again
    mlp = model.model.layers[0].mlp
    assert is_fused(mlp._gate_up, mlp.gate_proj)  # one GEMM again (a .to() leaves each weight its own memory)


def test_weights_moved_is_refused_while_a_step_is_in_flight_and_keeps_the_captured_steps():
    model = load_model(TINY_MODEL)
    runner = ModelRunner(model, RunnerConfig(max_slots=2, max_len=64, window=3))
    slot = runner.alloc()
    runner.prefill(slot, [5, 6, 7])
    for launched in (False, True):  # a step to commit, then a launched step to finish
        tokens = torch.tensor([[8, 9, 10]])
        pending = runner.launch([slot], tokens, [2]) if launched else runner.step([slot], tokens)
        steps = dict(runner._graphs)
        with pytest.raises(RuntimeError, match=r"^a step is in flight: commit, abort or finish it before the weights"):
            runner.weights_moved()
        assert runner._graphs == steps
        runner.finish(pending) if launched else runner.commit([1])
    assert runner._graphs  # the launched step's (eager here, a CUDA graph on the GPU)
    runner.weights_moved()
    assert runner._graphs == {}
    assert runner.step_and_commit([slot], torch.tensor([[11, 12, 13]]), [2])[0][0] >= 1  # built again at its use


def test_a_step_finds_weights_moved_out_and_back_and_refuses_them_elsewhere():
    """The runner checks its model's first parameter before every step: moved out and back (an engine taken before
    the move, or a runner used directly), its steps are built again; left in another dtype, the step is refused
    before anything is reserved or launched."""
    model = load_model(TINY_MODEL)
    runner = ModelRunner(model, RunnerConfig(max_slots=2, max_len=64, window=3))
    slot = runner.alloc()
    runner.prefill(slot, [5, 6, 7])
    runner.step_and_commit([slot], torch.tensor([[8, 9, 10]]), [2])
    assert runner._graphs
    model.to(dtype=torch.float64)
    lens = runner.kv.lens.clone()
    with pytest.raises(RuntimeError, match=r"^the model's weights are now torch\.float64 on cpu, but this runner was"):
        runner.step_and_commit([slot], torch.tensor([[11, 12, 13]]), [2])
    assert torch.equal(runner.kv.lens, lens) and runner._graphs and runner.pending == []
    model.to(dtype=torch.float32)  # back, in new memory
    mlp = model.model.layers[0].mlp
    assert not is_fused(mlp._gate_up, mlp.gate_proj)
    runner.step_and_commit([slot], torch.tensor([[11, 12, 13]]), [2])
    assert is_fused(mlp._gate_up, mlp.gate_proj)  # weights_moved ran: the projections are one GEMM again
