"""Rotary position embedding of the attention layers: the default RoPE and YaRN, read from a ``config.json``.

Qwen3.5 keeps RoPE in ``rope_parameters`` (``rope_type``, ``rope_theta``, ``partial_rotary_factor``, for
YaRN ``factor`` and ``original_max_position_embeddings``); Qwen3-Next and older configs keep ``rope_theta``
and ``partial_rotary_factor`` at the top level and scaling in a legacy ``rope_scaling`` block. Both are
read. The frequencies follow transformers' ``_compute_yarn_parameters`` operation for operation (checked
against transformers in ``tests/models``). A RoPE type or key that would change the math and is not
implemented here is refused when the config is read, never ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

ROPE_TYPES = ("default", "yarn")
# Keys that do not change the math of text-only inputs (multimodal RoPE sections coincide for text positions).
_COMMON_KEYS = {"rope_type", "type", "rope_theta", "partial_rotary_factor", "mrope_section", "mrope_interleaved"}
_YARN_KEYS = {"factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow", "mscale",
              "mscale_all_dim", "truncate"}  # fmt: skip


@dataclass(frozen=True)
class YaRN:
    """YaRN scaling: frequencies interpolated by ``factor`` below the ``beta_slow`` rotations boundary,
    kept above ``beta_fast``, ramped in between; cos and sin scaled by ``attention_factor``."""

    factor: float
    original_max_position_embeddings: int
    attention_factor: float
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    truncate: bool = True


def _number(name: str, val, *, positive: bool = True) -> float:
    if isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(val):
        raise ValueError(f"config.json RoPE field {name} must be a finite number, got {val!r}")
    if positive and val <= 0:
        raise ValueError(f"config.json RoPE field {name} must be > 0, got {val!r}")
    return float(val)


def _first(*vals):
    """The first value that is not None (saved configs write absent fields as null)."""
    return next((v for v in vals if v is not None), None)


def _mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def read_rope(d: dict) -> tuple[float, float, YaRN | None]:
    """(rope_theta, partial_rotary_factor, YaRN or None) of a text config dict; raises ``ValueError`` on a
    RoPE it does not implement."""
    params, legacy = d.get("rope_parameters"), d.get("rope_scaling")
    for name, val in (("rope_parameters", params), ("rope_scaling", legacy)):
        if val is not None and not isinstance(val, dict):
            raise ValueError(f"config.json {name} must be an object, got {val!r}")
    if params and legacy:
        raise ValueError("config.json has both rope_parameters and a legacy rope_scaling block; put the scaling "
                         "fields (rope_type, factor, ...) into rope_parameters")  # fmt: skip
    p = dict(params or legacy or {})
    rope_type = p.get("rope_type", p.get("type", "default"))
    if "rope_type" in p and "type" in p and p["type"] != p["rope_type"]:
        raise ValueError(f"config.json RoPE gives rope_type={p['rope_type']!r} and type={p['type']!r}")
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"config.json rope_type {rope_type!r} is not supported (supported: {', '.join(ROPE_TYPES)})")
    allowed = _COMMON_KEYS | (_YARN_KEYS if rope_type == "yarn" else set())
    extra = sorted(set(p) - allowed)
    if extra:
        hint = " (YaRN fields: set rope_type to 'yarn')" if set(extra) <= _YARN_KEYS else ""
        raise ValueError(f"config.json RoPE fields {extra} are not supported with rope_type {rope_type!r}{hint}")
    theta = _number("rope_theta", _first(p.get("rope_theta"), d.get("rope_theta"), 10000.0))
    partial = _number("partial_rotary_factor", _first(p.get("partial_rotary_factor"), d.get("partial_rotary_factor"),
                                                      0.25))  # fmt: skip
    if partial > 1:
        raise ValueError(f"config.json partial_rotary_factor must be in (0, 1], got {partial}")
    if rope_type == "default":
        return theta, partial, None
    # as transformers: a top-level original_max_position_embeddings (Phi-3 style) wins over the one in the block
    original = _first(d.get("original_max_position_embeddings"), p.get("original_max_position_embeddings"),
                      d.get("max_position_embeddings"))  # fmt: skip
    if isinstance(original, bool) or not isinstance(original, int) or original < 1:
        raise ValueError(f"config.json YaRN needs original_max_position_embeddings (a positive int), got {original!r}")
    factor = p.get("factor")
    if factor is None:
        factor = _number("max_position_embeddings", d.get("max_position_embeddings")) / original
    factor = _number("factor", factor)
    if factor < 1:
        raise ValueError(f"config.json YaRN factor must be >= 1, got {factor}")
    attention_factor = p.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = p.get("mscale"), p.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            ms, msa = _number("mscale", mscale), _number("mscale_all_dim", mscale_all_dim)
            attention_factor = _mscale(factor, ms) / _mscale(factor, msa)
        else:
            attention_factor = _mscale(factor)
    truncate = p.get("truncate", True)
    if not isinstance(truncate, bool):
        raise ValueError(f"config.json YaRN truncate must be true or false, got {truncate!r}")
    yarn = YaRN(factor=factor, original_max_position_embeddings=original,
                attention_factor=_number("attention_factor", attention_factor),
                beta_fast=_number("beta_fast", p.get("beta_fast") or 32), beta_slow=_number("beta_slow",
                p.get("beta_slow") or 1), truncate=truncate)  # fmt: skip
    return theta, partial, yarn


def rope_frequencies(rotary_dim: int, theta: float, yarn: YaRN | None = None) -> tuple[torch.Tensor, float]:
    """(inv_freq [rotary_dim // 2] fp32 on the CPU, cos/sin scale) of the default RoPE or YaRN."""
    # on the CPU explicitly: models are built under a meta-device context by the loader
    pos_freqs = theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32, device="cpu") / rotary_dim)
    if yarn is None:
        return 1.0 / pos_freqs, 1.0
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (yarn.factor * pos_freqs)

    def correction_dim(rotations: float) -> float:  # the dimension that turns `rotations` times in the context
        turns = math.log(yarn.original_max_position_embeddings / (rotations * 2 * math.pi))
        return rotary_dim * turns / (2 * math.log(theta))

    low, high = correction_dim(yarn.beta_fast), correction_dim(yarn.beta_slow)
    if yarn.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if low == high:
        high += 0.001  # avoid a zero-width ramp
    ramp = torch.clamp((torch.arange(rotary_dim // 2, dtype=torch.float32, device="cpu") - low) / (high - low), 0, 1)
    keep = 1 - ramp  # 1: extrapolate (high frequencies), 0: interpolate (low frequencies)
    return interpolation * (1 - keep) + extrapolation * keep, yarn.attention_factor


class RotaryEmbedding:
    """cos, sin of the attention layers' RoPE for absolute positions (non-interleaved, rotate_half style).
    Frequencies are computed once on the CPU and cached per device (so nothing is copied inside a CUDA graph
    after the first, uncaptured, call)."""

    def __init__(self, rotary_dim: int, theta: float, yarn: YaRN | None = None):
        self.inv_freq, self.scale = rope_frequencies(rotary_dim, theta, yarn)
        self._on: dict[torch.device, torch.Tensor] = {}

    def __call__(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [N] -> cos, sin [N, rotary_dim] fp32."""
        inv = self._on.get(positions.device)
        if inv is None:
            inv = self._on[positions.device] = self.inv_freq.to(positions.device)
        f = positions.float()[:, None] * inv[None, :]
        emb = torch.cat([f, f], -1)
        if self.scale == 1.0:
            return emb.cos(), emb.sin()
        return emb.cos() * self.scale, emb.sin() * self.scale
