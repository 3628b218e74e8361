"""An engine over a shared paged KV cache (``RunnerConfig(kv_tokens=...)``, ``engine/admission.py``): requests are
admitted while their pages fit, the newest running ones give way when a step's pages do not, and a request that
could never fit is refused by ``add``. Each case failed before (a misuse review, 2026-12-05): requests were given
up for a full cache, or every later step raised."""

import pytest
import torch

from replayssm.engine.engine import Engine
from replayssm.engine.runner import ModelRunner, RunnerConfig
from replayssm.models.loader import load_model
from replayssm.tiny import TINY_MODEL


@pytest.fixture(scope="module")
def model():
    return load_model(TINY_MODEL)


def _prompt(n, seed):
    return torch.randint(3, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _alone(model, prompt, new, window=4):
    """The tokens a request gets running alone in a roomy runner (greedy: the same in any batch)."""
    eng = Engine(ModelRunner(model, RunnerConfig(max_slots=1, max_len=256, window=window)), drafter="ngram")
    r = eng.add(prompt, new)
    eng.run()
    return r.generated


def _paged(model, kv_tokens, slots=2, window=4):
    return ModelRunner(model, RunnerConfig(max_slots=slots, max_len=128, window=window, kv_tokens=kv_tokens,
                                           page_size=16))  # fmt: skip


def _counting_offloads(runner):
    calls = []
    offload = runner.offload

    def counted(slot):
        calls.append(slot)
        return offload(slot)

    runner.offload = counted
    return calls


def test_admission_waits_for_pages_instead_of_giving_requests_up(model):
    """Two requests whose prefills do not fit together (3 + 2 pages of 4): the second waits for the first."""
    jobs = [(_prompt(40, 1), 10), (_prompt(20, 2), 10)]
    eng = Engine(_paged(model, 64), drafter="ngram")
    reqs = [eng.add(p, n) for p, n in jobs]
    eng.run()
    assert all(r.done and r.error is None for r in reqs)
    assert [r.generated for r in reqs] == [_alone(model, p, n) for p, n in jobs]
    assert eng.runner.kv.free_pages == eng.runner.kv.num_pages


def test_a_request_the_whole_cache_cannot_hold_is_refused_by_add(model):
    eng = Engine(_paged(model, 64), drafter="ngram")
    with pytest.raises(
        ValueError, match=r"needs 104 KV positions .* shared KV cache holds 64 \(RunnerConfig.kv_tokens"
    ):
        eng.add(_prompt(40, 1), 60)
    assert eng.requests == []
    eng.add(_prompt(40, 1), 20)  # 64 positions: fits alone


def test_the_newest_request_gives_way_when_the_batch_outgrows_the_pages(model):
    """Both admitted (6 pages), the batch then needs more than the 6 there are: the newer request is preempted to
    the CPU, resumes once the other ends, and both get the tokens they get alone (it failed at step 15 for ever)."""
    jobs = [(_prompt(20, 3), 40), (_prompt(20, 4), 40)]
    runner = _paged(model, 96)
    offloads = _counting_offloads(runner)
    eng = Engine(runner, drafter="ngram")
    reqs = [eng.add(p, n) for p, n in jobs]
    eng.run()
    assert offloads, "the cache was meant to run short"
    assert [r.generated for r in reqs] == [_alone(model, p, n) for p, n in jobs]
    assert all(r.error is None and not r.auto_resume and r.parked is None for r in reqs)
    assert runner.num_free == 2 and runner.kv.free_pages == runner.kv.num_pages


def test_overlapped_steps_under_a_short_cache_stay_exact(model):
    """With overlap (no host drafter): a chained step whose pages do not fit is not chained; tokens as alone."""
    jobs = [(_prompt(20, 5), 40), (_prompt(24, 6), 36), (_prompt(12, 7), 30)]
    runner = _paged(model, 112, slots=3, window=1)
    eng = Engine(runner, drafter="none")
    assert eng.overlap
    reqs = [eng.add(p, n, arrival=i) for i, (p, n) in enumerate(jobs)]
    eng.run()
    assert [r.generated for r in reqs] == [_alone(model, p, n, window=1) for p, n in jobs]


def test_a_prompt_whose_prefill_would_not_fit_is_refused_by_add(model):
    """The runner's window (4) reserves positions at prefill even where the engine decodes plainly (window 1):
    add accepted 30 + 1 + 1 <= 32, the prefill then refused it and gave up the other request with it."""
    runner = ModelRunner(model, RunnerConfig(max_slots=2, max_len=32, window=4))
    eng = Engine(runner, drafter="none")
    good = eng.add(_prompt(5, 8), 8)
    with pytest.raises(ValueError, match="the prompt of 30 tokens \\+ the runner's window 4"):
        eng.add(_prompt(30, 9), 1)
    eng.run()
    assert good.error is None and len(good.generated) == 8


def test_far_arrivals_skip_the_idle_iterations(model):
    """An arrival 10**12 iterations away took ~46 days of idle steps; the tokens are those of arrival 0."""
    eng = Engine(ModelRunner(model, RunnerConfig(max_slots=1, max_len=64, window=4)), drafter="ngram")
    late = eng.add(_prompt(9, 10), 6, arrival=10**12)
    assert eng.run(max_iterations=50) and late.done
    assert late.generated == _alone(model, _prompt(9, 10), 6) and eng.iteration > 10**12


def test_cancel_a_waiting_a_running_and_a_preempted_request(model):
    runner = ModelRunner(model, RunnerConfig(max_slots=3, max_len=128, window=4))
    eng = Engine(runner, drafter="ngram")
    keep, run, park, wait = (eng.add(_prompt(10 + i, 20 + i), 12) for i in range(4))
    eng.step()
    eng.preempt(park)
    eng.cancel(run)
    eng.cancel(wait)
    assert run.done and run.error == "cancelled" and run.slot is None and wait.error == "cancelled"
    eng.cancel(park)
    assert park.parked is None and park.error == "cancelled"
    with pytest.raises(ValueError, match="already done"):
        eng.cancel(park)
    eng.run()
    assert keep.generated == _alone(model, _prompt(10, 20), 12) and runner.num_free == 3


def test_cancel_with_a_step_in_flight(model):
    """Overlapped steps: the cancelled request's slot is freed once the step that runs it ends."""
    runner = ModelRunner(model, RunnerConfig(max_slots=2, max_len=128, window=1))
    eng = Engine(runner, drafter="none")
    a, b = eng.add(_prompt(8, 30), 20), eng.add(_prompt(9, 31), 20)
    eng.step()
    eng.step()
    assert eng._steps, "a step should be in flight"
    eng.cancel(b)
    eng.run()
    assert a.generated == _alone(model, _prompt(8, 30), 20, window=1) and runner.num_free == 2
    with pytest.raises(ValueError, match="must be a Request of this engine"):
        eng.cancel(object())


class Repeat:
    def propose(self, context, k):
        return [context[-1]] * k


class NotCallable:
    propose = 5


@pytest.mark.parametrize(("drafter", "message"), [
    (Repeat, r"pass an instance of Repeat \(e.g. Repeat\(\)\), not the class"),
    (NotCallable(), "or an object with propose\\(context, k\\), got NotCallable"),
])  # fmt: skip
def test_a_drafter_class_or_a_propose_that_is_no_function_is_refused_up_front(model, drafter, message):
    """Both were accepted, and the first step failed with a bare TypeError from inside the engine."""
    from replayssm.engine.llm import LLM

    runner = ModelRunner(model, RunnerConfig(max_slots=1, max_len=64, window=4))
    with pytest.raises(TypeError, match=message):
        Engine(runner, drafter=drafter)
    with pytest.raises(TypeError, match=message):
        LLM(model, drafter=drafter, window=4)


@pytest.mark.parametrize("kw", [dict(lookback=0), dict(max_n=2.5), dict(min_n=0), dict(lookback=True)])
def test_ngram_drafter_parameters_are_positive_ints(kw):
    """lookback=0 meant the whole context (context[-0:]); max_n=2.5 made every step raise."""
    from replayssm.engine.spec import NgramDrafter

    with pytest.raises(ValueError, match=f"{next(iter(kw))}=.*must be a positive int"):
        NgramDrafter(**kw)


def test_offload_refuses_a_float_slot_before_copying_anything(model):
    runner = ModelRunner(model, RunnerConfig(max_slots=1, max_len=64, window=4))
    s = runner.alloc()
    runner.prefill(s, _prompt(6, 40))
    with pytest.raises(ValueError, match=r"slot=0.0: not an allocated slot"):
        runner.offload(0.0)
    assert runner.num_free == 0 and runner.kv_len(s) == 6


def test_generate_names_the_prompt_it_refuses(model):
    from replayssm.engine.llm import LLM

    llm = LLM(model, window=4, max_slots=2, max_len=64)
    with pytest.raises(ValueError, match=r"^prompts\[1\]: the request needs 75 KV positions"):
        llm.generate([_prompt(5, 41), _prompt(40, 42)], max_new_tokens=31)
    assert llm.runner.num_free == 2


def test_pages_held_outside_the_engine_are_named_when_nothing_can_run(model):
    runner = _paged(model, 64)
    held = runner.alloc()
    runner.prefill(held, _prompt(40, 43))  # 3 of the 4 pages, held outside the engine
    eng = Engine(runner, drafter="ngram")
    r = eng.add(_prompt(40, 44), 10)
    with pytest.raises(RuntimeError, match=r"requests \[0\] wait for KV pages, but 1 of 4 are free"):
        eng.step()
    assert r.slot is None and not r.done and eng.iteration == 0
    runner.free(held)
    eng.run()
    assert r.generated == _alone(model, _prompt(40, 44), 10)


def test_a_request_whose_last_steps_need_less_than_two_windows_is_admitted(model):
    """A diff review: a 58-token prompt with max_new_tokens=1 fits the 4-page cache (58 + 1 + 4 <= 64), but
    admission charged it two windows ahead (66 positions) and the engine said it could not make progress."""
    eng = Engine(_paged(model, 64), drafter="ngram")
    r = eng.add(_prompt(58, 50), 1)
    eng.run()
    assert r.generated == _alone(model, _prompt(58, 50), 1)


class _Scripted:
    """Prescribed acceptance: a batch's first row accepts 1 token a step, a lone row or a second row the whole
    window (so the second request runs ahead, is preempted near its end and must resume in the full cache)."""

    def __new__(cls):
        from replayssm.engine.spec import BenchmarkAcceptance

        class Scripted(BenchmarkAcceptance):
            def draw(self, n):
                return [4] if n == 1 else [1, 4][:n]

        return Scripted(4, 4, meaningless_outputs=True)


def test_a_request_preempted_near_its_end_resumes_in_a_cache_it_exactly_fills(model):
    """A diff review: resuming charged two windows past its tokens (38 positions), more than the 37-page cache that
    the request's whole life fits; it was never resumed."""
    runner = ModelRunner(model, RunnerConfig(max_slots=2, max_len=128, window=4, kv_tokens=37, page_size=1))
    offloads = _counting_offloads(runner)
    eng = Engine(runner, benchmark_acceptance=_Scripted(), overlap=False)
    a = eng.add(_prompt(1, 51), 20, arrival=2)
    b = eng.add(_prompt(10, 52), 23)  # 10 + 23 + 4 = 37 positions: its whole life fills the cache
    eng.run(max_iterations=200)
    assert offloads and a.done and b.done and len(b.generated) == 23 and b.error is None


def test_a_step_that_fails_after_preempting_for_pages_puts_everything_back(model):
    """A diff review: the requests preempted to make room stayed parked when the step then failed (slots, pages and
    parked states differed from before the call). Now the pages the failed step reserved are given back and the
    preempted requests restored into their slots and pages; a retry gives the tokens each gets alone."""
    jobs = [(_prompt(20, 3), 40), (_prompt(20, 4), 40)]
    runner = _paged(model, 96)
    eng = Engine(runner, drafter="ngram")
    reqs = [eng.add(p, n) for p, n in jobs]
    offloads = _counting_offloads(runner)
    launch, failed = runner.launch, []

    def failing(*a, **kw):
        if offloads and not failed:
            failed.append(True)
            raise RuntimeError("injected launch failure")
        return launch(*a, **kw)

    runner.launch = failing

    def books():
        kv = runner.kv
        return (eng.iteration, [(r.slot, r.parked is None, r.auto_resume, len(r.generated)) for r in reqs],
                [list(p) for p in kv._pages], list(kv._free), kv.block_table.clone(), runner.num_free)  # fmt: skip

    while True:
        before = books()
        try:
            if not eng.step():
                break
        except RuntimeError as e:
            assert "injected" in str(e)
            after = books()
            assert before[:4] == after[:4] and torch.equal(before[4], after[4]) and before[5] == after[5]
    assert failed and [r.generated for r in reqs] == [_alone(model, p, n) for p, n in jobs]
