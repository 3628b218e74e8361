"""Published text-model geometry of Qwen3-Next and the Qwen3.5 family (hybrid GDN + gated attention).

Values come from the official config.json files (stored copies; see bench/results/presets_sources.md
for the source of each number and how strong its evidence is). Every model uses
``full_attention_interval = 4``: layers 3, 7, 11, ... are full attention, the rest GDN.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelGeometry:
    name: str
    num_layers: int
    full_attention_interval: int
    hidden_size: int
    vocab_size: int
    H: int  # linear_num_key_heads
    HV: int  # linear_num_value_heads
    K: int  # linear_key_head_dim
    V: int  # linear_value_head_dim
    conv_kernel: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int | None = None  # dense MLP width (None for MoE models)
    num_experts: int | None = None
    num_experts_per_tok: int | None = None
    moe_intermediate_size: int | None = None
    shared_expert_intermediate_size: int | None = None

    @property
    def layer_types(self) -> list[str]:
        i = self.full_attention_interval
        return ["full_attention" if (n + 1) % i == 0 else "linear_attention" for n in range(self.num_layers)]

    @property
    def num_gdn_layers(self) -> int:
        return self.layer_types.count("linear_attention")

    @property
    def num_attention_layers(self) -> int:
        return self.num_layers - self.num_gdn_layers


def _g(name, layers, hidden, vocab, HV, q_heads, kv_heads, **kw) -> ModelGeometry:
    return ModelGeometry(name=name, num_layers=layers, full_attention_interval=4, hidden_size=hidden, vocab_size=vocab,
                         H=16, HV=HV, K=128, V=128, conv_kernel=4, num_attention_heads=q_heads, num_kv_heads=kv_heads,
                         head_dim=256, **kw)  # fmt: skip


PRESETS: dict[str, ModelGeometry] = {
    g.name: g
    for g in (
        _g(
            "qwen3-next-80b-a3b",
            48,
            2048,
            151936,
            32,
            16,
            2,
            num_experts=512,
            num_experts_per_tok=10,
            moe_intermediate_size=512,
            shared_expert_intermediate_size=512,
        ),  # fmt: skip
        _g("qwen3.5-4b", 32, 2560, 248320, 32, 16, 4, intermediate_size=9216),
        _g("qwen3.5-9b", 32, 4096, 248320, 32, 16, 4, intermediate_size=12288),
        _g("qwen3.5-27b", 64, 5120, 248320, 48, 24, 4, intermediate_size=17408),
        _g(
            "qwen3.5-35b-a3b",
            40,
            2048,
            248320,
            32,
            16,
            2,
            num_experts=256,
            num_experts_per_tok=8,
            moe_intermediate_size=512,
            shared_expert_intermediate_size=512,
        ),  # fmt: skip
        _g(
            "qwen3.5-122b-a10b",
            48,
            3072,
            248320,
            64,
            32,
            2,
            num_experts=256,
            num_experts_per_tok=8,
            moe_intermediate_size=1024,
            shared_expert_intermediate_size=1024,
        ),  # fmt: skip
        _g(
            "qwen3.5-397b-a17b",
            60,
            4096,
            248320,
            64,
            32,
            2,
            num_experts=512,
            num_experts_per_tok=10,
            moe_intermediate_size=1024,
            shared_expert_intermediate_size=1024,
        ),  # fmt: skip
    )
}


def geometry_from_config(path: str | Path) -> ModelGeometry:
    """Read an HF ``config.json`` (Qwen3-Next, or Qwen3.5 with or without a ``text_config``)."""
    cfg = json.loads(Path(path).read_text())
    cfg = cfg.get("text_config", cfg)
    try:
        layers = cfg["num_hidden_layers"]
        types = cfg.get("layer_types")
        interval = cfg.get("full_attention_interval", 4)
        geo = ModelGeometry(
            name=str(path), num_layers=layers, full_attention_interval=interval, hidden_size=cfg["hidden_size"],
            vocab_size=cfg["vocab_size"], H=cfg["linear_num_key_heads"], HV=cfg["linear_num_value_heads"],
            K=cfg["linear_key_head_dim"], V=cfg["linear_value_head_dim"], conv_kernel=cfg["linear_conv_kernel_dim"],
            num_attention_heads=cfg["num_attention_heads"], num_kv_heads=cfg["num_key_value_heads"],
            head_dim=cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"]),
            intermediate_size=cfg.get("intermediate_size"), num_experts=cfg.get("num_experts"),
            num_experts_per_tok=cfg.get("num_experts_per_tok"), moe_intermediate_size=cfg.get("moe_intermediate_size"),
            shared_expert_intermediate_size=cfg.get("shared_expert_intermediate_size"),
        )  # fmt: skip
    except KeyError as e:
        raise ValueError(f"{path}: config.json lacks the field {e.args[0]!r} needed for a GDN hybrid model") from e
    if types is not None and list(types) != geo.layer_types:
        raise ValueError(f"{path}: layer_types does not follow full_attention_interval={interval}")
    return geo
