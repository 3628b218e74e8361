"""replayssm: exact, memory-lean speculative decoding for Gated DeltaNet hybrid models.

``from replayssm import LLM`` is the front end (README, "Use it from Python"); the layers below it are the
subpackages ``replayssm.engine``, ``replayssm.state`` (the GDN state pool) and ``replayssm.ops`` (the kernels),
documented in docs/. Importing the package itself does not import torch: the names below load on first use.
"""

__version__ = "0.1.0"

_LAZY = {
    "LLM": "engine",
    "Engine": "engine",
    "ModelRunner": "engine",
    "RunnerConfig": "engine",
    "GDNStatePool": "state",
    "PoolConfig": "state",
    "load_model": "models",
}
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'replayssm' has no attribute {name!r}")
