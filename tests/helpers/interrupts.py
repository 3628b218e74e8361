"""Failing a call part-way through its writes, in tests: an interrupt-like exception raised after (or before) one of
the ops a call runs, and the small pools and runners the interrupted-call tests share."""

import pytest
import torch

import replayssm.state.commit as commit_module
from tests.helpers import pools
from tests.helpers.pools import Weights, device_state, inputs, slot_state, slots


class Stop(BaseException):  # like KeyboardInterrupt: not an Exception, so nothing catches it on the way
    pass


def fail_after(module, name: str, *, before: bool = False):
    """Make ``module.name`` run, then raise ``Stop`` (``before``: raise without running); returns the undo."""
    op = getattr(module, name)

    def run(*a, **kw):
        if not before:
            op(*a, **kw)
        raise Stop(f"after {name} wrote")

    setattr(module, name, run)
    return lambda: setattr(module, name, op)


def two_steps(p, w, first_commit):
    """Two steps over slots 0 and 1: the first committed by ``first_commit(p)``, the second plainly (so a wrong
    cursor or conv state after the first shows in the second's outputs and states)."""
    g = torch.Generator().manual_seed(3)
    pools.layers(p, w, [0, 1], inputs(p.cfg, [3, 2], g))
    first_commit(p)
    out = pools.step(p, w, [0, 1], inputs(p.cfg, [3, 3], g), [3, 1])
    return out, slot_state(p, [0, 1]), device_state(p)


def fresh(backend):
    p = pools.pool(backend)
    p.alloc(2)
    return p, Weights(p.cfg, 5)


def commit_failing_in(p, name: str, rows=(0, 1), counts=(2, 1), *, before: bool = False) -> None:
    """``p.commit(rows, counts)`` with ``commit_module.name`` failing after (or ``before``) it ran."""
    undo = fail_after(commit_module, name, before=before)
    try:
        with pytest.raises(Stop):
            p.commit(slots(rows), slots(counts))
    finally:
        undo()


def tiny_runner(cuda_graphs=False):
    """A replay runner of the embedded model (window 2) with one prefilled slot: (runner, slot)."""
    from replayssm.engine.llm import LLM
    from replayssm.tiny import TINY_MODEL

    llm = LLM(TINY_MODEL, backend="replay", window=2, drafter="ngram", device="cpu", dtype=torch.float32,
              max_slots=2, max_len=64, cuda_graphs=cuda_graphs)  # fmt: skip
    r = llm.runner
    slot = r.alloc()
    r.prefill(slot, [1, 2, 3, 4])
    return r, slot


def gdn_state(r, slot):
    """The runner's committed GDN state of ``slot``, every layer."""
    return [r.pool.committed_state(i, slots([slot])) for i in range(r.pool.cfg.num_layers)]
