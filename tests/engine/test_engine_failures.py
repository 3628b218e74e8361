"""Failure-injection state machine over the engine: requests added (validly or not), steps, steps that fail
inside the model (after some GDN layers wrote) or in a prefill, preemption and resumption, on a replay runner
with a recurrent pool in lockstep.

After every call: no step is left in flight; every slot is held by exactly one running request; the KV cache
length of every running request is its prompt plus its generated tokens but the last; the two pools'
committed states are bitwise equal; and every request's tokens are a prefix of plain greedy decoding of its
prompt (a failure never changes what comes out, only when).
"""

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

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
        cfg = RunnerConfig(backend="replay", max_slots=2, max_len=64, window=3, shadow_backend="recurrent")
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
    @rule(layer=st.integers(0, 2))
    def step_failing_inside_the_model(self, layer):
        before = [(r.slot, list(r.generated)) for r in self.eng.requests]
        self._failing(layer)
        try:
            with pytest.raises(_FailureError):
                self.eng.step()
        finally:
            self._healed()
        assert before == [(r.slot, list(r.generated)) for r in self.eng.requests]  # no request moved

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
            max_examples=8, stateful_step_count=20, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )
