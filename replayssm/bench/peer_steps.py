"""SGLang 0.5.16 peers as multi-layer benchmark steps, shaped like ``steps.RecurrentStep`` / ``ReplayStep``."""

from __future__ import annotations

import torch

from .sglang_peer import SGLangRecurrentPeer, SGLangReplayPeer


class PeerReplayStep:
    """SGLang's ReplaySSM verify per layer (own checkpoint and caches), cursors shared by all layers, one commit."""

    def __init__(self, kernels, geo, B, T, nl, x, accept, state0, *, L, dtype, commit=True):
        self.x, self.nl, self.accept, self.commit = x, nl, accept, commit
        self.peers = [SGLangReplayPeer(B, geo.H, geo.HV, geo.K, geo.V, T=T, L=L, dtype=dtype, device=state0.device,
                                       kernels=kernels) for _ in range(nl)]  # fmt: skip
        first = self.peers[0]
        for layer, p in enumerate(self.peers):
            p.checkpoint.copy_(state0[layer])
            p.write_pos, p.cache_base, p.is_flush = first.write_pos, first.cache_base, first.is_flush
        self.out = torch.empty_like(x["v"])

    def verify(self, layer: int):
        x = self.x
        return self.peers[layer].verify(x["q"], x["k"], x["v"], x["a"], x["b"], x["A_log"], x["dt_bias"],
                                        x["slots"], x["cu_seqlens"], out=self.out)  # fmt: skip

    def __call__(self):
        for layer in range(self.nl):
            self.verify(layer)
        if self.commit:
            self.peers[0].commit(self.x["slots"], self.accept())

    def set_cursors(self, write_pos: int, flush: bool):
        p = self.peers[0]
        p.write_pos.fill_(write_pos)
        p.is_flush.fill_(int(flush))


class PeerRecurrentStep:
    """SGLang's recurrent target-verify per layer, then its masked scatter of the accepted snapshot."""

    def __init__(self, kernels, geo, B, T, nl, x, accept, state0, *, dtype):
        self.x, self.nl, self.accept = x, nl, accept
        self.peers = [SGLangRecurrentPeer(B, geo.H, geo.HV, geo.K, geo.V, T=T, max_batch=B, dtype=dtype,
                                          device=state0.device, kernels=kernels) for _ in range(nl)]  # fmt: skip
        for layer, p in enumerate(self.peers):
            p.state.copy_(state0[layer])

    def verify(self, layer: int):
        x = self.x
        return self.peers[layer].verify(x["q"], x["k"], x["v"], x["a"], x["b"], x["A_log"], x["dt_bias"],
                                        x["slots"], x["cu_seqlens"])  # fmt: skip

    def __call__(self):
        for layer in range(self.nl):
            self.verify(layer)
        n = self.accept()
        for p in self.peers:
            p.commit(self.x["slots"], n)
