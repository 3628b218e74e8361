"""A ninth misuse review (2026-12-05, thirtieth session), the engine's part: each test failed before its fix."""

import pytest
import torch

from replayssm.engine.engine import Engine
from replayssm.engine.runner import ModelRunner, RunnerConfig
from replayssm.models.loader import load_model


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(tiny_model_dir).float()


def _prompt(n, seed=0):
    return torch.randint(3, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _state(r: ModelRunner):
    """Every tensor of the runner's pool and KV cache, and its host books."""
    p = r.pool
    tensors = [p.checkpoint, p.conv_state, r.kv.k, r.kv.v, r.kv.block_table, r.kv.lens]
    books = (list(r.kv._free), [list(x) for x in r.kv._pages], list(r._lens), set(r._live), set(r.lost))
    return [t.clone().nan_to_num() for t in tensors], books


def _same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a[0], b[0])) and a[1] == b[1]


def _lose(model, r: ModelRunner, slot: int) -> None:
    """A plain decode on the recurrent backend that fails after the first GDN layers wrote ``slot``'s state in
    place: the slot is lost (``ModelRunner.lost``)."""
    layer = model.model.layers[model.config.gdn_layers[-1]].linear_attn

    def boom(*args, **kw):
        raise RuntimeError("injected")

    layer.forward = boom
    try:
        with pytest.raises(RuntimeError, match="injected"):
            r.step([slot], torch.tensor([[7]]))
    finally:
        layer.__dict__.pop("forward", None)
    assert r.lost == {slot}


def _runner(model):
    return ModelRunner(model, RunnerConfig(backend="recurrent", window=1, max_slots=3, max_len=64, kv_tokens=256,
                                           page_size=16, cuda_graphs=False))  # fmt: skip


def test_a_prefill_naming_a_lost_slot_is_refused_before_it_writes(model):
    """prefill([b, a]) with ``a`` lost was refused by the pool only at a's prompt-length group, after b's group had
    been written in full (state, KV pages, lengths); a retry without ``a`` was then refused ("already hold tokens")."""
    r = _runner(model)
    a = r.alloc()
    _lose(model, r, a)
    b = r.alloc()
    before = _state(r)
    with pytest.raises(ValueError, match=rf"slots \[{a}\] lost their state in a failed step; free\(\) them"):
        r.prefill([b, a], [_prompt(4), _prompt(9, 1)])
    assert _same(before, _state(r))
    fresh = _runner(model)
    c = fresh.alloc()
    assert torch.equal(r.prefill(b, _prompt(4)), fresh.prefill(c, _prompt(4)))  # the retry: a first attempt's


def test_a_lost_slot_cannot_be_offloaded_or_padded_back_to_life(model):
    """offload() then restore() gave a lost slot a new, live slot whose state nothing vouches for; pad_kv took it."""
    r = _runner(model)
    a = r.alloc()
    _lose(model, r, a)
    before = _state(r)
    for call in (lambda: r.offload(a), lambda: r.pad_kv([a], 1)):
        with pytest.raises(ValueError, match="lost their state in a failed step"):
            call()
        assert _same(before, _state(r))
    r.free(a)  # what a lost slot takes
    assert not r.lost and r.num_free == 3


def test_the_engine_leaves_a_callers_step_alone(model):
    """With a caller's runner.step() not committed, Engine.step admitted (prefilled) a request before the launch
    refused, and release() then aborted the caller's step."""
    r = ModelRunner(model, RunnerConfig(backend="replay", window=2, max_slots=3, max_len=64, cuda_graphs=False))
    s = r.alloc()
    r.prefill(s, _prompt(5))
    r.step([s], torch.tensor([[7, 8]]))  # the caller's, not committed
    eng = Engine(r, drafter="none")
    req = eng.add(_prompt(6, 2), 4)
    before = _state(r)
    with pytest.raises(RuntimeError, match=r"the runner has a step\(\) of its caller's not committed yet"):
        eng.step()
    assert _same(before, _state(r)) and req.slot is None and not req.generated and eng.iteration == 0
    eng.release()
    assert r._in_flight is not None and req.done
    r.commit([2])  # the caller's step is still there to commit
    assert r.kv_len(s) == 7


def test_misuse_messages_name_what_is_wrong(model):
    """Bools reported as out of range ("[True] are outside [1, 1]"); a device-drafted launch's [B, 2] tokens
    reported against the runner's window; a chained launch with an int slots failing inside list(); a KV
    reservation past max_len naming neither the slots nor the call's terms."""
    r = ModelRunner(model, RunnerConfig(backend="replay", window=2, max_slots=2, max_len=16, cuda_graphs=False))
    s = r.alloc()
    r.prefill(s, _prompt(5))
    r.step([s], torch.tensor([[7, 8]]))
    with pytest.raises(TypeError, match=r"num_accepted must hold ints, got \[True\]"):
        r.commit([True])
    r.commit([1])
    with pytest.raises(TypeError, match=r"num_drafts must hold ints, got \[True\]"):
        r.launch([s], torch.tensor([[7, 8]]), [True])
    with pytest.raises(ValueError, match=r"with device_drafts=True they are \[B, 1\]"):
        r.launch([s], torch.tensor([[7, 8]]), None, device_drafts=True)
    with pytest.raises(ValueError, match=r"slots must list the rows of the step in flight, got 0"):
        r.launch(s, None, [1])
    with pytest.raises(ValueError, match=rf"slots \[{s}\] would need \[26\] KV positions \(lengths\), past max_len=16"):
        r.pad_kv([s], 18)


