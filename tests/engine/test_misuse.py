"""Issue 11 at the engine: arguments are checked before anything starts, a failed call gives back everything
it held, and the engine raises instead of idling (each test failed before the fix it names)."""

import math

import pytest
import torch

from replayssm.engine import graphs
from replayssm.engine.engine import Engine
from replayssm.engine.llm import LLM
from replayssm.engine.runner import ModelRunner, RunnerConfig
from replayssm.models.loader import load_model
from replayssm.tiny import TINY_MODEL


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    return LLM(tiny_model_dir, backend="replay", window=4, drafter="ngram", max_slots=2, max_len=128,
               shadow_backend="recurrent")  # fmt: skip


def _prompt(n=7, seed=0):
    return torch.randint(3, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _idle(llm):
    """Nothing held: every slot free, no step in flight."""
    return llm.runner.num_free == llm.runner.cfg.max_slots and llm.runner._in_flight is None


def test_a_bare_string_is_one_prompt():
    """Finding 5: llm.generate("def f(") ran one prompt per character."""
    llm = LLM(TINY_MODEL, drafter="ngram", max_slots=2, max_len=256)
    one = llm.generate("def f(", max_new_tokens=6)
    assert len(one) == 1 and one[0].token_ids == llm.generate(["def f("], max_new_tokens=6)[0].token_ids


@pytest.mark.parametrize(
    ("kw", "error", "message"),
    [
        (dict(temperature=-1), ValueError, r"temperature=-1: must be a finite number from 0 \(greedy\) to"),
        (dict(temperature=1e39), ValueError, "temperature=1e[+]?39"),  # (it overflowed the sampler's fp32 mid-step)
        (dict(temperature=math.nan), ValueError, "temperature=nan"),
        (dict(temperature=math.inf), ValueError, "temperature=inf"),
        (dict(temperature="0.5"), ValueError, "temperature='0.5'"),
        (dict(max_new_tokens=2.5), ValueError, "max_new_tokens=2.5: must be a positive int"),
        (dict(max_new_tokens=0), ValueError, "max_new_tokens=0"),
        (dict(max_new_tokens=True), ValueError, "max_new_tokens=True"),
        (dict(prompts=[[1.0, 2.0]]), TypeError, r"prompts\[0\] must be ints"),
        (dict(prompts=[[5, 256]]), ValueError, r"prompts\[0\] \[256\] are outside the vocabulary \[0, 256\)"),
        (dict(prompts=[[5, -1]]), ValueError, "outside the vocabulary"),
        (dict(prompts=[1, 2, 3]), TypeError, r"a flat list of ints: wrap it, \[\[1, 2, 3\]\] is one prompt"),
        (dict(prompts=[[]]), ValueError, r"prompts\[0\] is empty"),
        (dict(prompts=["text"]), ValueError, "no tokenizer.json: pass token ids"),
        (dict(prompts=5), TypeError, "prompts must be a str, a list of str or a list of token-id lists"),
        (dict(arrivals=[0, 1]), ValueError, "arrivals must list one engine iteration per prompt"),
    ],
)
def test_generate_checks_its_arguments_before_anything_starts(llm, kw, error, message):
    """Finding 5 (and 4's out-of-vocabulary token): a negative temperature decoded greedily, float ids were
    truncated, 2.5 new tokens accepted, an out-of-vocabulary id raised after admission and leaked the slot."""
    kw = dict(dict(prompts=[_prompt()], max_new_tokens=4), **kw)
    with pytest.raises(error, match=message):
        llm.generate(kw.pop("prompts"), **kw)
    assert _idle(llm)


def test_failed_generates_give_back_their_slots(llm, monkeypatch):
    """Finding 4: once max_slots calls had failed after admission, every later call returned empty outputs
    after a million idle iterations. Failures now release everything; the next call is exact."""
    ref = llm.generate([_prompt(seed=1), _prompt(9, seed=2)], max_new_tokens=12)
    where = [(llm.runner, "launch"), (llm.runner, "prefill"), (graphs, "accept_device")]
    for attempt in range(2 * llm.runner.cfg.max_slots + 1):
        obj, name = where[attempt % 3]  # before the step; in the prefill; inside the step, after the forward
        with monkeypatch.context() as m:
            m.setattr(obj, name, _raise)
            with pytest.raises(RuntimeError, match="injected"):
                llm.generate([_prompt(seed=1), _prompt(9, seed=2)], max_new_tokens=12)
        assert _idle(llm), name
    out = llm.generate([_prompt(seed=1), _prompt(9, seed=2)], max_new_tokens=12)
    assert [o.token_ids for o in out] == [o.token_ids for o in ref]


def test_failed_requests_give_back_their_kv_pages(tiny_model_dir, monkeypatch):
    """With a shared paged KV cache (kv_tokens), requests whose prefill fails release their pages with their
    slots; a step that fails is aborted (the requests keep what they hold and can go on), and release() gives
    everything back."""
    runner = ModelRunner(load_model(tiny_model_dir), RunnerConfig(max_slots=2, max_len=128, kv_tokens=256,
                                                                  page_size=16))  # fmt: skip
    full = runner.kv.free_tokens

    def engine():
        eng = Engine(runner, drafter="ngram")
        return eng, [eng.add(_prompt(40, seed=5), 20), eng.add(_prompt(30, seed=6), 20)]

    eng, reqs = engine()
    with monkeypatch.context() as m:
        m.setattr(runner.pool, "write_prefill", _raise)
        with pytest.raises(RuntimeError, match="injected"):
            eng.step()
    assert all(r.done and r.error and r.slot is None for r in reqs)
    assert runner.kv.free_tokens == full and runner.num_free == 2
    eng, reqs = engine()
    eng.step()
    held, generated = runner.kv.free_tokens, [list(r.generated) for r in reqs]
    assert held < full
    with monkeypatch.context() as m:
        m.setattr(graphs, "accept_device", _raise)
        with pytest.raises(RuntimeError, match="injected"):
            eng.step()
    assert runner._in_flight is None and [r.generated for r in reqs] == generated
    eng.step()  # goes on
    eng.release()
    assert runner.kv.free_tokens == full and runner.num_free == 2
    assert all(r.done and r.error for r in reqs)


def _raise(*a, **kw):
    raise RuntimeError("injected failure")


class _FailingLayer:
    """Wraps one GDN layer's forward: the ``at``-th call raises after the layer ran (state written)."""

    def __init__(self, module, at):
        self.module, self.at, self.calls, self.forward = module, at, 0, module.forward

    def __call__(self, *a, **kw):
        out = self.forward(*a, **kw)
        self.calls += 1
        if self.calls == self.at:
            raise RuntimeError("injected failure inside the model")
        return out


@pytest.mark.parametrize("backend", ["replay", "recurrent"])
def test_a_step_that_fails_inside_the_model_is_aborted_and_the_engine_goes_on(tiny_model_dir, backend):
    """A failure half-way through the layers of a step (after some GDN layers wrote, some of them folding):
    the step is aborted, the engine can step again, and the outputs are those of a run without the failure;
    the lockstep shadow pool stays bitwise equal all along."""
    model = load_model(tiny_model_dir)
    prompts = [_prompt(13, seed=3), _prompt(6, seed=4)]

    def engine():
        cfg = RunnerConfig(backend=backend, max_slots=2, max_len=128, window=4, shadow_backend="replay"
                           if backend == "recurrent" else "recurrent")  # fmt: skip
        eng = Engine(ModelRunner(model, cfg), drafter="ngram")
        for p in prompts:
            eng.add(p, 40)
        return eng

    ref = engine().run()
    eng = engine()
    layer = model.model.layers[model.config.gdn_layers[-1]].linear_attn
    failed = 0
    for i in range(200):
        if i % 3 == 1:  # every third step fails in the last GDN layer
            layer.forward = _FailingLayer(layer, at=1)
        try:
            more = eng.step()
        except RuntimeError as e:
            assert "injected" in str(e)
            failed += 1
            more = True
        finally:
            layer.__dict__.pop("forward", None)
        live = [r.slot for r in eng.requests if r.slot is not None]
        assert eng.runner._in_flight is None and eng.runner.states_equal(live)
        if not more:
            break
    assert failed > 5
    assert [r.generated for r in eng.requests] == [r.generated for r in ref]


def test_a_failed_in_place_decode_gives_up_only_the_requests_it_destroyed(tiny_model_dir):
    """Plain decode on the recurrent backend updates the state in place: a failure after some layers ran
    destroys the batch's states. Those requests are given up (slot and pages freed, the reason recorded)
    instead of failing every later step; the engine serves the next requests exactly."""
    model = load_model(tiny_model_dir)
    runner = ModelRunner(model, RunnerConfig(backend="recurrent", max_slots=2, max_len=128))
    ref = Engine(runner, drafter="none")
    ref_req = ref.add(_prompt(8, seed=7), 10)
    ref.run()
    eng = Engine(runner, drafter="none")
    reqs = [eng.add(_prompt(13, seed=3), 10), eng.add(_prompt(6, seed=4), 10)]
    eng.step()
    layer = model.model.layers[model.config.gdn_layers[-1]].linear_attn
    layer.forward = _FailingLayer(layer, at=1)
    try:
        with pytest.raises(RuntimeError, match="injected"):
            eng.step()
    finally:
        layer.__dict__.pop("forward", None)
    assert all(r.done and "injected" in r.error and r.slot is None for r in reqs)
    assert runner.num_free == 2 and not runner.lost and runner._in_flight is None
    later = eng.add(_prompt(8, seed=7), 10)
    eng.run()
    assert later.generated == ref_req.generated


def test_the_engine_raises_instead_of_idling(tiny_model_dir):
    """Finding 4: with no slot free and nothing running, run() spun up to a million idle iterations and
    returned unfinished requests."""
    runner = ModelRunner(load_model(tiny_model_dir), RunnerConfig(max_slots=1, max_len=64))
    held = runner.alloc()  # held outside the engine
    eng = Engine(runner)
    eng.add(_prompt(), 4)
    with pytest.raises(RuntimeError, match=r"requests \[0\] wait for a slot, but no slot of 1 is free"):
        eng.run()
    runner.free(held)
    assert eng.run()[0].generated and len(eng.requests[0].generated) == 4
    eng = Engine(runner)
    r = eng.add(_prompt(), 30)
    eng.step()
    eng.preempt(r)
    with pytest.raises(RuntimeError, match=r"requests \[0\] are preempted: resume\(\) them"):
        eng.step()
    eng.resume(r)
    eng.run()
    assert r.done and len(r.generated) == 30


def test_engine_add_checks_prompt_and_lengths(tiny_model_dir):
    runner = ModelRunner(load_model(tiny_model_dir), RunnerConfig(max_slots=1, max_len=64))
    eng = Engine(runner)
    for prompt, error in (([], ValueError), ("abc", ValueError), ([1, 2.0], TypeError), ([True], TypeError),
                          ([10**6], ValueError)):  # fmt: skip
        with pytest.raises(error):
            eng.add(prompt, 4)
    with pytest.raises(ValueError, match="arrival=-1"):
        eng.add([1, 2], 4, arrival=-1)
    with pytest.raises(ValueError, match="temperature=-0.5"):
        Engine(runner, temperature=-0.5)
    with pytest.raises(ValueError, match="eos_token_id"):
        Engine(runner, eos_token_id=256)
    assert not eng.requests


def test_window_and_ring_errors_name_the_argument(tiny_model_dir):
    """Finding 7: window >= 9 was refused with "ring length L must be a power of two, got 18"."""
    llm = LLM(tiny_model_dir, window=9, drafter="ngram", max_slots=1, max_len=128)
    assert llm.runner.pool.cfg.ring_len == 32
    assert len(llm.generate([_prompt()], max_new_tokens=5)[0].token_ids) == 5
    for kw, message in ((dict(window=0), "window=0: must be a positive int"),
                        (dict(window=2.5), "window=2.5"), (dict(ring_len=12), "ring_len=12: must be a power of two"),
                        (dict(max_slots=0), "max_slots=0"), (dict(backend="fast"), "backend='fast'")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            LLM(tiny_model_dir, drafter="ngram", **kw)
    assert RunnerConfig(window=4, ring_len=8).ring_len == 8
    assert RunnerConfig(window=17).ring_len == 64


def test_eos_token_id_takes_one_id_several_or_a_tensor(tiny_model_dir):
    """Any of several end tokens ends a request; a bad value is refused before the engine exists."""
    runner = ModelRunner(load_model(tiny_model_dir), RunnerConfig(max_slots=1, max_len=64))
    for ok in (5, [5, 7], (7,), torch.tensor([5, 7])):
        Engine(runner, eos_token_id=ok)
    with pytest.raises(TypeError, match="eos_token_id must be a token id or a sequence"):
        Engine(runner, eos_token_id=1.5)
    with pytest.raises(TypeError, match="eos_token_id must be ints"):
        Engine(runner, eos_token_id=[1.5])
    with pytest.raises(ValueError, match="empty sequence"):
        Engine(runner, eos_token_id=[])


@pytest.mark.parametrize("ring_len, accepted", [(16, 2), (8, 3)])  # rows that do not flush / rows that flush
def test_a_retry_after_abort_gives_the_first_attempts_logits(tiny_model_dir, ring_len, accepted):
    """An aborted verify leaves every row as a first attempt finds it: a row whose ring does not flag a fold keeps
    its history unfolded (abort folded it before, and the retry's logits rounded differently), a flagged row is
    folded in every layer. Logits and committed states then match a twin runner that never aborted, bit for bit."""
    model = load_model(tiny_model_dir)
    runs = [ModelRunner(model, RunnerConfig(backend="replay", max_slots=1, max_len=128, window=4, ring_len=ring_len,
                                            shadow_backend="recurrent")) for _ in range(2)]  # fmt: skip
    for r in runs:
        r.prefill(r.alloc(), list(range(10, 30)))
    g = torch.Generator().manual_seed(3)
    seen = set()  # (flush flagged, history held) of the rows the aborted steps ran
    for _ in range(6):
        t = torch.randint(3, 250, (1, 4), generator=g)
        c = runs[0].pool.primary.cursors
        seen.add((int(c.flush[0]), int(c.write_pos[0]) > 0))
        first = runs[0].step([0], t)
        runs[0].abort()
        retry, twin = runs[0].step([0], t), runs[1].step([0], t)
        assert torch.equal(first, retry) and torch.equal(retry, twin)
        for r in runs:
            r.commit([accepted])
        assert runs[0].states_equal([0]) and runs[1].states_equal([0])
    assert ((0, True) if ring_len == 16 else (1, True)) in seen
