"""Run a second ("shadow") state pool in lockstep with the one that drives the model.

Inside a model, every GDN layer's inputs depend on the previous layers' *outputs*, and the two
backends compute window outputs by different formulas (recurrence vs the ``(I + A)^-1`` transform),
so two independently run models drift apart by output rounding after the first layer. The bitwise
contract is about the *state given the same inputs*; ``LockstepPool`` checks it inside a real model:
every call is replayed on the shadow pool with exactly the primary's inputs (the primary's outputs
go on to the next layer), so after every commit the two pools' committed states can be compared
with ``torch.equal`` at every layer, through folds, preemption and forks.
"""

from __future__ import annotations

import torch

from .pool import GDNStatePool


class LockstepPool:
    """A ``GDNStatePool`` look-alike: ``primary`` answers, ``shadow`` mirrors every state change."""

    def __init__(self, primary: GDNStatePool, shadow: GDNStatePool):
        if primary.cfg.geometry()[1:7] != shadow.cfg.geometry()[1:7] or primary.cfg.num_slots != shadow.cfg.num_slots:
            raise ValueError("primary and shadow pools must have the same layers, heads, head dims and slots")
        self.primary, self.shadow = primary, shadow
        self.cfg, self.device = primary.cfg, primary.device

    @property
    def num_free(self) -> int:
        return self.primary.num_free

    def alloc(self, n: int) -> torch.Tensor:
        slots = self.primary.alloc(n)
        other = self.shadow.alloc(n)
        if not torch.equal(slots, other):
            raise RuntimeError("lockstep pools handed out different slots")
        return slots

    def free(self, slots):
        self.primary.free(slots)
        self.shadow.free(slots)

    def write_prefill(self, layer, slots, state, conv_state):
        self.primary.write_prefill(layer, slots, state, conv_state)
        self.shadow.write_prefill(layer, slots, state, conv_state)

    def conv_update(self, layer, x, **kw):
        self.shadow.conv_update(layer, x, **kw)
        return self.primary.conv_update(layer, x, **kw)

    def verify(self, layer, q, k, v, a, b, **kw):
        self.shadow.verify(layer, q, k, v, a, b, **kw)
        return self.primary.verify(layer, q, k, v, a, b, **kw)

    def decode(self, layer, q, k, v, a, b, **kw):
        self.shadow.decode(layer, q, k, v, a, b, **kw)
        return self.primary.decode(layer, q, k, v, a, b, **kw)

    def commit(self, slots, num_accepted=None):
        self.primary.commit(slots, num_accepted)
        self.shadow.commit(slots, num_accepted)

    def committed_state(self, layer, slots):
        return self.primary.committed_state(layer, slots)

    def flush(self, slots):
        self.primary.flush(slots)
        self.shadow.flush(slots)

    def offload(self, slots):
        return self.primary.offload(slots), self.shadow.offload(slots)

    def restore(self, snapshot):
        slots = self.primary.restore(snapshot[0])
        if not torch.equal(slots, self.shadow.restore(snapshot[1])):
            raise RuntimeError("lockstep pools restored into different slots")
        return slots

    def fork(self, slots):
        new = self.primary.fork(slots)
        if not torch.equal(new, self.shadow.fork(slots)):
            raise RuntimeError("lockstep pools forked into different slots")
        return new

    def states_equal(self, slots: torch.Tensor) -> bool:
        """Committed GDN and conv states of ``slots`` are bitwise equal in both pools, at every layer."""
        return all(
            torch.equal(self.primary.committed_state(i, slots), self.shadow.committed_state(i, slots))
            and torch.equal(self.primary.committed_conv_state(i, slots), self.shadow.committed_conv_state(i, slots))
            for i in range(self.cfg.num_layers)
        )
