"""Overlapped engine steps (``Engine(overlap=True)``, docs/engine.md "overlapped steps"): the next step of a batch
is launched before the previous one is read back. Tokens, accepted counts and committed states equal those of
the step-by-step engine; misuse of ``ModelRunner.launch`` / ``finish`` raises before anything changes."""

import pytest
import torch

from replayssm.engine import graphs
from replayssm.engine.accept import Greedy, Prescribed
from replayssm.engine.engine import Engine
from replayssm.engine.runner import ModelRunner, RunnerConfig
from replayssm.engine.spec import BenchmarkAcceptance
from replayssm.models.loader import load_model


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(tiny_model_dir)


def _prompt(n, seed):
    return torch.randint(3, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _runner(model, backend="replay", window=1, slots=3):
    return ModelRunner(model, RunnerConfig(backend=backend, max_slots=slots, max_len=128, window=window,
                                           shadow_backend="recurrent" if backend == "replay" else None))  # fmt: skip


class _Chains:
    """Counts the chained launches (tokens=None) of a runner."""

    def __init__(self, runner, monkeypatch):
        self.n, launch = 0, runner.launch

        def counted(slots, tokens, *a, **kw):
            self.n += tokens is None
            return launch(slots, tokens, *a, **kw)

        monkeypatch.setattr(runner, "launch", counted)


def _serve(eng, jobs, *, check_states=False):
    reqs = [eng.add(_prompt(n, seed), new, arrival) for n, seed, new, arrival in jobs]
    while eng.step():
        if check_states and eng.iteration % 3 == 0:
            eng.drain()
            live = [r.slot for r in reqs if r.slot is not None]
            assert not live or eng.runner.states_equal(live)
    assert eng.runner.pending == [] and eng.runner.num_free == eng.runner.cfg.max_slots
    return [(r.generated, r.accepted) for r in reqs]


JOBS = [(9, 1, 14, 0), (5, 2, 9, 0), (12, 3, 11, 3)]  # prompt length, seed, max_new_tokens, arrival


@pytest.mark.parametrize("backend", ["replay", "recurrent"])
def test_plain_decode_overlapped_equals_step_by_step(model, backend, monkeypatch):
    """A request arriving later and requests ending at their limit make the batch change: the engine drains
    there and chains again after. Committed states stay bitwise the recurrent shadow's."""
    ref = _serve(Engine(_runner(model, backend), drafter="none", overlap=False), JOBS)
    eng = Engine(_runner(model, backend), drafter="none")
    chains = _Chains(eng.runner, monkeypatch)
    assert eng.overlap
    assert _serve(eng, JOBS, check_states=backend == "replay") == ref
    assert chains.n >= 5


def test_a_request_ending_on_eos_runs_one_dropped_step(model, monkeypatch):
    """EOS cannot be foreseen: the step launched after it still runs the request, whose tokens are dropped and
    whose slot is freed once that step is done."""
    ref = _serve(Engine(_runner(model), drafter="none", overlap=False), JOBS)
    eos = ref[0][0][5]  # the sixth token of the first request
    cut = [(g[: g.index(eos) + 1] if eos in g else g) for g, _ in ref]
    ref_eos = _serve(Engine(_runner(model), drafter="none", eos_token_id=eos, overlap=False), JOBS)
    assert [g for g, _ in ref_eos] == cut
    eng = Engine(_runner(model), drafter="none", eos_token_id=eos)
    chains = _Chains(eng.runner, monkeypatch)
    assert _serve(eng, JOBS) == ref_eos
    assert chains.n >= 5


def test_benchmark_acceptance_overlapped_equals_step_by_step(model, monkeypatch):
    """The benchmark's meaningless drafts (the last token repeated) are written on the device when chained; the
    prescribed counts are drawn in the same order."""

    def run(overlap):
        bench = BenchmarkAcceptance(2.5, 4, seed=3, meaningless_outputs=True)
        return Engine(_runner(model, window=4), drafter="ngram", benchmark_acceptance=bench, overlap=overlap)

    jobs = [(n, seed, 3 * new, arrival) for n, seed, new, arrival in JOBS]
    ref = _serve(run(False), jobs)
    eng = run(True)
    chains = _Chains(eng.runner, monkeypatch)
    assert _serve(eng, jobs, check_states=True) == ref
    assert chains.n >= 5


def test_preempt_and_resume_drain_the_step_in_flight(model):
    ref = _serve(Engine(_runner(model), drafter="none", overlap=False), JOBS[:2])
    eng = Engine(_runner(model), drafter="none")
    reqs = [eng.add(_prompt(n, seed), new, arrival) for n, seed, new, arrival in JOBS[:2]]
    for _ in range(4):
        eng.step()
    assert eng.runner.pending  # a step is in flight
    eng.preempt(reqs[0])
    assert not eng.runner.pending
    for _ in range(3):
        eng.step()
    eng.resume(reqs[0])
    eng.run()
    assert [(r.generated, r.accepted) for r in reqs] == ref


def test_overlap_applies_only_where_the_host_adds_nothing(model):
    runner = _runner(model, window=4)
    assert not Engine(runner, drafter="ngram").overlap  # real host drafts need the tokens
    assert not Engine(runner, drafter="none", temperature=0.8).overlap  # host-drawn uniforms
    assert not Engine(runner, drafter="none", overlap=False).overlap
    assert Engine(runner, drafter="none").overlap
    with pytest.raises(TypeError, match="overlap must be a bool"):
        Engine(runner, drafter="none", overlap="yes")


def test_launch_and_finish_misuse_changes_nothing(model):
    """Every misuse raises before anything is enqueued or reserved; the steps then finish as if it never
    happened, equal to step_and_commit."""
    ref = _runner(model)
    run = _runner(model)
    for r in (ref, run):
        for s, seed in ((0, 1), (1, 2)):
            assert r.alloc() == s
            r.prefill(s, _prompt(6, seed))
    last = torch.tensor([[7], [9]])
    want = [ref.step_and_commit([0, 1], last, [0, 0])]
    want.append(ref.step_and_commit([0, 1], torch.tensor([[t[0]] for t in want[0][1]]), [0, 0]))
    with pytest.raises(RuntimeError, match="chains to the one step in flight"):
        run.launch([0, 1], None, [0, 0])
    first = run.launch([0, 1], last, [0, 0])
    with pytest.raises(RuntimeError, match="not finished"):
        run.launch([0, 1], last, [0, 0])
    with pytest.raises(ValueError, match="rows of the step in flight"):
        run.launch([1, 0], None, [0, 0])
    with pytest.raises(ValueError, match="rule and window"):
        run.launch([0, 1], None, [0, 0], Prescribed(), prescribed=[1, 1])
    with pytest.raises(RuntimeError, match="in a step in flight"):
        run.free(0)
    with pytest.raises(RuntimeError, match="in a step in flight"):
        run.prefill(1, _prompt(4, 3))
    with pytest.raises(RuntimeError, match="in a step in flight"):
        run.offload(1)
    second = run.launch([0, 1], None, [0, 0], Greedy())
    with pytest.raises(ValueError, match="oldest step in flight"):
        run.finish(second)
    assert [run.finish(first), run.finish(second)] == want
    assert run.pending == [] and run.kv_len(0) == ref.kv_len(0) and run.kv_len(1) == ref.kv_len(1)


def _engine(model, overlap, slots, window=1, bench_seed=None, **kw):
    runner = _runner(model, window=window, slots=slots)
    bench = None if bench_seed is None else BenchmarkAcceptance(2.5, window, seed=bench_seed, meaningless_outputs=True)
    return Engine(runner, drafter="none" if window == 1 else "ngram", benchmark_acceptance=bench, overlap=overlap,
                  **kw)  # fmt: skip


@pytest.mark.parametrize("slots", [1, 2])
def test_requests_waiting_for_a_slot_are_admitted_as_step_by_step(model, slots):
    """Review finding: with every slot taken, the requests of the step in flight ending at their limit must free
    their slots before the next admission (the engine raised "cannot make progress"); the benchmark's draws,
    which follow the batch's make-up, stay the step-by-step engine's."""
    jobs = [(9, 1, 6, 0), (5, 2, 9, 0), (12, 3, 7, 0)]
    assert _serve(_engine(model, True, slots), jobs) == _serve(_engine(model, False, slots), jobs)
    jobs = [(9, 1, 12, 0), (5, 2, 30, 0), (12, 3, 12, 0)]
    runs = [_serve(_engine(model, o, slots, window=4, bench_seed=3), jobs) for o in (False, True)]
    assert runs[0] == runs[1]


def test_an_interrupt_while_waiting_leaves_the_steps_tracked(model, monkeypatch):
    """Review finding: a KeyboardInterrupt while the host waits for a step (the usual place for Ctrl-C) lost the
    engine's record of the steps in flight, and their slots stayed held for good. Now the next ``step``,
    ``drain`` or ``release`` finishes them, and the run goes on exactly."""
    jobs = [(9, 1, 14, 0), (5, 2, 9, 0)]
    ref = _serve(_engine(model, False, 2), jobs)
    eng = _engine(model, True, 2)
    reqs = [eng.add(_prompt(n, seed), new, arrival) for n, seed, new, arrival in jobs]
    real, calls = graphs.Launched.result, [0]

    def interrupted(self):
        calls[0] += 1
        if calls[0] in (3, 6):
            raise KeyboardInterrupt
        return real(self)

    monkeypatch.setattr(graphs.Launched, "result", interrupted)
    interrupts = 0
    while True:
        try:
            if not eng.step():
                break
        except KeyboardInterrupt:
            interrupts += 1
    assert interrupts == 2 and eng.runner.pending == [] and eng.runner.num_free == 2
    assert [(r.generated, r.accepted) for r in reqs] == ref
    eng2 = _engine(model, True, 2)
    [eng2.add(_prompt(n, seed), new, arrival) for n, seed, new, arrival in jobs]
    for _ in range(4):
        eng2.step()
    calls[0] = 5  # the next wait is interrupted
    with pytest.raises(KeyboardInterrupt):
        eng2.step()
    eng2.release()
    assert eng2.runner.pending == [] and eng2.runner.num_free == 2


def test_benchmark_acceptance_must_match_the_engine_window(model):
    """Finding of the 2026-12-01 review: a BenchmarkAcceptance built for another window drew counts the engine's
    window cannot hold, and the step refused them late. The engine refuses it when it is built."""
    runner = _runner(model, window=4)
    with pytest.raises(ValueError, match="built for windows of 2 tokens; this engine's window is 4"):
        Engine(runner, benchmark_acceptance=BenchmarkAcceptance(1.5, 2, meaningless_outputs=True))
    with pytest.raises(ValueError, match="this engine's window is 1"):
        Engine(runner, drafter="none", benchmark_acceptance=BenchmarkAcceptance(2.5, 4, meaningless_outputs=True))
    assert Engine(runner, benchmark_acceptance=BenchmarkAcceptance(2.5, 4, meaningless_outputs=True)).window == 4
