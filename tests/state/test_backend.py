"""Every GDN state backend implements ``GDNStateBackend``, the protocol the model and the engine are typed against."""

from dataclasses import replace

import torch

from replayssm.bench.openloop import OpenLoopReplayPool
from replayssm.state import GDNStatePool, PoolConfig
from replayssm.state.backend import GDNStateBackend
from replayssm.state.lockstep import LockstepPool


class _NoCommit:
    """Everything of a real pool but ``commit``."""

    def __init__(self, pool):
        self._pool = pool

    def __getattr__(self, name):
        if name == "commit":
            raise AttributeError(name)
        return getattr(self._pool, name)


def test_backends_implement_the_protocol():
    cfg = PoolConfig(num_slots=2, num_layers=1, H=1, HV=2, K=16, V=16, window=2, ring_len=8, dtype=torch.float32)
    backends = [
        GDNStatePool(cfg),
        GDNStatePool(replace(cfg, backend="recurrent")),
        LockstepPool(GDNStatePool(cfg), GDNStatePool(replace(cfg, backend="recurrent"))),
        OpenLoopReplayPool(cfg),
    ]
    for b in backends:
        assert isinstance(b, GDNStateBackend), type(b).__name__
    assert not isinstance(_NoCommit(backends[0]), GDNStateBackend)
