"""Model configuration read from a Hugging Face ``config.json`` (Qwen3-Next, Qwen3.5 dense and MoE)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..ops.shape import GDNShape
from .rope import YaRN, read_rope

MODEL_TYPES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
_WRAPPERS = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text"}


@dataclass(frozen=True)
class ModelConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    layer_types: tuple[str, ...]
    rms_norm_eps: float
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    partial_rotary_factor: float
    attention_bias: bool
    H: int
    HV: int
    K: int
    V: int
    conv_kernel: int
    intermediate_size: int | None
    num_experts: int
    top_k: int
    moe_intermediate_size: int | None
    shared_expert_intermediate_size: int | None
    norm_topk_prob: bool
    mlp_only_layers: tuple[int, ...]
    decoder_sparse_step: int
    tie_word_embeddings: bool
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    rope_scaling: YaRN | None = None  # None: the default RoPE
    mtp_num_hidden_layers: int = 0  # layers of the multi-token-prediction head (tensors mtp.*); 0 = none

    @property
    def num_layers(self) -> int:
        return len(self.layer_types)

    @property
    def gdn_layers(self) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == "linear_attention"]

    @property
    def attention_layers(self) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == "full_attention"]

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def gdn_shape(self) -> GDNShape:
        return GDNShape(self.H, self.HV, self.K, self.V)

    @property
    def conv_channels(self) -> int:
        return self.gdn_shape.conv_channels

    def is_moe_layer(self, i: int) -> bool:
        if self.model_type == "qwen3_5_text" or self.num_experts == 0:
            return False
        if self.model_type == "qwen3_5_moe_text":
            return True
        return i not in self.mlp_only_layers and (i + 1) % self.decoder_sparse_step == 0

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        mt = d.get("model_type")
        if mt in _WRAPPERS:  # multimodal wrapper: the text model is in text_config
            d = dict(d.get("text_config", d))
            d.setdefault("model_type", _WRAPPERS[mt])
            mt = d["model_type"]
        if mt not in MODEL_TYPES:
            raise ValueError(f"config model_type {mt!r} is not supported (expected one of {MODEL_TYPES})")
        try:
            n = d["num_hidden_layers"]
            types = d.get("layer_types")
            if types is None:
                interval = d.get("full_attention_interval", 4)
                types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
            if len(types) != n or any(t not in ("linear_attention", "full_attention") for t in types):
                raise ValueError(f"layer_types must list {n} 'linear_attention'/'full_attention' entries, got {types}")
            theta, partial, yarn = read_rope(d)
            act = d.get("hidden_act", "silu")
            if act != "silu":
                raise ValueError(f"config.json hidden_act {act!r} is not supported (Qwen3-Next / Qwen3.5 use 'silu')")
            if d.get("attn_output_gate", True) is not True:
                raise ValueError("config.json attn_output_gate=false is not supported (the attention output is gated)")
            if d.get("use_sliding_window"):
                raise ValueError("config.json use_sliding_window=true is not supported (full attention only)")
            if d.get("dual_chunk_attention_config"):
                raise ValueError("config.json dual_chunk_attention_config is not supported (plain full attention)")
            eos = d.get("eos_token_id")
            return cls(
                model_type=mt, vocab_size=d["vocab_size"], hidden_size=d["hidden_size"], layer_types=tuple(types),
                rms_norm_eps=d.get("rms_norm_eps", 1e-6), num_heads=d["num_attention_heads"],
                num_kv_heads=d["num_key_value_heads"], head_dim=d.get("head_dim", 256),
                rope_theta=theta, partial_rotary_factor=partial, rope_scaling=yarn,
                attention_bias=d.get("attention_bias", False), H=d["linear_num_key_heads"],
                HV=d["linear_num_value_heads"], K=d["linear_key_head_dim"], V=d["linear_value_head_dim"],
                conv_kernel=d["linear_conv_kernel_dim"], intermediate_size=d.get("intermediate_size"),
                num_experts=d.get("num_experts", 0) if mt != "qwen3_5_text" else 0,
                top_k=d.get("num_experts_per_tok", 0), moe_intermediate_size=d.get("moe_intermediate_size"),
                shared_expert_intermediate_size=d.get("shared_expert_intermediate_size"),
                norm_topk_prob=d.get("norm_topk_prob", True) if mt == "qwen3_next" else True,
                mlp_only_layers=tuple(d.get("mlp_only_layers", ())),
                decoder_sparse_step=d.get("decoder_sparse_step", 1),
                tie_word_embeddings=d.get("tie_word_embeddings", False), bos_token_id=d.get("bos_token_id"),
                eos_token_id=eos[0] if isinstance(eos, list) else eos,
                mtp_num_hidden_layers=d.get("mtp_num_hidden_layers", d.get("num_nextn_predict_layers", 0)),
            )  # fmt: skip
        except KeyError as e:
            raise ValueError(f"config.json lacks the field {e.args[0]!r}") from e

    @classmethod
    def from_file(cls, path: str | Path) -> ModelConfig:
        p = Path(path)
        if p.is_dir():
            p = p / "config.json"
        if not p.is_file():
            raise FileNotFoundError(f"no config.json at {p}")
        return cls.from_dict(json.loads(p.read_text()))
