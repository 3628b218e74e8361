"""Failure-injection state machine: a replay pool and a recurrent pool driven in lockstep through random valid
and invalid calls, layer by layer, with exceptions injected after an op wrote (in the middle of a step).

After every call: both pools raised the same kind of error or both succeeded; a refused call changed no
tensor at all (scratch included) and no book of the tracker; the committed SSM and conv states of every live
slot are bitwise equal in the two pools; and no slot outside the call moved.
"""

import pytest
import torch
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import replayssm.state.pool as pool_module
from replayssm.state import PoolExhaustedError, SlotError
from tests.helpers import pools
from tests.helpers.pools import Weights, device_state, inputs, same, slot_state, slots

S, NL, T, L = 4, 2, 3, 8
OPS = {"conv": ("causal_conv1d_update",), "ssm": ("gdn_replay_verify", "gdn_recurrent")}
REFUSED = (ValueError, TypeError)  # SlotError and PoolExhaustedError's ValueError sibling are caught apart


class _InjectedError(RuntimeError):
    pass


class _after_writing:  # noqa: N801 - used as a context manager, reads as a phrase
    """Make the pool module's ops of one kind run and then raise, once per pool."""

    def __init__(self, part):
        self.names = OPS[part]

    def __enter__(self):
        self.saved = {n: getattr(pool_module, n) for n in self.names}

        def failing(op):
            def run(*a, **kw):
                op(*a, **kw)
                raise _InjectedError("injected after the op wrote")

            return run

        for n, op in self.saved.items():
            setattr(pool_module, n, failing(op))

    def __exit__(self, *exc):
        for n, op in self.saved.items():
            setattr(pool_module, n, op)


