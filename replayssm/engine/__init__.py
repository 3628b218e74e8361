"""The engine: a model runner with whole-step CUDA graphs (``ModelRunner``), continuous batching with speculative
decoding (``Engine``), drafting (``NgramDrafter``, your own ``HostDrafter``, the MTP head) and the ``LLM`` front end
(docs/engine.md, docs/drafters.md)."""

from .drafter import HostDrafter
from .engine import Engine
from .llm import LLM, Output
from .requests import Request
from .runner import ModelRunner, RunnerConfig
from .spec import NgramDrafter

__all__ = ["LLM", "Engine", "HostDrafter", "ModelRunner", "NgramDrafter", "Output", "Request", "RunnerConfig"]