def test_generate_names_the_arrival_it_refuses(model):
    """LLM.generate(arrivals=[0, -1]) said "prompts[1]: arrival=-1": it blamed the prompt, never arrivals."""
    from replayssm import LLM

    llm = LLM(model, drafter="none", max_slots=2, max_len=64, cuda_graphs=False)
    for arrivals, shown in (([0, -1], r"arrivals\[1\]=-1"), ([True, 0], r"arrivals\[0\]=True")):
        with pytest.raises(ValueError, match=shown + ": must be an int >= 0"):
            llm.generate([_prompt(4), _prompt(5, 1)], max_new_tokens=2, arrivals=arrivals)


def test_release_refuses_while_a_callers_step_holds_an_engine_slot(model):
    """release() raised from runner.free half-way (a request given up, the next left allocated) when a caller's
    uncommitted step held one of the engine's slots; it now refuses before anything changes."""
    r = ModelRunner(model, RunnerConfig(backend="replay", window=2, max_slots=3, max_len=64, cuda_graphs=False))
    eng = Engine(r, drafter="none", overlap=False)
    a, b = eng.add(_prompt(5), 6), eng.add(_prompt(6, 1), 6)
    eng.step()
    r.step([a.slot], torch.tensor([[7, 8]]))  # the caller's, on the engine's slot
    before = (_state(r), [(q.slot, q.done, list(q.generated)) for q in (a, b)])
    with pytest.raises(RuntimeError, match=rf"slots \[{a.slot}\] of this engine's requests are in a step"):
        eng.release()
    assert _same(before[0], _state(r)) and before[1] == [(q.slot, q.done, list(q.generated)) for q in (a, b)]
    r.abort()
    eng.release()
    assert a.done and b.done and r.num_free == 3


def test_an_interrupt_during_admission_leaves_the_requests_waiting(model):
    """A Ctrl-C in the engine's prefill gave its requests up for good (done, the error recorded): a retried step
    then had nothing to do. They now wait, their slots freed, and a retry gives a first attempt's tokens."""
    from replayssm import LLM

    llm = LLM(model, drafter="ngram", window=4, max_slots=3, max_len=64, cuda_graphs=False)
    prompts = [_prompt(6), _prompt(9, 1)]
    ref = [o.token_ids for o in llm.generate(prompts, 8)]
    eng = llm.engine()
    reqs = [eng.add(p, 8) for p in prompts]
    real = llm.runner.prefill

    def interrupted(*args, **kw):
        llm.runner.prefill = real
        raise KeyboardInterrupt("ctrl-c during prefill")

    llm.runner.prefill = interrupted
    with pytest.raises(KeyboardInterrupt):
        eng.step()
    assert [(r.done, r.slot, r.error) for r in reqs] == [(False, None, None)] * 2 and llm.runner.num_free == 3
    eng.run()
    assert [r.generated for r in reqs] == ref


def test_generate_interrupted_again_in_its_clean_up_is_finished_by_the_next_call(model):
    """A second Ctrl-C landing in generate's clean-up left slots taken and steps in flight of an engine nobody could
    reach: every later generate raised ("a launched step that is not the engine's")."""
    from replayssm import LLM

    llm = LLM(model, drafter="none", max_slots=3, max_len=64, cuda_graphs=False)
    prompts = [_prompt(5), _prompt(7, 1), _prompt(4, 2)]
    ref = [o.token_ids for o in llm.generate(prompts, 12)]
    real, calls = llm.runner.finish, []

    def finish(step):  # the 3rd wait is interrupted, and the 4th, inside release()'s drain
        calls.append(1)
        if len(calls) in (3, 4):
            raise KeyboardInterrupt(f"ctrl-c #{len(calls)}")
        return real(step)

    llm.runner.finish = finish
    with pytest.raises(KeyboardInterrupt, match="ctrl-c #4"):
        llm.generate(prompts, 12)
    assert llm.runner.num_free < 3 or llm.runner.pending  # the clean-up did not finish
    llm.runner.finish = real
    assert [o.token_ids for o in llm.generate(prompts, 12)] == ref
    assert llm.runner.num_free == 3 and not llm.runner.pending


def test_a_stuck_engine_raises_only_from_a_call_that_changed_nothing(model):
    """With only a preempted request left, step() emitted the step in flight's tokens (a request done, its slot
    freed) and then raised: a raising call that changed state. It now returns, and the next call raises."""
    r = ModelRunner(model, RunnerConfig(backend="replay", window=1, max_slots=2, max_len=64, cuda_graphs=False))
    eng = Engine(r, drafter="none")
    a, b = eng.add(_prompt(5), 6), eng.add(_prompt(6, 1), 6)
    eng.step()
    eng.preempt(a)
    while len(b.generated) < 5:
        eng.step()
    assert eng.step() is True and b.done and len(b.generated) == 6  # emits b's last token
    before = (_state(r), eng.iteration)
    with pytest.raises(RuntimeError, match=r"cannot make progress: requests \[0\] are preempted"):
        eng.step()
    assert _same(before[0], _state(r)) and eng.iteration == before[1]
    eng.resume(a)
    eng.run()
    assert a.done and len(a.generated) == 6


def test_an_engine_needs_a_runner():
    """Engine(None) failed with AttributeError: 'NoneType' object has no attribute 'drafter'."""
    with pytest.raises(TypeError, match="runner must be a ModelRunner, got NoneType"):
        Engine(None)
