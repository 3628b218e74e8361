"""``LLM(drafter=<object>)``: any object with ``propose(context, k)`` drafts on the host; the output stays greedy
plain decode's, whatever it proposes."""

import pytest

from replayssm.engine.llm import LLM
from replayssm.tiny import TINY_MODEL

PROMPTS = ["def fib(n):\n    if n < 2:\n        return n\n", "import os\n"]


class Repeat:
    """Proposes the last k tokens of the context again (a legal but often wrong drafter), recording its calls."""

    def __init__(self):
        self.calls = []

    def propose(self, context, k):
        self.calls.append((len(context), k))
        return list(context[-k:])


def test_drafter_object_runs_and_output_equals_plain_decode():
    plain = LLM(TINY_MODEL, drafter="none", window=1, max_slots=2, max_len=256)
    want = [o.token_ids for o in plain.generate(PROMPTS, 24)]
    d = Repeat()
    llm = LLM(TINY_MODEL, drafter=d, window=4, max_slots=2, max_len=256)
    assert llm.drafter is d
    out = llm.generate(PROMPTS, 24)
    assert [o.token_ids for o in out] == want
    assert d.calls and all(k == 3 for _, k in d.calls)  # window - 1 drafts asked for
    assert llm.model.mtp is None  # an object drafter never loads the MTP head


def test_drafter_object_errors():
    with pytest.raises(TypeError, match=r"or an object with propose\(context, k\), got int"):
        LLM(TINY_MODEL, drafter=3)
    with pytest.raises(ValueError, match=r"drafter must be one of .* got 'eagle'"):
        LLM(TINY_MODEL, drafter="eagle")
    with pytest.raises(ValueError, match="a drafter object needs window >= 2"):
        LLM(TINY_MODEL, drafter=Repeat(), window=1)


def test_a_drafter_proposing_bad_tokens_is_refused_and_the_llm_stays_usable():
    class Bad:
        def propose(self, context, k):
            return [10**9] * k

    llm = LLM(TINY_MODEL, drafter=Bad(), window=4, max_slots=2, max_len=256)
    with pytest.raises(ValueError, match="draft token ids"):
        llm.generate(PROMPTS, 8)
    assert llm.runner.num_free == 2  # the failed call gave its slots back
