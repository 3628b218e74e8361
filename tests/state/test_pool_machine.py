"""State-machine test: a replay pool and a recurrent pool driven in lockstep through random lifecycles."""

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from replayssm.state import GDNStatePool, PoolConfig, PoolExhaustedError, SlotError

NL, H, HV, K, V, T, L, S = 2, 1, 2, 16, 16, 3, 8, 5
OUT_BOUND = 1e-4  # fp32: recurrence vs window transform differ by float32 round-off only


def _pool(backend):
    return GDNStatePool(PoolConfig(num_slots=S, num_layers=NL, H=H, HV=HV, K=K, V=V, window=T, ring_len=L,
                                   backend=backend, dtype=torch.float32, max_batch=S + 1))  # fmt: skip


def _slots(ids):
    return torch.tensor(ids, dtype=torch.int32)


class LockstepPools(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.gen = torch.Generator().manual_seed(1234)
        self.pools = {"replay": _pool("replay"), "recurrent": _pool("recurrent")}
        C = self.pools["replay"].cfg.channels
        self.layers = [
            dict(A_log=self._r(HV) * 0.5 - 1, dt_bias=self._r(HV) * 0.5, weight=self._r(C, 4) * 0.5, bias=self._r(C))
            for _ in range(NL)
        ]
        self.live: list[int] = []
        self.offloaded = []

    def _r(self, *shape):
        return torch.randn(*shape, generator=self.gen)

    def _draw_live(self, data, max_size=None):
        return data.draw(st.lists(st.sampled_from(self.live), min_size=1, max_size=max_size, unique=True))

    def _both(self, fn):
        return {name: fn(p) for name, p in self.pools.items()}

    def _raw(self, p, ids):
        idx = torch.tensor(ids, dtype=torch.long)
        parts = [p.checkpoint[:, idx], p.conv_state[:, idx]]
        if p.cfg.backend == "replay":
            parts += [p.ring_layers.k[:, idx], p.ring_layers.u[:, idx], p.cursors.write_pos[idx], p.cursors.base[idx]]
        return [t.clone().nan_to_num() for t in parts]

    @initialize()
    def start_with_requests(self):
        self.alloc(3)

    @rule(n=st.integers(1, 3))
    def alloc(self, n):
        if n > S - len(self.live):
            for p in self.pools.values():
                with pytest.raises(PoolExhaustedError):
                    p.alloc(n)
            return
        got = self._both(lambda p: p.alloc(n).tolist())
        assert got["replay"] == got["recurrent"]
        ids = got["replay"]
        for layer in range(NL):
            state = self._r(n, HV, V, K) * 0.1
            conv = self._r(n, 3, self.pools["replay"].cfg.channels)
            for p in self.pools.values():
                p.write_prefill(layer, _slots(ids), state, conv)
        self.live += ids

    @precondition(lambda self: self.live)
    @rule(data=st.data(), decode=st.booleans())
    def step(self, data, decode):
        ids = data.draw(st.permutations(self.live)).copy()[: data.draw(st.integers(1, len(self.live)))]
        if data.draw(st.booleans()):
            ids.insert(data.draw(st.integers(0, len(ids))), -1)
        lens = [1] * len(ids) if decode else [data.draw(st.integers(1, T)) for _ in ids]
        acc = [data.draw(st.integers(1, n)) for n in lens]
        outside = [s for s in self.live if s not in ids]
        before = self._both(lambda p: self._raw(p, outside))
        cu = _slots([0] + torch.tensor(lens).cumsum(0).tolist())
        N, C = sum(lens), self.pools["replay"].cfg.channels
        x, q, k, v = self._r(N, C), self._r(N, H, K), self._r(N, H, K), self._r(N, HV, V)
        a, b = self._r(N, HV), self._r(N, HV)
        outs = {}
        for name, p in self.pools.items():
            for layer, w in enumerate(self.layers):
                y = p.conv_update(layer, x, weight=w["weight"], bias=w["bias"], slots=_slots(ids), cu_seqlens=cu)
                fn = p.decode if decode else p.verify
                kw = {} if decode else {"cu_seqlens": cu}
                o = fn(layer, q, k, v, a, b, A_log=w["A_log"], dt_bias=w["dt_bias"], slots=_slots(ids), **kw)
                outs[name] = (y, o)
            p.commit(_slots(ids), _slots(acc))  # all 1 after a decode
        assert torch.equal(outs["replay"][0], outs["recurrent"][0])  # conv: same code on both backends
        o_r, o_b = outs["replay"][1], outs["recurrent"][1]
        assert ((o_r - o_b).norm() / o_b.norm()).item() < OUT_BOUND
        after = self._both(lambda p: self._raw(p, outside))
        for name in self.pools:
            assert all(torch.equal(x_, y_) for x_, y_ in zip(before[name], after[name])), "untouched slot changed"

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def flush(self, data):
        ids = self._draw_live(data)
        for p in self.pools.values():
            p.flush(_slots(ids))
        assert (self.pools["replay"].cursors.write_pos[ids] == 0).all()

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def preempt(self, data):
        ids = self._draw_live(data)
        snaps = self._both(lambda p: p.offload(_slots(ids)))
        for p in self.pools.values():
            p.free(_slots(ids))
        self.live = [s for s in self.live if s not in ids]
        self.offloaded.append(snaps)

    @precondition(lambda self: self.offloaded)
    @rule()
    def resume(self):
        snaps = self.offloaded[-1]
        n = snaps["replay"].num_slots
        if n > S - len(self.live):
            for p in self.pools.values():
                with pytest.raises(PoolExhaustedError):
                    p.restore(snaps[p.cfg.backend])
            return
        self.offloaded.pop()
        got = {name: self.pools[name].restore(snaps[name]).tolist() for name in self.pools}
        assert got["replay"] == got["recurrent"]
        self.live += got["replay"]

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def fork(self, data):
        ids = self._draw_live(data, max_size=2)
        if len(ids) > S - len(self.live):
            for p in self.pools.values():
                with pytest.raises(PoolExhaustedError):
                    p.fork(_slots(ids))
            return
        got = self._both(lambda p: p.fork(_slots(ids)).tolist())
        for p in self.pools.values():
            for layer in range(NL):
                new = p.committed_state(layer, _slots(got["replay"]))
                assert torch.equal(p.committed_state(layer, _slots(ids)), new)
        self.live += got["replay"]

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free(self, data):
        ids = self._draw_live(data)
        for p in self.pools.values():
            p.free(_slots(ids))
        self.live = [s for s in self.live if s not in ids]
        for p in self.pools.values():
            with pytest.raises(SlotError, match="not allocated"):
                p.free(_slots(ids[:1]))  # double free

    @invariant()
    def committed_states_bitwise_equal(self):
        if not self.live:
            return
        ids = _slots(self.live)
        for layer in range(NL):
            a = self.pools["replay"].committed_state(layer, ids)
            b = self.pools["recurrent"].committed_state(layer, ids)
            assert torch.equal(a, b)
            assert torch.equal(self.pools["replay"].committed_conv_state(layer, ids),
                               self.pools["recurrent"].committed_conv_state(layer, ids))  # fmt: skip


LockstepPools.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestLockstepPools = LockstepPools.TestCase
