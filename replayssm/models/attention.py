"""Gated full attention (Qwen3-Next / Qwen3.5): per-head output gate, zero-centred q/k norms, partial RoPE, GQA."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..state.kv import KVCache
from .config import ModelConfig
from .layers import RMSNorm, apply_rope, rope_cos_sin
from .step import Step, StepKind


class GatedAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, attn_index: int):
        super().__init__()
        D, nH, nKV, hd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(D, nH * hd * 2, bias=cfg.attention_bias)  # per head [query | gate]
        self.k_proj = nn.Linear(D, nKV * hd, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(D, nKV * hd, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(nH * hd, D, bias=cfg.attention_bias)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.nH, self.nKV, self.hd = nH, nKV, hd
        self.rotary_dim, self.theta = cfg.rotary_dim, cfg.rope_theta
        self.index = attn_index

    def project(self, x: torch.Tensor, positions: torch.Tensor):
        """x [N, D], positions [N] -> q [N, nH, hd], k, v [N, nKV, hd] (normed, rotated), gate [N, nH * hd]."""
        N = x.shape[0]
        qg = self.q_proj(x).view(N, self.nH, 2 * self.hd)
        q, gate = qg[..., : self.hd], qg[..., self.hd :].reshape(N, -1)
        k = self.k_norm(self.k_proj(x).view(N, self.nKV, self.hd))
        v = self.v_proj(x).view(N, self.nKV, self.hd)
        cos, sin = rope_cos_sin(positions, self.rotary_dim, self.theta)
        return apply_rope(self.q_norm(q), cos, sin), apply_rope(k, cos, sin), v, gate

    def output(self, o: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """Attention output o [N, nH * hd] -> [N, D], gated per head."""
        return self.o_proj(o * torch.sigmoid(gate))

    def forward(self, x: torch.Tensor, step: Step, kv: KVCache) -> torch.Tensor:
        N = x.shape[0]
        q, k, v, gate = self.project(x, step.positions)
        B, T = step.B, step.T
        q, k, v = (t.view(B, T, -1, self.hd) for t in (q, k, v))
        ck, cv = kv.k[self.index], kv.v[self.index]
        pos = step.start[:, None] + torch.arange(T, device=x.device)[None, :]  # [B, T]
        ck[step.kv_rows[:, None], pos] = k
        cv[step.kv_rows[:, None], pos] = v
        prefill = step.kind is StepKind.PREFILL
        if prefill:  # a fresh slot: attend to the prompt itself
            keys, vals, L = k, v, T
        elif step.contiguous:
            keys, vals, L = ck[:B], cv[:B], kv.max_len
        else:
            keys, vals, L = ck[step.kv_rows], cv[step.kv_rows], kv.max_len
        key_pos = torch.arange(L, device=x.device)
        if prefill:
            mask = key_pos[None, None, :] <= torch.arange(T, device=x.device)[None, :, None]
        else:
            mask = key_pos[None, None, :] <= pos[:, :, None]  # [B, T, L]: committed past + causal window
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2), keys.transpose(1, 2), vals.transpose(1, 2), attn_mask=mask[:, None],
            scale=self.hd**-0.5, enable_gqa=True,
        )  # fmt: skip
        return self.output(o.transpose(1, 2).reshape(N, -1), gate)
