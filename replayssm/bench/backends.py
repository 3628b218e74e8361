"""The backends a kernel bench point times: replayssm's two and each loaded SGLang release's two.

Each backend is ``impl/kind``: ``impl`` "replayssm" or "sglang-<version>", ``kind`` "recurrent"
(snapshot per window token, or plain recurrent decode at T=1) or "replay" (a ring protocol: ReplaySSM verify,
or SGLang's ring decode at T=1). Replay backends are ring steps (``set_cursors``). ``gate`` says how
the backend is checked before it is timed (``check.verdict``): replayssm's recurrent baseline is the
reference every other backend is compared with.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from .steps import RecurrentDecode, RecurrentStep, ReplayStep, Step, StepCase

OURS = "replayssm"


@dataclass(frozen=True)
class Backend:
    impl: str
    kind: str  # "recurrent" | "replay"
    build: Callable[[StepCase], Step]
    gate: str  # "reference" | "bitwise" | "tolerance"

    @property
    def label(self) -> str:
        return f"{self.impl}/{self.kind}"


def peer_impl(version: str) -> str:
    return f"sglang-{version}"


def backends_for(T: int, peers: dict) -> list[Backend]:
    """Ours first (the reference, then ReplaySSM), then per release in ``peers`` {version: kernels}:
    its recurrent verify and ReplaySSM verify (T >= 2), or its recurrent decode and ring decode (T = 1)."""
    from .peers.sglang import ROLES

    ours_recurrent = RecurrentDecode.build if T == 1 else RecurrentStep.build
    out = [
        Backend(OURS, "recurrent", ours_recurrent, "reference"),
        Backend(OURS, "replay", ReplayStep.build, "bitwise"),
    ]
    for version, kernels in peers.items():
        roles = ROLES[version]
        impl = peer_impl(version)
        if T == 1:
            for kind, role in (("recurrent", "recurrent_decode"), ("replay", "ring_decode")):
                out.append(Backend(impl, kind, functools.partial(roles[role].build, kernels=kernels), "tolerance"))
            continue
        for kind in ("recurrent", "replay"):
            out.append(Backend(impl, kind, functools.partial(roles[kind].build, kernels=kernels), "tolerance"))
    return out
