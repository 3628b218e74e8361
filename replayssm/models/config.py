"""Model configuration read from a Hugging Face ``config.json`` (Qwen3-Next, Qwen3.5 dense and MoE)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from ..ops.shape import GDNShape
from .rope import YaRN, read_rope

MODEL_TYPES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
_WRAPPERS = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text"}
# config.json fields that must hold a positive int (zero allowed for the second group)
_POSITIVE = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
             "linear_value_head_dim", "linear_conv_kernel_dim", "intermediate_size", "moe_intermediate_size",
             "shared_expert_intermediate_size", "decoder_sparse_step", "max_position_embeddings",
             "full_attention_interval")  # fmt: skip
_NON_NEGATIVE = ("num_experts", "num_experts_per_tok", "mtp_num_hidden_layers", "num_nextn_predict_layers")


class ModelConfigError(ValueError):
    """A config.json that replayssm cannot read: not JSON, not an object, a missing or ill-typed field, or an
    unsupported model. The message names the file (when read from one) and the problem."""


def _check_fields(d: dict) -> None:
    for names, lo, want in ((_POSITIVE, 1, "a positive int"), (_NON_NEGATIVE, 0, "an int >= 0")):
        for name in names:
            val = d.get(name)
            if val is None:
                continue
            if isinstance(val, bool) or not isinstance(val, int) or val < lo:
                raise ModelConfigError(f"config.json field {name!r} must be {want}, got {val!r}")
    h, hv = d.get("linear_num_key_heads"), d.get("linear_num_value_heads")
    if h is not None and hv is not None and hv % h:
        raise ModelConfigError(f"config.json linear_num_value_heads={hv} must be a multiple of "
                               f"linear_num_key_heads={h}")  # fmt: skip


def _json_kind(x) -> str:
    """What a parsed JSON value is, in JSON's words: null, a boolean, a number, a string, an array."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return f"the boolean {str(x).lower()}"
    if isinstance(x, (int, float)):
        return f"the number {x}"
    return {str: "a string", list: "an array"}.get(type(x), f"a {type(x).__name__}")


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
    eos_token_id: tuple[int, ...] | None = None  # the end tokens (config.json: one id or a list; any of them ends)
    rope_scaling: YaRN | None = None  # None: the default RoPE
    max_position_embeddings: int | None = None  # the longest sequence the model was made for; None: not given
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

    def check_buildable(self) -> None:
        """Raise ``ModelConfigError`` unless a model can be built from this config: an MLP size for every kind of
        MLP layer it has (a config without them still plans memory, ``plan_memory``)."""
        moe = [i for i in range(self.num_layers) if self.is_moe_layer(i)]
        for name in ("moe_intermediate_size", "shared_expert_intermediate_size"):  # routed and shared experts
            if moe and getattr(self, name) is None:
                raise ModelConfigError(f"config.json lacks the field {name!r} (its model has MoE layers)")
        if len(moe) < self.num_layers and self.intermediate_size is None:
            raise ModelConfigError("config.json lacks the field 'intermediate_size' (its model has dense MLP layers)")

    def is_moe_layer(self, i: int) -> bool:
        if self.model_type == "qwen3_5_text" or self.num_experts == 0:
            return False
        if self.model_type == "qwen3_5_moe_text":
            return True
        return i not in self.mlp_only_layers and (i + 1) % self.decoder_sparse_step == 0

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        """Raises ``ModelConfigError`` (a ``ValueError``) naming the field that is missing, ill-typed or
        unsupported."""
        if not isinstance(d, dict):
            raise ModelConfigError(f"config.json must hold a JSON object, got {_json_kind(d)}")
        mt = d.get("model_type")
        if mt in _WRAPPERS:  # multimodal wrapper: the text model is in text_config
            d = d.get("text_config", d)
            if not isinstance(d, dict):
                raise ModelConfigError(f"config.json text_config must be a JSON object, got {_json_kind(d)}")
            d = dict(d)
            d.setdefault("model_type", _WRAPPERS[mt])
            mt = d["model_type"]
        if mt not in MODEL_TYPES:
            raise ModelConfigError(f"config model_type {mt!r} is not supported (expected one of {MODEL_TYPES})")
        _check_fields(d)
        try:
            n = d["num_hidden_layers"]
            types = d.get("layer_types")
            if types is None:
                interval = d.get("full_attention_interval", 4)
                types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
            if (
                not isinstance(types, list)
                or len(types) != n
                or any(t not in ("linear_attention", "full_attention") for t in types)
            ):
                raise ModelConfigError(
                    f"layer_types must list {n} 'linear_attention'/'full_attention' entries, got {types}"
                )
            theta, partial, yarn = read_rope(d)
            act = d.get("hidden_act", "silu")
            if act != "silu":
                raise ModelConfigError(
                    f"config.json hidden_act {act!r} is not supported (Qwen3-Next / Qwen3.5 use 'silu')"
                )
            if d.get("attn_output_gate", True) is not True:
                raise ModelConfigError(
                    "config.json attn_output_gate=false is not supported (the attention output is gated)"
                )
            if d.get("use_sliding_window"):
                raise ModelConfigError("config.json use_sliding_window=true is not supported (full attention only)")
            if d.get("dual_chunk_attention_config"):
                raise ModelConfigError(
                    "config.json dual_chunk_attention_config is not supported (plain full attention)"
                )
            eos = d.get("eos_token_id")
            cfg = cls(
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
                eos_token_id=_eos(eos, d["vocab_size"]),
                mtp_num_hidden_layers=d.get("mtp_num_hidden_layers", d.get("num_nextn_predict_layers", 0)),
                max_position_embeddings=d.get("max_position_embeddings"),
            )  # fmt: skip
            _ = cfg.gdn_shape  # the head geometry the kernels run (HV a multiple of H, ...), checked now
            _check_model(d, cfg)
            return cfg
        except KeyError as e:
            raise ModelConfigError(f"config.json lacks the field {e.args[0]!r}") from e
        except ModelConfigError:
            raise
        except (ValueError, TypeError) as e:  # a RoPE field, a head geometry the ops refuse, ...
            raise ModelConfigError(str(e)) from e

    @classmethod
    def from_file(cls, path: str | Path) -> ModelConfig:
        """A model folder or its config.json. ``FileNotFoundError`` when there is none; ``ModelConfigError``
        (a ``ValueError``) naming the file when it is not a JSON object replayssm can run."""
        p = Path(path)
        if p.is_dir():
            p = p / "config.json"
        if not p.is_file():
            raise FileNotFoundError(f"no config.json at {p}")
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            hint = "" if p.name == "config.json" else " (a model is a folder holding config.json)"
            raise ModelConfigError(f"{p} is not a JSON config: {e}{hint}") from None
        try:
            cfg = cls.from_dict(d)
        except ModelConfigError as e:
            raise ModelConfigError(f"{p}: {str(e).removeprefix('config.json ')}") from e
        gen = p.parent / "generation_config.json"
        if cfg.eos_token_id is None and gen.is_file():  # HF checkpoints often name their end tokens only there
            cfg = replace(cfg, eos_token_id=_generation_eos(gen, cfg.vocab_size))
        return cfg


