"""Random-weight models at the published Qwen3.5 geometry (for GPU benchmarks; no checkpoint needed)."""

from __future__ import annotations

import math

import torch

from ..models.config import ModelConfig
from ..models.model import HybridLM
from ..state.presets import PRESETS


def preset_config(name: str, layers: int | None = None) -> ModelConfig:
    """A dense Qwen3.5 text config from ``state.presets``; ``layers`` keeps the first n layers (interval 4)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
    g = PRESETS[name]
    if g.intermediate_size is None:
        raise ValueError(f"preset {name!r} is a MoE model; the end-to-end bench runs dense presets (CUDA graphs)")
    n = layers or g.num_layers
    if n < 4:
        raise ValueError(f"layers must be >= 4 (one full-attention layer per 4), got {n}")
    return ModelConfig.from_dict({
        "model_type": "qwen3_5_text", "vocab_size": g.vocab_size, "hidden_size": g.hidden_size, "num_hidden_layers": n,
        "full_attention_interval": g.full_attention_interval, "num_attention_heads": g.num_attention_heads,
        "num_key_value_heads": g.num_kv_heads, "head_dim": g.head_dim, "linear_num_key_heads": g.H,
        "linear_num_value_heads": g.HV, "linear_key_head_dim": g.K, "linear_value_head_dim": g.V,
        "linear_conv_kernel_dim": g.conv_kernel, "intermediate_size": g.intermediate_size,
        "rope_parameters": {"rope_theta": 1e7, "partial_rotary_factor": 0.25},
    })  # fmt: skip


@torch.no_grad()
def random_model(cfg: ModelConfig, *, device="cuda", dtype=torch.bfloat16, seed: int = 0) -> HybridLM:
    """Weights drawn like a trained model's scale (std 1/sqrt(fan_in)), GDN gates in their usual ranges."""
    with torch.device("meta"):
        model = HybridLM(cfg)
    model = model.to_empty(device=device).to(dtype)
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
            fan_in = p.shape[-1] if "conv1d" not in name else p.shape[-1]
            p.copy_(torch.randn(p.shape, generator=g, device=device).mul(fan_in**-0.5).to(dtype))
    return model.eval()
