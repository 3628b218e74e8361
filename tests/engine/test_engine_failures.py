"""Failure-injection state machine over the engine: requests added (validly or not), steps, steps that fail
inside the model (after some GDN layers wrote) or in the device acceptance (after the whole forward), prefills
that fail, malformed runner steps, preemption and resumption, release, on a replay runner with a recurrent
pool in lockstep and a shared paged KV cache.

After every call: no step is left in flight; every slot is held by exactly one running request; the KV cache
length of every running request is its prompt plus its generated tokens but the last; KV pages are held by
running requests only; the two pools' committed states are bitwise equal; and every request's tokens are a
prefix of plain greedy decoding of its prompt (a failure never changes what comes out, only when).
"""

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from replayssm.engine import graphs
from replayssm.engine.accept import Greedy, Prescribed, Sampling
from replayssm.engine.engine import Engine
from replayssm.engine.runner import ModelRunner, RunnerConfig
from replayssm.models.loader import load_model
from tests.helpers.hf_tiny import build

NEW_TOKENS = 14
PROMPTS = [torch.randint(3, 256, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (5, 11, 8)]


class _FailureError(RuntimeError):
    pass


class _Boom:
    """Replaces one GDN layer's forward: runs it, then raises (the layer wrote its state)."""

    def __init__(self, module):
        self.forward = module.forward

    def __call__(self, *a, **kw):
        self.forward(*a, **kw)
        raise _FailureError("injected inside the model")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("engine_failures")
    build("qwen3_5_text", path, seed=21)
    model = load_model(path)
    plain = Engine(ModelRunner(model, RunnerConfig(backend="recurrent", max_slots=3, max_len=64, window=1)),
                   drafter="none")  # fmt: skip
    for p in PROMPTS:
        plain.add(p, NEW_TOKENS)
    return model, {tuple(r.prompt): r.generated for r in plain.run()}


class EngineUnderFailures(RuleBasedStateMachine):
    model = None
    greedy: dict = {}

    def __init__(self):
        super().__init__()
        cfg = RunnerConfig(backend="replay", max_slots=2, max_len=64, window=3, shadow_backend="recurrent",
                           kv_tokens=96, page_size=16)  # fmt: skip
        self.runner = ModelRunner(self.model, cfg)
        self.eng = Engine(self.runner, drafter="ngram")
        self.gdn = [self.model.model.layers[i].linear_attn for i in self.model.config.gdn_layers]

    def _failing(self, layer):
        m = self.gdn[layer]
        m.forward = _Boom(m)

    def _healed(self):
        for m in self.gdn:
            m.__dict__.pop("forward", None)

    @rule(i=st.integers(0, len(PROMPTS) - 1), arrival=st.integers(0, 3))
    def add(self, i, arrival):
        self.eng.add(PROMPTS[i], NEW_TOKENS, arrival=self.eng.iteration + arrival)

    @rule(bad=st.sampled_from([([], 4), ([1, 256], 4), ([1.5], 4), ([1], 0), ([1], 2.5), ("hi", 4)]))
    def add_invalid(self, bad):
        n = len(self.eng.requests)
        with pytest.raises((ValueError, TypeError)):
            self.eng.add(*bad)
        assert len(self.eng.requests) == n

    def _step(self):
        try:
            return self.eng.step()
        except RuntimeError as e:
            if "cannot make progress" not in str(e):
                raise
            return False

    @rule()
    def step(self):
        self._step()

    def _admissible(self) -> bool:
        """Whether the next step admits (prefills) a request first."""
        e = self.eng
        return self.runner.num_free > 0 and any(e._waiting(r) and r.arrival <= e.iteration for r in e.requests)

    @precondition(lambda self: self.eng.running and not self._admissible())
    @rule(layer=st.integers(0, 3))
    def step_failing_inside_the_model(self, layer):
        """Layers 0..2: a GDN layer raises after it wrote; 3: the device acceptance raises after the forward."""
        before = [(r.slot, list(r.generated)) for r in self.eng.requests]
        accept = graphs.accept_device
        if layer < 3:
            self._failing(layer)
        else:
            graphs.accept_device = _Boom(type("F", (), {"forward": staticmethod(accept)}))
        try:
            with pytest.raises(_FailureError):
                self.eng.step()
        finally:
            self._healed()
            graphs.accept_device = accept
        assert before == [(r.slot, list(r.generated)) for r in self.eng.requests]  # no request moved

    @precondition(lambda self: self.eng.running)
    @rule(data=st.data())
    def malformed_runner_step(self, data):
        """A runner step with one bad argument is refused before anything is reserved or run."""
        run = self.runner
        slots = [r.slot for r in self.eng.running]
        free = [s for s in range(2) if s not in slots]
        ok = dict(tokens=torch.ones(len(slots), 3, dtype=torch.long), num_drafts=[2] * len(slots), rule=Greedy())
        bad = data.draw(st.sampled_from([
            dict(tokens=torch.full((len(slots), 3), 256)), dict(tokens=torch.ones(len(slots), 3)),
            dict(tokens=torch.ones(len(slots), 4, dtype=torch.long)), dict(num_drafts=[3] * len(slots)),
            dict(num_drafts=[1.5] * len(slots)), dict(rule=Prescribed()), dict(rule=Sampling(0.5)),
            dict(rule="greedy"), dict(slots=slots + slots), dict(slots=free or [5]),
        ]))  # fmt: skip
        kw = dict(ok, slots=slots) | bad
        lens, pages = run.kv.lens.clone(), [list(p) for p in run.kv._pages]
        with pytest.raises((ValueError, TypeError)):
            run.step_and_commit(kw["slots"], kw["tokens"], kw["num_drafts"], kw["rule"])
        assert torch.equal(lens, run.kv.lens) and pages == run.kv._pages

    @precondition(lambda self: any(not r.done for r in self.eng.requests))
    @rule(now=st.integers(0, 7))
    def release(self, now):
        """Now and then give everything back (what ``LLM.generate`` does when a call fails)."""
        if now == 0:
            self.eng.release()
            assert all(r.done for r in self.eng.requests)

    @precondition(lambda self: self._admissible())
    @rule()
    def prefill_failing(self):
        self._failing(0)
        try:
            with pytest.raises(_FailureError):
                self.eng.step()
        finally:
            self._healed()
        failed = [r for r in self.eng.requests if r.error]
        assert failed and all(r.slot is None and r.done for r in failed)

    @precondition(lambda self: self.eng.running)
    @rule(data=st.data())
    def preempt(self, data):
        self.eng.preempt(data.draw(st.sampled_from(self.eng.running)))

    @precondition(lambda self: any(r.parked is not None for r in self.eng.requests))
    @rule(data=st.data())
    def resume(self, data):
        r = data.draw(st.sampled_from([r for r in self.eng.requests if r.parked is not None]))
        if self.runner.num_free == 0:
            with pytest.raises(RuntimeError, match="asked for 1 slots"):
                self.eng.resume(r)
            assert r.parked is not None
        else:
            self.eng.resume(r)

    @invariant()
    def consistent(self):
        assert self.runner._in_flight is None
        running = [r for r in self.eng.requests if r.slot is not None]
        assert len({r.slot for r in running}) == len(running)
        assert self.runner.num_free == self.runner.cfg.max_slots - len(running)
        for r in running:
            assert int(self.runner.kv.lens[r.slot]) == len(r.prompt) + len(r.generated) - 1
        kv = self.runner.kv
        held = [s for s in range(2) if kv._pages[s]]
        assert set(held) <= {r.slot for r in running}, "pages held by a slot no running request holds"
        assert kv.free_tokens + sum(len(p) for p in kv._pages) * kv.page_size == kv.num_pages * kv.page_size
        assert self.runner.states_equal([r.slot for r in running])
        for r in self.eng.requests:
            want = self.greedy[tuple(r.prompt)]
            assert r.generated == want[: len(r.generated)], f"request {r.id} left greedy decoding"
            assert r.error or not r.done or r.generated == want


def test_engine_under_failures(tiny):
    EngineUnderFailures.model, EngineUnderFailures.greedy = tiny
    run_state_machine_as_test(
        EngineUnderFailures,
        settings=settings(
            max_examples=60, stateful_step_count=30, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )
