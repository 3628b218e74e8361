"""Qwen3-Next / Qwen3.5 hybrid models: ``ModelConfig`` (the one model description), presets, the HF-format loader
and the model itself (``HybridLM``)."""

from .config import ModelConfig
from .loader import load_model
from .model import HybridLM
from .presets import preset

__all__ = ["HybridLM", "ModelConfig", "load_model", "preset"]
