"""A fifth misuse review, at the engine and the runner: a refused call finishes no step, advances no counter and
allocates nothing (each test failed before its fix)."""

import copy

import pytest
import torch

from replayssm.engine.engine import Engine
from replayssm.engine.llm import LLM
from replayssm.engine.runner import ModelRunner, RunnerConfig
from replayssm.engine.spec import BenchmarkAcceptance
from replayssm.models.loader import load_model
from replayssm.state import PoolExhaustedError
from replayssm.tiny import TINY_MODEL


def _prompt(n=7, seed=0):
    return torch.randint(3, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(tiny_model_dir)


def _overlapped(model, **kw):
    """An engine with a step in flight (greedy, no host drafter: steps overlap) and a request that has not
    arrived yet."""
    eng = Engine(ModelRunner(model, RunnerConfig(max_slots=3, max_len=128, window=4, **kw)), drafter="none")
    a, b, late = eng.add(_prompt(9, 1), 30), eng.add(_prompt(5, 2), 30), eng.add(_prompt(6, 3), 30, arrival=50)
    for _ in range(3):
        eng.step()
    assert eng._steps  # one step in flight
    return eng, a, b, late


def _books(eng):
    return ([list(r.generated) for r in eng.requests], len(eng._steps), eng.iteration,
            list(eng.runner.pending), list(eng.runner._lens))  # fmt: skip


def test_preempt_and_resume_of_the_wrong_request_finish_no_step(model):
    """They drained the step in flight (emitting its tokens) before finding the request was not running /
    not preempted."""
    eng, a, b, late = _overlapped(model)
    before = _books(eng)
    with pytest.raises(ValueError, match="is not running"):
        eng.preempt(late)
    with pytest.raises(ValueError, match="is not preempted"):
        eng.resume(a)
    assert _books(eng) == before


def test_resume_of_a_parked_state_that_does_not_fit_finishes_no_step(model):
    """A malformed parked state was found only after the drain had finished the step in flight."""
    eng, a, b, late = _overlapped(model)
    eng.preempt(a)  # drains, then parks a
    eng.step()  # b alone: a step in flight again
    assert eng._steps
    a.parked.kv["lens"] = a.parked.kv["lens"].long()
    before = _books(eng)
    with pytest.raises(ValueError, match="parked KV lens"):
        eng.resume(a)
    assert _books(eng) == before and a.parked is not None


def test_an_interrupted_drain_inside_a_step_leaves_the_iteration(model):
    """A Ctrl-C while a step drained the step in flight (an arrival had changed the batch) left the iteration
    counter advanced, so a retry counted one iteration more than a run without the interrupt."""
    eng = Engine(ModelRunner(model, RunnerConfig(max_slots=2, max_len=128, window=4)), drafter="none")
    eng.add(_prompt(9, 1), 30)
    eng.add(_prompt(6, 3), 30, arrival=2)
    eng.step()
    eng.step()  # the second request arrives at the next step, which drains the step in flight first
    it, collect = eng.iteration, eng._collect

    def interrupted():
        eng._collect = collect
        raise KeyboardInterrupt

    eng._collect = interrupted
    with pytest.raises(KeyboardInterrupt):
        eng.step()
    assert eng.iteration == it and eng._steps
    eng.step()
    assert eng.iteration == it + 1


class _OutOfVocab:
    def __init__(self):
        self.calls = 0

    def propose(self, context, k):
        self.calls += 1
        return [10**6] if self.calls == 2 else [context[-1]]


def test_a_failed_step_advances_no_iteration(model):
    """A host drafter's bad draft made step() raise after the iteration counter moved: a later arrival was
    admitted one step early, and the tokens differed from a run without the failure."""

    def run(fail):
        eng = Engine(ModelRunner(model, RunnerConfig(max_slots=2, max_len=128, window=4)),
                     drafter=_OutOfVocab() if fail else _Echo())  # fmt: skip
        eng.add(_prompt(8, 4), 12)
        eng.add(_prompt(5, 5), 12, arrival=3)
        its, failures = [], 0
        while True:
            try:
                more = eng.step()
            except ValueError as e:
                assert "outside the vocabulary" in str(e)
                failures += 1
                continue
            its.append(eng.iteration)
            if not more:
                return [r.generated for r in eng.requests], failures, its

    ref, none, its_ref = run(False)
    got, failures, its = run(True)
    assert none == 0 and failures == 1  # the failure this test is about did happen
    assert got == ref and its == its_ref


class _Echo:
    def propose(self, context, k):
        return [context[-1]]


def test_a_failed_step_draws_the_same_prescribed_counts_again(model):
    """The benchmark's acceptance draws of a failed step were not rolled back: a retry drew others."""
    bench = BenchmarkAcceptance(2.0, 4, seed=3, meaningless_outputs=True)
    eng = Engine(ModelRunner(model, RunnerConfig(max_slots=2, max_len=128, window=4)), drafter="ngram",
                 benchmark_acceptance=bench, overlap=False)  # fmt: skip
    eng.add(_prompt(8, 6), 20)
    eng.step()
    state = bench.gen.get_state()
    eng.runner.launch = _raise
    with pytest.raises(RuntimeError, match="injected"):
        eng.step()
    assert torch.equal(bench.gen.get_state(), state)


def _raise(*a, **kw):
    raise RuntimeError("injected failure")


def test_a_refused_generate_keeps_the_last_lockstep_count(tiny_model_dir):
    llm = LLM(tiny_model_dir, window=4, drafter="ngram", max_slots=2, max_len=128, shadow_backend="recurrent")
    llm.generate([_prompt(6, 7)], max_new_tokens=5)
    n = llm.lockstep_checks
    assert n > 0
    with pytest.raises(ValueError):
        llm.generate([_prompt(6, 7), _prompt(5, 8)], max_new_tokens=5, arrivals=[0, -1])
    assert llm.lockstep_checks == n


def test_pad_kv_checks_its_arguments(model):
    runner = ModelRunner(model, RunnerConfig(max_slots=2, max_len=128, window=4))
    s = runner.alloc()
    runner.prefill(s, _prompt(6, 9))
    lens, kv = list(runner._lens), runner.kv.lens.clone()
    for slots, n, match in (([s], -3, "n must be an int >= 0"), ([1 - s], 2, "not allocated"),
                            ([s, s], 2, "distinct")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            runner.pad_kv(slots, n)
    assert list(runner._lens) == lens and torch.equal(runner.kv.lens, kv)


def test_a_restore_with_a_malformed_drafter_state_allocates_nothing():
    cfg = RunnerConfig(max_slots=2, max_len=128, window=4, device_drafter="mtp")
    runner = ModelRunner(load_model(TINY_MODEL, mtp=True), cfg)
    s = runner.alloc()
    runner.prefill(s, _prompt(6, 10))
    parked = runner.offload(s)
    hidden = runner.drafter.hidden.clone()
    zero = torch.tensor([0], dtype=torch.int32)
    for change in (dict(hidden=parked.drafter["hidden"][:, :1]), dict(num_accepted=zero),
                   dict(tokens=parked.drafter["tokens"].float())):  # fmt: skip
        bad = copy.copy(parked)
        object.__setattr__(bad, "drafter", {**parked.drafter, **change})
        free = runner.num_free
        with pytest.raises(ValueError, match="parked drafter"):
            runner.restore(bad)
        assert runner.num_free == free and torch.equal(runner.drafter.hidden, hidden)
    assert runner.restore(parked) in (0, 1)


def test_a_restore_that_the_kv_cache_has_no_room_for_allocates_nothing(model):
    runner = ModelRunner(model, RunnerConfig(max_slots=2, max_len=128, window=4, kv_tokens=64, page_size=16))
    s = runner.alloc()
    runner.prefill(s, _prompt(40, 11))
    parked = runner.offload(s)
    t = runner.alloc()
    runner.prefill(t, _prompt(40, 12))  # the pages the parked rows need are taken
    epochs = runner.pool.cursors.epoch.clone()
    with pytest.raises(PoolExhaustedError):
        runner.restore(parked)
    assert runner.num_free == 1 and torch.equal(runner.pool.cursors.epoch, epochs)


def test_token_ids_of_a_narrow_integer_dtype(model):
    """In range, they are in the vocabulary (a uint8 200 was reported outside [0, 256)); as a step's tokens, which
    the embedding takes only as int64 or int32, they are refused before the step starts."""
    runner = ModelRunner(model, RunnerConfig(max_slots=1, max_len=64, window=4))
    runner.check_token_ids(torch.tensor([5, 200], dtype=torch.uint8))
    s = runner.alloc()
    runner.prefill(s, _prompt(6, 13))
    with pytest.raises(TypeError, match="int64 \\(or int32\\)"):
        runner.step([s], torch.tensor([[5, 6]], dtype=torch.uint8))
    assert runner._in_flight is None and runner.step([s], torch.tensor([[5, 6]])).shape[:2] == (1, 2)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        runner.check_token_ids(torch.tensor([5, 300], dtype=torch.int16) * 10)
