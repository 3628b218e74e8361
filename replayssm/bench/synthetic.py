"""Random-weight models at the published Qwen3.5 geometry (for GPU benchmarks; no checkpoint needed)."""

from __future__ import annotations

import math

import torch

from ..models.config import ModelConfig
from ..models.model import HybridLM
from ..models.presets import PRESETS, preset


def preset_config(name: str, layers: int | None = None) -> ModelConfig:
    """A preset of ``models.presets`` (dense or MoE); ``layers`` keeps the first n layers (one in 4 is full
    attention; 4 to the preset's count)."""
    full = preset(name).num_layers  # ValueError naming the presets for an unknown name
    n = full if layers is None else layers
    if not 4 <= n <= full:
        raise ValueError(f"layers must be from 4 to {full} (one full-attention layer per 4; {name} has {full}), "
                         f"got {n}")  # fmt: skip
    rope = {"rope_theta": 1e7, "partial_rotary_factor": 0.25}
    return ModelConfig.from_dict({**PRESETS[name], "num_hidden_layers": n, "rope_parameters": rope})


@torch.no_grad()
def random_model(cfg: ModelConfig, *, device="cuda", dtype=torch.bfloat16, seed: int = 0) -> HybridLM:
    """Weights drawn like a trained model's scale (std 1/sqrt(fan_in)), GDN gates in their usual ranges. The model
    is allocated in ``dtype`` directly (cast while still on the meta device): 27B in fp32 first would not fit an
    H100's 80 GB, though its bf16 weights (54 GB) do."""
    with torch.device("meta"):
        model = HybridLM(cfg).to(dtype)
    model = model.to_empty(device=device)
    model.tie_weights()
    g = torch.Generator(device=device).manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("A_log"):
            p.copy_(torch.rand(p.shape, generator=g, device=device).mul(math.log(16)).to(dtype))  # A in [1, 16]
        elif name.endswith("dt_bias"):
            p.copy_(torch.randn(p.shape, generator=g, device=device).mul(0.5).to(dtype))
        elif name.endswith("linear_attn.norm.weight"):
            p.fill_(1.0)
        elif "norm" in name:
            p.zero_()
        elif p.dim() >= 2:
            p.copy_(torch.randn(p.shape, generator=g, device=device).mul(p.shape[-1] ** -0.5).to(dtype))
    return model.eval()
