"""Gated DeltaNet layer of Qwen3-Next / Qwen3.5, running its state through a ``GDNStateBackend``.

Prefill computes the prompt's outputs and final state (fla-core's chunked kernel on the GPU when it
is installed, else replayssm's recurrent op) and hands the state to the pool; verify and decode
steps go through the state backend, which decides how state is kept ("replay" or "recurrent").
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import gdn_recurrent
from ..ops.conv import causal_conv1d_prefill
from ..state.backend import GDNStateBackend
from .config import ModelConfig
from .layers import RMSNormGated, fuse_linears, is_fused
from .step import Step, StepKind

try:  # optional GPU prefill path; always called by keyword (its positional order is a trap)
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as _fla_chunk
except Exception:  # noqa: BLE001 - any import failure means "not available"
    _fla_chunk = None


class GatedDeltaNet(nn.Module):
    def __init__(self, cfg: ModelConfig, gdn_index: int):
        super().__init__()
        D, H, HV, K, V = cfg.hidden_size, cfg.H, cfg.HV, cfg.K, cfg.V
        C = cfg.conv_channels
        self.next_layout = cfg.model_type == "qwen3_next"
        if self.next_layout:  # projections grouped per key head
            self.in_proj_qkvz = nn.Linear(D, 2 * H * K + 2 * HV * V, bias=False)
            self.in_proj_ba = nn.Linear(D, 2 * HV, bias=False)
        else:
            self.in_proj_qkv = nn.Linear(D, C, bias=False)
            self.in_proj_z = nn.Linear(D, HV * V, bias=False)
            self.in_proj_b = nn.Linear(D, HV, bias=False)
            self.in_proj_a = nn.Linear(D, HV, bias=False)
        self.conv1d = nn.Conv1d(C, C, cfg.conv_kernel, groups=C, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(HV))
        self.A_log = nn.Parameter(torch.zeros(HV))
        self.norm = RMSNormGated(V, cfg.rms_norm_eps)
        self.out_proj = nn.Linear(HV * V, D, bias=False)
        self.H, self.HV, self.K, self.V, self.C = H, HV, K, V, C
        self.index = gdn_index
        self._qkvz: torch.Tensor | None = None

    def fuse_(self) -> None:
        # q|k|v, z, b and a in one GEMM; the conv and the output norm read its slices in place. b and a alone
        # would be two [D, HV] GEMMs, each a split-K launch with its reduction (bench/NOTES.md, 2026-12-01, fifth)
        if not self.next_layout and not is_fused(self._qkvz, self.in_proj_qkv):
            self._qkvz = fuse_linears(self.in_proj_qkv, self.in_proj_z, self.in_proj_b, self.in_proj_a)

    def _project(self, x: torch.Tensor):
        """x [N, D] -> mixed q|k|v [N, C] (conv input), z [N, HV, V], b, a [N, HV]."""
        N, H, HV, K, V = x.shape[0], self.H, self.HV, self.K, self.V
        if not self.next_layout:
            if is_fused(self._qkvz, self.in_proj_qkv):
                p = F.linear(x, self._qkvz)
                z_end = self.C + HV * V
                ba = p[:, z_end:].view(N, 2, HV).transpose(0, 1).contiguous()  # one copy: b and a each contiguous
                return p[:, : self.C], p[:, self.C : z_end].view(N, HV, V), ba[0], ba[1]
            return self.in_proj_qkv(x), self.in_proj_z(x).view(N, HV, V), self.in_proj_b(x), self.in_proj_a(x)
        r = HV // H
        p = self.in_proj_qkvz(x).view(N, H, 2 * K + 2 * r * V)
        q, k, v, z = torch.split(p, [K, K, r * V, r * V], dim=-1)
        ba = self.in_proj_ba(x).view(N, H, 2 * r)
        b, a = ba[..., :r].reshape(N, HV), ba[..., r:].reshape(N, HV)
        mixed = torch.cat([q.reshape(N, -1), k.reshape(N, -1), v.reshape(N, -1)], -1)
        return mixed, z.reshape(N, HV, V), b, a

    def _split(self, mixed: torch.Tensor):
        N = mixed.shape[0]
        q, k, v = torch.split(mixed, [self.H * self.K, self.H * self.K, self.HV * self.V], dim=-1)
        return (q.reshape(N, self.H, self.K).contiguous(), k.reshape(N, self.H, self.K).contiguous(),
                v.reshape(N, self.HV, self.V).contiguous())  # fmt: skip

    def forward(self, x: torch.Tensor, step: Step, pool: GDNStateBackend) -> torch.Tensor:
        mixed, z, b, a = self._project(x)
        b, a = b.contiguous(), a.contiguous()
        weight = self.conv1d.weight[:, 0, :]
        kw = dict(A_log=self.A_log, dt_bias=self.dt_bias, slots=step.slots, cu_seqlens=step.cu_seqlens)
        if step.kind is StepKind.PREFILL:
            y, conv_state = causal_conv1d_prefill(mixed, weight, None, step.cu_seqlens)
            q, k, v = self._split(y)
            o, state = self._prefill_delta_rule(q, k, v, a, b, step)
            pool.write_prefill(self.index, step.slots, state, conv_state)
        else:
            HK, N = self.H * self.K, x.shape[0]
            q, k, v = pool.conv_update(self.index, mixed, weight=weight, bias=None, slots=step.slots,
                                       cu_seqlens=step.cu_seqlens, split=(HK, HK, self.HV * self.V))  # fmt: skip
            q, k, v = q.view(N, self.H, self.K), k.view(N, self.H, self.K), v.view(N, self.HV, self.V)
            fn = pool.decode if step.kind is StepKind.DECODE else pool.verify
            o = fn(self.index, q, k, v, a, b, **kw)
        return self.out_proj(self.norm(o, z).reshape(x.shape[0], -1))

    def _prefill_delta_rule(self, q, k, v, a, b, step: Step):
        """Outputs [N, HV, V] and final states [B, HV, V, K] fp32 of whole prompts from a zero state."""
        B = step.slots.shape[0]
        global _fla_chunk
        if _fla_chunk is not None and q.is_cuda:
            from ..ops import gdn_gating

            g, beta = gdn_gating(a, b, A_log=self.A_log, dt_bias=self.dt_bias)
            try:
                o, state = _fla_chunk(q=q[None], k=k[None], v=v[None], g=g[None], beta=beta[None],
                                      scale=self.K**-0.5, initial_state=None, output_final_state=True,
                                      use_qk_l2norm_in_kernel=True, state_v_first=True,
                                      cu_seqlens=step.cu_seqlens.long())  # fmt: skip
                return o[0], state.float()
            except Exception as e:  # noqa: BLE001 - an incompatible fla build: fall back, say so once
                warnings.warn(f"fla-core prefill failed ({e!r:.200}); using replayssm's recurrent kernel", stacklevel=2)
                _fla_chunk = None
        state = torch.zeros(B, self.HV, self.V, self.K, dtype=torch.float32, device=q.device)
        rows = torch.arange(B, dtype=torch.int32, device=q.device)
        o = gdn_recurrent(q, k, v, a, b, A_log=self.A_log, dt_bias=self.dt_bias, state=state, slots=rows,
                          cu_seqlens=step.cu_seqlens)  # fmt: skip
        return o, state