class FailingPools(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        kw = dict(num_slots=S, num_layers=NL, window=T, ring_len=L, max_batch=S + 1)
        self.pools = {b: pools.pool(b, **kw) for b in ("replay", "recurrent")}
        self.cfg = self.pools["replay"].cfg
        self.w = Weights(self.cfg, seed=11)
        self.gen = torch.Generator().manual_seed(12)
        self.live: list[int] = []
        self.torn: list[int] = []  # lost in the recurrent pool by an aborted in-place decode: free() only
        self.parked = []
        self.step = None  # rows, lens, decode, x, calls left [(part, layer)], must_abort

    def _both(self, fn, expect=None):
        """Run fn on both pools; both must succeed, or both raise the same exception type (``expect``)."""
        out, errs = {}, {}
        for name, p in self.pools.items():
            try:
                out[name] = fn(p)
            except Exception as e:  # noqa: BLE001 - compared below
                errs[name] = e
        if errs:
            kinds = {type(e) for e in errs.values()}
            assert len(errs) == 2 and len(kinds) == 1, f"pools disagree: {errs} / succeeded: {list(out)}"
            err = next(iter(errs.values()))
            if expect is None or not isinstance(err, expect):
                raise err
            return err
        if expect is not None:
            raise AssertionError(f"expected {expect} from both pools, both succeeded")
        return out

    def _idle(self):
        rows = set(self.step["rows"]) if self.step else set()
        return [s for s in self.live if s not in rows]

    def _states(self, ids):
        return {n: slot_state(p, ids) if ids else [] for n, p in self.pools.items()}

    def _refused(self, fn, expect=REFUSED):
        """fn must be refused by both pools, changing no tensor and no tracker book."""
        raw = {n: device_state(p, scratch=True) for n, p in self.pools.items()}
        books = {n: self._books(p) for n, p in self.pools.items()}
        self._both(fn, expect=expect)
        for n, p in self.pools.items():
            assert same(raw[n], device_state(p, scratch=True)), f"{n}: a refused call wrote"
            assert books[n] == self._books(p), f"{n}: a refused call changed the tracker"

    @staticmethod
    def _books(p):
        t = p.tracker
        return repr(t.step), sorted(t.live), list(t._free), sorted(t.torn)

    def _in_flight(self) -> bool:
        """Whether the pools hold a step (a step is in flight from its first call that ran, or failed writing)."""
        flags = {n: p.tracker.step is not None for n, p in self.pools.items()}
        assert len(set(flags.values())) == 1, flags
        return flags["replay"]

    def _draw_idle(self, data, max_size=None):
        return data.draw(st.lists(st.sampled_from(self._idle()), min_size=1, max_size=max_size, unique=True))

    def _guarded(self, involved, fn):
        """Run fn; the committed states of live slots outside ``involved`` (and outside the step) must not move."""
        others = [s for s in self._idle() if s not in involved]
        before = self._states(others)
        out = fn()
        after = self._states(others)
        for n in self.pools:
            assert same(before[n], after[n]), f"{n}: a slot outside the call moved"
        return out

    @initialize()
    def two_slots_one_flushing(self):
        """Start with history: slot 0 committed 3 tokens, so its next verify folds (3 + 2 * 3 > L = 8)."""
        self.alloc(2)
        x = inputs(self.cfg, [3, 2], self.gen)
        self._both(lambda p: pools.step(p, self.w, [0, 1], x, [3, 1]))
        assert int(self.pools["replay"].cursors.flush[0]) == 1

    @rule(n=st.integers(1, 2))
    def alloc(self, n):
        free = S - len(self.live) - len(self.torn)
        if n > free:
            self._refused(lambda p: p.alloc(n), expect=PoolExhaustedError)
            return
        got = self._guarded([], lambda: self._both(lambda p: p.alloc(n).tolist()))
        assert got["replay"] == got["recurrent"]
        ids = got["replay"]
        state = torch.randn(n, self.cfg.HV, self.cfg.V, self.cfg.K, generator=self.gen) * 0.1
        conv = torch.randn(n, self.cfg.conv_kernel - 1, self.cfg.channels, generator=self.gen)
        for layer in range(NL):
            self._both(lambda p, layer=layer: p.write_prefill(layer, slots(ids), state, conv))
        self.live += ids

    @precondition(lambda self: self._idle())
    @rule(data=st.data())
    def free(self, data):
        ids = self._draw_idle(data)
        self._guarded(ids, lambda: self._both(lambda p: p.free(slots(ids))))
        self.live = [s for s in self.live if s not in ids]
        self._refused(lambda p: p.free(slots(ids[:1])), expect=SlotError)  # double free

    @precondition(lambda self: self.torn)
    @rule()
    def free_torn(self):
        ids, self.torn = self.torn, []
        self._guarded(ids, lambda: self._both(lambda p: p.free(slots(ids))))

    @precondition(lambda self: self._idle())
    @rule(data=st.data())
    def flush(self, data):
        ids = self._draw_idle(data)
        self._guarded(ids, lambda: self._both(lambda p: p.flush(slots(ids))))

    @precondition(lambda self: self._idle())
    @rule(data=st.data())
    def preempt(self, data):
        ids = self._draw_idle(data, max_size=2)
        parked = self._guarded(ids, lambda: self._both(lambda p: p.offload(slots(ids))))
        self._both(lambda p: p.free(slots(ids)))
        self.live = [s for s in self.live if s not in ids]
        self.parked.append(parked)

    @precondition(lambda self: self.parked)
    @rule()
    def resume(self):
        parked = self.parked[-1]
        n = parked["replay"].num_slots
        if n > S - len(self.live) - len(self.torn):
            self._refused(lambda p: p.restore(parked[p.cfg.backend]), expect=PoolExhaustedError)
            return
        self.parked.pop()
        got = self._guarded([], lambda: self._both(lambda p: p.restore(parked[p.cfg.backend]).tolist()))
        assert got["replay"] == got["recurrent"]
        self.live += got["replay"]

    @precondition(lambda self: self._idle())
    @rule(data=st.data())
    def fork(self, data):
        ids = self._draw_idle(data, max_size=2)
        if len(ids) > S - len(self.live) - len(self.torn):
            self._refused(lambda p: p.fork(slots(ids)), expect=PoolExhaustedError)
            return
        got = self._guarded([], lambda: self._both(lambda p: p.fork(slots(ids)).tolist()))
        assert got["replay"] == got["recurrent"]
        for p in self.pools.values():
            assert same(slot_state(p, ids), slot_state(p, got["replay"]))
        self.live += got["replay"]

    @precondition(lambda self: self.step is None and self.live)
    @rule(data=st.data(), decode=st.booleans())
    def begin(self, data, decode):
        rows = data.draw(st.permutations(self.live))[: data.draw(st.integers(1, len(self.live)))]
        if data.draw(st.booleans()):
            rows.insert(data.draw(st.integers(0, len(rows))), -1)
        lens = [1] * len(rows) if decode else [data.draw(st.integers(1, T)) for _ in rows]
        calls = [(part, layer) for layer in range(NL) for part in ("conv", "ssm")]
        x = inputs(self.cfg, lens, self.gen)
        before = self._states([r for r in rows if r >= 0])  # committed states, for an abort to keep
        self.step = dict(rows=rows, lens=lens, decode=decode, x=x, calls=calls, must_abort=False, before=before)

    def _call(self, p, part, layer, layer_index=None):
        s = self.step
        if part == "conv":
            return pools.conv(p, self.w, layer, s["rows"], s["x"], layer_index=layer_index)
        return pools.ssm(p, self.w, layer, s["rows"], s["x"], decode=s["decode"], layer_index=layer_index)

    @precondition(lambda self: self.step is None and self.live)
    @rule(data=st.data(), decode=st.booleans())
    def whole_step(self, data, decode):
        """A step from begin to commit or abort in one rule, every call possibly preceded by a refused misuse
        or failing after it wrote (then retried): failures in the middle of steps, densely."""
        self.begin(data, decode)
        while self.step["calls"] and not self.step["must_abort"]:
            what = data.draw(st.sampled_from(["ok", "ok", "misuse", "fail"]))
            if what == "misuse" and self._in_flight():
                self.misuse_in_flight(data)
            elif what == "fail":
                self.fail_after_writing()
            else:
                self.advance()
        if self.step["must_abort"] or data.draw(st.integers(0, 4)) == 0:
            self.abort()
        else:
            self.commit(data)

    @precondition(lambda self: self.step and self.step["calls"] and not self.step["must_abort"])
    @rule()
    def advance(self):
        part, layer = self.step["calls"][0]
        self._guarded([], lambda: self._both(lambda p: self._call(p, part, layer)))
        self.step["calls"].pop(0)

    @precondition(lambda self: self.step and self.step["calls"] and not self.step["must_abort"])
    @rule()
    def fail_after_writing(self):
        """The next op raises after it wrote: retried later by ``advance`` (or the step aborted)."""
        part, layer = self.step["calls"][0]
        flushing = any(int(self.pools["replay"].cursors.flush[r]) for r in self.step["rows"] if r >= 0)
        event(f"failure injected in {part}{' of a flushing row' if flushing else ''}")
        with _after_writing(part):
            self._guarded([], lambda: self._both(lambda p: self._call(p, part, layer), expect=_InjectedError))
        if part == "ssm" and self.step["decode"]:
            self.step["must_abort"] = True  # the recurrent pool's in-place decode cannot be retried

    @precondition(lambda self: self.step and not self.step["must_abort"] and self._in_flight())
    @rule(data=st.data())
    def misuse_in_flight(self, data):
        s = self.step
        rows, live_rows = s["rows"], [r for r in s["rows"] if r >= 0]
        part, layer = s["calls"][0] if s["calls"] else ("ssm", NL - 1)
        n = len(rows)
        other = [r for r in self._idle() if r not in rows]
        wrong = [
            lambda p: p.commit(slots(rows[::-1]), slots([1] * n)) if n > 1 else p.commit(slots([]), slots([])),
            lambda p: p.commit(slots(rows), slots([0] * n)),
            lambda p: p.commit(slots(rows), slots([T + 1] * n)),
            lambda p: p.free(slots(live_rows[:1])),
            lambda p: p.offload(slots(live_rows[:1])),
            lambda p: p.flush(slots(live_rows[:1])),
            lambda p: p.fork(slots(live_rows[:1])),
            lambda p: p.committed_state(0, slots(live_rows[:1])),
            lambda p: self._call(p, part, layer, layer_index=NL),  # no such layer
            lambda p: pools.ssm(p, self.w, layer, rows, dict(s["x"], q=s["x"]["q"].double()), decode=s["decode"]),
        ]
        if other:
            x = inputs(self.cfg, [1], self.gen)
            wrong.append(lambda p: pools.conv(p, self.w, layer, other[:1], x))  # a second batch
            wrong.append(lambda p: pools.ssm(p, self.w, layer, other[:1], x, decode=s["decode"]))
        done = [(pt, ly) for ly in range(NL) for pt in ("conv", "ssm") if (pt, ly) not in s["calls"]]
        if done:  # a call of this step that already ran
            wrong.append(lambda p: self._call(p, *done[0]))
        if s["calls"]:  # commit before every layer ran
            wrong.append(lambda p: p.commit(slots(rows), slots([1] * n)))
        self._refused(data.draw(st.sampled_from(wrong)))

    @precondition(lambda self: self.step and not self.step["calls"] and not self.step["must_abort"])
    @rule(data=st.data())
    def commit(self, data):
        s = self.step
        acc = [data.draw(st.integers(1, n)) for n in s["lens"]]
        live_rows = [r for r in s["rows"] if r >= 0]
        self._guarded(live_rows, lambda: self._both(lambda p: p.commit(slots(s["rows"]), slots(acc))))
        self.step = None

    @precondition(lambda self: self.step is not None)
    @rule()
    def abort(self):
        rows, before = self.step["rows"], self.step["before"]
        live_rows = [r for r in rows if r >= 0]
        self._guarded(live_rows, lambda: self._both(lambda p: p.abort(slots(rows))))
        self.step = None
        torn = sorted(self.pools["recurrent"].tracker.torn - set(self.torn))  # torn by this step
        assert not self.pools["replay"].tracker.torn
        if torn:
            assert set(torn) <= set(live_rows)
            self.live = [s for s in self.live if s not in torn]
            self.torn += torn
        else:  # an aborted step keeps the committed state exactly
            after = self._states(live_rows)
            assert all(same(before[n], after[n]) for n in self.pools)

    @invariant()
    def committed_states_bitwise_equal(self):
        ids = self._idle()
        if ids:
            states = self._states(ids)
            assert same(states["replay"], states["recurrent"])


FailingPools.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestFailingPools = FailingPools.TestCase


def test_injection_reaches_the_pool():
    """The machine's injection replaces the ops the pool calls (a rename in pool.py must not silence it)."""
    for names in OPS.values():
        for n in names:
            assert callable(getattr(pool_module, n))
    with pytest.raises(_InjectedError), _after_writing("ssm"):
        p = pools.pool("replay")
        w = Weights(p.cfg)
        p.alloc(1)
        pools.layers(p, w, [0], inputs(p.cfg, [1], torch.Generator()), which=[0])
