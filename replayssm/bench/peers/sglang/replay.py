"""``SGLangReplayVerify``: the role base of SGLang's ReplaySSM speculative verify (one subclass per release)."""

from __future__ import annotations

from .base import SGLangPeer


class SGLangReplayVerify(SGLangPeer):
    """A step: ``verify(layer)`` for every layer, then ``commit()`` (the release's cursor advance, and
    in 0.5.23 its fold). ``set_cursors`` freezes the step for pure flush / non-flush timing."""

    role = "replay"

    def __init__(self, case, kernels):
        super().__init__(case, kernels)
        T, L = self.T, self.L
        if L < 2 or L & (L - 1) or L < 2 * T:
            raise ValueError(f"L must be a power of two >= 2 * T = {2 * T} (SGLang's early-flush margin), got {L}")
        self.do_commit = True

    def verify(self, layer: int) -> None:
        raise NotImplementedError

    def commit(self) -> None:
        raise NotImplementedError

    def __call__(self) -> None:
        for layer in range(self.layers):
            self.verify(layer)
        if self.do_commit:
            self.commit()
