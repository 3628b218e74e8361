"""How a ``ModelRunner`` step ends when something fails part-way: its eager ``commit`` and ``abort``, and the undo
of a failed ``launch`` (``step_and_commit``'s fused step run eagerly).

A runner's step writes the GDN state (its pool), the KV lengths and a device drafter's counters. With a validating
pool, a ``commit`` that raised after some of its writes stays begun (``ModelRunner._committing``: the counts, copies
of the counters it cannot write twice, whether the pool took the step): ``commit`` again with the same counts
finishes it as one call would have (the counters are put back first; the pool finishes its own part,
``state/commit.py``); ``abort`` rolls it back, unless the pool took the step already (then it is refused: only
``commit`` can finish it). A failed fused step undoes what it committed or, where it cannot, reports its rows lost
(``undo_launch``): the engine then gives their requests up.
"""

from __future__ import annotations

import torch

from .checks import check_int_list


def counters(runner) -> list[torch.Tensor]:
    """Every device tensor a commit writes besides the pool: the KV lengths and the drafter's (``commit_counters``,
    optional: docs/drafters.md)."""
    extra = getattr(runner.drafter, "commit_counters", None)
    return [runner.kv.lens] + (list(extra()) if extra is not None else [])


def commit(runner, num_accepted: list[int]) -> None:
    """``ModelRunner.commit``."""
    if runner._in_flight is None:
        raise RuntimeError("no step to commit")
    slots, ids, T = runner._in_flight
    num_accepted = check_int_list("num_accepted", num_accepted, len(ids), 1, T)
    began = runner._committing
    if began is not None and began[0] != num_accepted:
        raise ValueError(f"num_accepted: a commit with {began[0]} was interrupted; call commit again with those "
                         f"counts to finish it, got {num_accepted}")  # fmt: skip
    n = torch.tensor(num_accepted, dtype=torch.int32).to(runner.device)
    mine = counters(runner)
    validate = runner.pool.cfg.validate  # (without, the pool's part could not be repeated or undone either)
    if began is None:
        began = [num_accepted, [c.clone() for c in mine] if validate else [], False]
        if validate:
            runner._committing = began
    else:  # what the interrupted attempt moved and cannot move twice, put back
        for c, saved in zip(mine, began[1]):
            c.copy_(saved)
    if not began[2]:
        try:
            runner.pool.commit(slots, n)  # (an interrupted pool commit finishes on its own retry)
        except BaseException:
            if runner.pool.step_in_flight() is False:  # it took the step (then failed to fold ahead)
                began[2] = True
            raise
        began[2] = True
    runner.kv.commit(slots, n)
    if runner.drafter is not None:
        runner.drafter.commit(slots, n)
    lens = list(runner._lens)
    for s, k in zip(ids, num_accepted):
        lens[s] += k
    runner._lens[:] = lens
    runner._in_flight = None
    runner._committing = None


def abort(runner) -> None:
    """``ModelRunner.abort``."""
    if runner._in_flight is None:
        return
    began = runner._committing
    if began is not None and began[2]:
        raise RuntimeError(f"abort: a commit with num_accepted={began[0]} was interrupted after the GDN state took "
                           "the step; call commit again with those counts to finish it")  # fmt: skip
    if began is not None:  # the pool rolls its part back; the counters come back from their copies
        for c, saved in zip(counters(runner), began[1]):
            c.copy_(saved)
    runner.lost.update(runner.pool.abort(runner._in_flight[0]))
    runner._in_flight = None
    runner._committing = None


def undo_launch(runner, slots: list[int], saved, ds) -> None:
    """After a failed ``launch``: drop the step, or where it cannot be dropped, lose its rows. Eagerly (``saved``:
    the counters' copies) the step's body (``ds``, a ``DeviceStep``) says how far it got: before its commit, the pool
    aborts; inside it, the counters come back and the pool rolls its part back (a validating pool; without one the
    rows are lost, nothing telling how far the GDN state got); after it, the step is committed but its tokens never
    reach the caller, so its rows are lost. In CUDA graphs the pool aborts (as it can without books)."""
    live = [s for s in slots if s >= 0]
    eager = ds is not None and saved is not None
    if eager and ds.commit_done:
        runner.lost.update(live)
        return
    if eager and ds.commit_began:
        for c, old in zip(counters(runner), saved):
            c.copy_(old)
        if not runner.pool.cfg.validate:
            runner.pool.abort(runner._slots(slots))
            runner.lost.update(live)
            return
    runner.lost.update(runner.pool.abort(runner._slots(slots)))
