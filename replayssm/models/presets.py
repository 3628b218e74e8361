"""Published text-model configs of Qwen3-Next and the Qwen3.5 family, as ``config.json`` dicts.

Read with ``preset(name)`` (``ModelConfig.from_dict``). The values come from the official config.json files
(stored copies; ``bench/results/presets_sources.md`` gives the source of each number and how strong its
evidence is). Only the fields the models and the memory planner read are kept. Every model uses
``full_attention_interval = 4``: layers 3, 7, 11, ... are full attention, the rest GDN.
"""

from __future__ import annotations

from .config import ModelConfig

# Shared by every preset: 16 GDN key heads, head dims 128, conv kernel 4, attention head_dim 256.
_COMMON = {"full_attention_interval": 4, "linear_num_key_heads": 16, "linear_key_head_dim": 128,
           "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "head_dim": 256}  # fmt: skip


def _preset(model_type, layers, hidden, vocab, value_heads, q_heads, kv_heads, **extra) -> dict:
    return {"model_type": model_type, "num_hidden_layers": layers, "hidden_size": hidden, "vocab_size": vocab,
            "linear_num_value_heads": value_heads, "num_attention_heads": q_heads, "num_key_value_heads": kv_heads,
            **_COMMON, **extra}  # fmt: skip


def _moe(experts, per_tok, inner) -> dict:
    return {"num_experts": experts, "num_experts_per_tok": per_tok, "moe_intermediate_size": inner,
            "shared_expert_intermediate_size": inner}  # fmt: skip


PRESETS: dict[str, dict] = {
    "qwen3-next-80b-a3b": _preset("qwen3_next", 48, 2048, 151936, 32, 16, 2, **_moe(512, 10, 512)),
    "qwen3.5-4b": _preset("qwen3_5_text", 32, 2560, 248320, 32, 16, 4, intermediate_size=9216),
    "qwen3.5-9b": _preset("qwen3_5_text", 32, 4096, 248320, 32, 16, 4, intermediate_size=12288),
    "qwen3.5-27b": _preset("qwen3_5_text", 64, 5120, 248320, 48, 24, 4, intermediate_size=17408),
    "qwen3.5-35b-a3b": _preset("qwen3_5_moe_text", 40, 2048, 248320, 32, 16, 2, **_moe(256, 8, 512)),
    "qwen3.5-122b-a10b": _preset("qwen3_5_moe_text", 48, 3072, 248320, 64, 32, 2, **_moe(256, 8, 1024)),
    "qwen3.5-397b-a17b": _preset("qwen3_5_moe_text", 60, 4096, 248320, 64, 32, 2, **_moe(512, 10, 1024)),
}


def preset(name: str) -> ModelConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
    return ModelConfig.from_dict(PRESETS[name])
