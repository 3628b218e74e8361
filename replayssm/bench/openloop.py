"""EXPERIMENTAL, for the drift study only: the open-loop fold of the first SGLang revision.

The checkpoint is advanced from the stored update vectors with the window formula,
``S <- exp(G) S + sum_j exp(G - P_j) u_j k^_j^T``, instead of replaying the raw inputs through the
baseline's update. The rounding of ``u`` (activation dtype, tensor-core dots, the ``(I + A)^-1``
amplification) therefore lands in the state and accumulates across folds. Nothing in replayssm
chooses this on its own: it exists so that ``replayssm drift`` can show what the exact fold avoids.
"""

from __future__ import annotations

import torch

from ..ops import ring_mark_folded
from ..state import GDNStatePool


class OpenLoopReplayPool(GDNStatePool):
    """A replay pool whose folds are open-loop. It folds right after a commit that sets ``flush`` (so its
    verify never sees a flushing row); the schedule is the protocol's, only the fold formula differs."""

    EXPERIMENTAL = True

    def __init__(self, cfg):
        if cfg.backend != "replay":
            raise ValueError("the open-loop fold is a variant of the replay backend")
        super().__init__(cfg)

    def _folds_ahead(self, slots: torch.Tensor, kind: str | None) -> bool:
        return False  # it folds the flagged rows itself, open-loop (below)

    def commit(self, slots: torch.Tensor, num_accepted: torch.Tensor) -> None:
        super().commit(slots, num_accepted)
        due = [s for s in slots.tolist() if s >= 0 and int(self.cursors.flush[s])]
        if not due:
            return
        idx = torch.tensor(due, dtype=torch.int32, device=self.device)
        for layer, ring in enumerate(self.rings):
            for s in due:
                self.checkpoint[layer, s] = self._open_loop(self.checkpoint[layer, s], ring, s)
        ring_mark_folded(self.cursors, idx, validate=False, impl=self.cfg.impl)

    def _open_loop(self, S0: torch.Tensor, ring, slot: int) -> torch.Tensor:
        c = self.cursors
        wp, bs = int(c.write_pos[slot]), int(c.base[slot])
        if wp == 0:
            return S0
        pos = [(bs + j) & (ring.L - 1) for j in range(wp)]
        k = ring.k[slot][:, pos].repeat_interleave(self.cfg.shape.group, dim=0)  # [HV, c, K], normalised keys
        P = torch.cumsum(ring.g[slot][:, pos], -1)  # [HV, c]
        u = ring.u[slot][:, pos].float() * torch.exp(P[:, -1:] - P)[..., None]  # [HV, c, V]
        return torch.exp(P[:, -1])[:, None, None] * S0 + u.transpose(1, 2) @ k