def _generation_eos(path: Path, vocab: int) -> tuple[int, ...] | None:
    """``eos_token_id`` of a generation_config.json (read where config.json names no end token): a
    ``ModelConfigError`` naming the file when it is not a JSON object or the field is not token ids."""
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelConfigError(f"{path} is not JSON: {e}") from None
    if not isinstance(d, dict):
        raise ModelConfigError(f"{path}: must hold a JSON object, got {_json_kind(d)}")
    try:
        return _eos(d.get("eos_token_id"), vocab)
    except ModelConfigError as e:
        raise ModelConfigError(f"{path}: {str(e).removeprefix('config.json ')}") from None


def _check_model(d: dict, cfg: ModelConfig) -> None:
    """What a model built from ``cfg`` needs beyond each field's own type: flags that are JSON booleans, a norm
    epsilon > 0, layer indices that exist, heads that group, a GDN layer, a conv kernel of 2 or more, a ``top_k``
    within the experts (the MLP sizes: ``ModelConfig.check_buildable``; ``bos_token_id`` is never read)."""
    for name in ("attention_bias", "tie_word_embeddings", "norm_topk_prob"):
        if name in d and not isinstance(d[name], bool):
            raise ModelConfigError(f"config.json field {name!r} must be true or false, got {d[name]!r}")
    eps = cfg.rms_norm_eps
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise ModelConfigError(f"config.json field 'rms_norm_eps' must be a number > 0, got {eps!r}")
    n = cfg.num_layers
    only = d.get("mlp_only_layers", [])
    if not isinstance(only, list) or any(not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n for i in only):
        raise ModelConfigError(f"config.json field 'mlp_only_layers' must list layer indices in [0, {n}), got "
                               f"{only!r}")  # fmt: skip
    if cfg.num_heads % cfg.num_kv_heads:
        raise ModelConfigError(f"config.json num_attention_heads={cfg.num_heads} must be a multiple of "
                               f"num_key_value_heads={cfg.num_kv_heads}")  # fmt: skip
    if cfg.conv_kernel < 2:
        raise ModelConfigError(f"config.json linear_conv_kernel_dim must be >= 2, got {cfg.conv_kernel}")
    if not cfg.gdn_layers:
        raise ModelConfigError("config.json has no linear_attention (GDN) layer: replayssm runs GDN hybrids")
    moe = [i for i in range(n) if cfg.is_moe_layer(i)]
    if moe and not 1 <= cfg.top_k <= cfg.num_experts:
        raise ModelConfigError(f"config.json num_experts_per_tok={cfg.top_k} must be from 1 to num_experts="
                               f"{cfg.num_experts}")  # fmt: skip


def _eos(value, vocab):
    """config.json's ``eos_token_id`` -> a tuple of end tokens (None when absent): one token id, or a list of them
    (generation ends at any), each an integer in [0, vocab_size)."""
    if value is None:
        return None
    ids = value if isinstance(value, list) else [value]
    if not ids or any(not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab for t in ids):
        raise ModelConfigError(f"config.json eos_token_id must be a token id or a list of them, each in [0, "
                               f"vocab_size={vocab}), got {value!r}")  # fmt: skip
    return tuple(ids)
