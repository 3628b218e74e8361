"""Gated full attention (Qwen3-Next / Qwen3.5): per-head output gate, zero-centred q/k norms, partial RoPE
(default or YaRN), GQA."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..ops.qk_norm_rope import qk_norm_rope, qk_norm_rope_kv
from ..state.kv import KVCache
from .config import ModelConfig
from .layers import RMSNorm, apply_rope, fuse_linears, is_fused
from .rope import RotaryEmbedding
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
        self.rope = RotaryEmbedding(cfg.rotary_dim, cfg.rope_theta, cfg.rope_scaling)
        self.index = attn_index
        self.eps = cfg.rms_norm_eps
        self._qkv: torch.Tensor | None = None
        self.rope_cache: list | None = None  # shared by the model's attention layers: [positions, cos, sin]

    def _rope(self, positions: torch.Tensor):
        """cos, sin [N, rotary_dim] of ``positions``; computed once per step when the layers share a cache (the
        same positions tensor reaches every layer of a step)."""
        c = self.rope_cache
        if c and c[0] is positions:
            return c[1], c[2]
        cos, sin = self.rope(positions)
        if c is not None:
            c[:] = [positions, cos, sin]
        return cos, sin

    def fuse_(self) -> None:
        if self.q_proj.bias is None and not is_fused(self._qkv, self.q_proj):
            self._qkv = fuse_linears(self.q_proj, self.k_proj, self.v_proj)

    def _split(self, qkv: torch.Tensor):
        """The fused projection [N, (2 nH + 2 nKV) hd] -> views q [N, nH, hd], gate [N, nH, hd], k, v [N, nKV, hd]."""
        N, nH, nKV, hd = qkv.shape[0], self.nH, self.nKV, self.hd
        qg = qkv[:, : 2 * nH * hd].view(N, nH, 2 * hd)
        k = qkv[:, 2 * nH * hd : (2 * nH + nKV) * hd].view(N, nKV, hd)
        return qg[..., :hd], qg[..., hd:], k, qkv[:, (2 * nH + nKV) * hd :].view(N, nKV, hd)

    def project(self, x: torch.Tensor, positions: torch.Tensor):
        """x [N, D], positions [N] -> q [N, nH, hd], k [N, nKV, hd] (normed, rotated), v [N, nKV, hd] (may be a
        strided view), gate [N, nH * hd]."""
        N, nH, nKV, hd = x.shape[0], self.nH, self.nKV, self.hd
        cos, sin = self._rope(positions)
        if is_fused(self._qkv, self.q_proj):  # one GEMM, then norm + rotary of q and k in one kernel each
            q, gate, k, v = self._split(F.linear(x, self._qkv))
            q = qk_norm_rope(q, self.q_norm.weight, cos, sin, eps=self.eps)
            return q, qk_norm_rope(k, self.k_norm.weight, cos, sin, eps=self.eps), v, gate.reshape(N, -1)
        qg = self.q_proj(x).view(N, nH, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:].reshape(N, -1)
        k = self.k_norm(self.k_proj(x).view(N, nKV, hd))
        v = self.v_proj(x).view(N, nKV, hd)
        return apply_rope(self.q_norm(q), cos, sin), apply_rope(k, cos, sin), v, gate

    def _step_fused(self, x: torch.Tensor, step: Step, kv: KVCache, index: torch.Tensor) -> torch.Tensor:
        """A decode or verify step with the fused projection in three launches besides the GEMMs: norm + rotary of
        q and k with the KV write (``qk_norm_rope_kv``), paged attention with the output gate applied inside
        (``paged_attention(gate=)``), and the output projection."""
        N, hd = x.shape[0], self.hd
        cos, sin = self._rope(step.positions)
        q, gate, k, v = self._split(F.linear(x, self._qkv))
        kc, vc = kv.flat(self.index)
        q = qk_norm_rope_kv(
            q, k, v, self.q_norm.weight, self.k_norm.weight, cos, sin, kc, vc, index, eps=self.eps, validate=False
        )
        o = kv.attend(self.index, q, step.kv_rows, step.start, T=step.T, scale=hd**-0.5, gate=gate)
        return self.o_proj(o.reshape(N, -1))

    def output(self, o: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """Attention output o [N, nH * hd] -> [N, D], gated per head."""
        return self.o_proj(o * torch.sigmoid(gate))

    def forward(self, x: torch.Tensor, step: Step, kv: KVCache) -> torch.Tensor:
        N, hd = x.shape[0], self.hd
        index = step.kv_index if step.kv_index is not None else kv.token_index(step.kv_rows, step.positions)
        if step.kind is not StepKind.PREFILL and is_fused(self._qkv, self.q_proj):
            return self._step_fused(x, step, kv, index)
        q, k, v, gate = self.project(x, step.positions)
        B, T = step.B, step.T
        kv.write(self.index, k, v, index)
        if step.kind is StepKind.PREFILL:  # a fresh slot: attend to the prompt itself
            qq, kk, vv = (t.reshape(B, T, -1, hd).transpose(1, 2) for t in (q, k, v))
            causal = torch.arange(T, device=x.device)
            mask = causal[None, :] <= causal[:, None]
            o = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask, scale=hd**-0.5, enable_gqa=True)
            o = o.transpose(1, 2)
        else:  # the committed past and the causal window, read page by page
            o = kv.attend(self.index, q, step.kv_rows, step.start, T=T, scale=hd**-0.5)
        return self.output(o.reshape(N, -1), gate)
