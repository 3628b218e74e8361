"""SGLang's GDN kernels (releases 0.5.16 and 0.5.23) as benchmark peers.

Seams: ``releases`` (which wheel files, pinned; what they may import), ``extract`` (wheel -> ignored
``.peers/`` folder; ``replayssm bench peers``), ``loader`` (folder -> functions, imports restricted),
``host`` (the platform queries 0.5.23's files import), ``base.SGLangPeer`` (the one public base: a
``steps.Step`` over every layer), one class per role (``recurrent``, ``replay``, ``recurrent_decode``, ``ring_decode``)
and, where the engines differ, one per release (``replay_0516``, ``replay_0523``). Each peer module's
docstring records the engine call sequence and buffer conventions it reproduces.
"""

from __future__ import annotations

from .base import SGLangPeer
from .extract import PeerKernelsError
from .loader import PeerKernelsMissingError, default_root, load_release
from .recurrent import SGLangRecurrentVerify
from .recurrent_decode import SGLangRecurrentDecode
from .releases import RELEASES
from .replay import SGLangReplayVerify
from .replay_0516 import ReplayVerify0516
from .replay_0523 import ReplayVerify0523
from .ring_decode import SGLangRingDecode

_DECODE = {"recurrent_decode": SGLangRecurrentDecode, "ring_decode": SGLangRingDecode}
ROLES: dict[str, dict[str, type[SGLangPeer]]] = {
    "0.5.16": {"recurrent": SGLangRecurrentVerify, "replay": ReplayVerify0516, **_DECODE},
    "0.5.23": {"recurrent": SGLangRecurrentVerify, "replay": ReplayVerify0523, **_DECODE},
}

__all__ = [
    "RELEASES",
    "ROLES",
    "PeerKernelsError",
    "PeerKernelsMissingError",
    "ReplayVerify0516",
    "ReplayVerify0523",
    "SGLangPeer",
    "SGLangRecurrentDecode",
    "SGLangRecurrentVerify",
    "SGLangReplayVerify",
    "SGLangRingDecode",
    "default_root",
    "load_release",
]
