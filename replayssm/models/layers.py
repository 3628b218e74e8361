"""Small building blocks shared by the hybrid models: norms, rotary embedding, MLP, sparse MoE.

Norms and activations run through ``replayssm.ops`` (one fused kernel each on the GPU; on the CPU their
references, which are the plain PyTorch expressions). ``fuse_linears`` lets sibling projections that read the
same input run as one GEMM: it re-points their weights at slices of one concatenated tensor (no extra
memory), after the model sits on its final device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..ops.moe import moe_gemm, moe_route
from ..ops.norms import add_rms_norm, rms_norm, rms_norm_gated, silu_mul


def fuse_linears(*linears: nn.Linear) -> torch.Tensor:
    """One [sum of out features, in] weight whose row blocks are the linears' weights (now views of it)."""
    fused = torch.cat([m.weight.detach() for m in linears], 0)
    off = 0
    for m in linears:
        n = m.weight.shape[0]
        m.weight = nn.Parameter(fused[off : off + n], requires_grad=m.weight.requires_grad)
        off += n
    return fused


def is_fused(fused: torch.Tensor | None, first: nn.Linear) -> bool:
    """``fused`` still backs ``first``'s weight (a later ``.to()`` gives every parameter its own storage)."""
    return fused is not None and first.weight.data_ptr() == fused.data_ptr()


class RMSNorm(nn.Module):
    """Zero-centred RMSNorm used by Qwen3-Next / Qwen3.5: ``x / rms(x) * (1 + w)``, computed in fp32."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, eps=self.eps)

    def add(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x + residual, norm of it), in one pass."""
        return add_rms_norm(x, residual, self.weight, eps=self.eps)


class RMSNormGated(nn.Module):
    """GDN output norm: ``w * (x / rms(x)) * silu(z)`` per value head (plain weight, not 1 + w)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """x [N, HV, V]; z [N, HV, V] (rows may be slices of a wider tensor)."""
        return rms_norm_gated(x, z, self.weight, eps=self.eps)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [N, heads, hd]: rotate the first ``cos.shape[-1]`` dims of every head, keep the rest."""
    r = cos.shape[-1]
    xr, xp = x[..., :r], x[..., r:]
    half = r // 2
    rot = torch.cat([-xr[..., half:], xr[..., :half]], -1)
    out = xr.float() * cos[:, None, :] + rot.float() * sin[:, None, :]
    return torch.cat([out.to(x.dtype), xp], -1)


class MLP(nn.Module):
    def __init__(self, hidden: int, inner: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)
        self._gate_up: torch.Tensor | None = None

    def fuse_(self) -> None:
        if not is_fused(self._gate_up, self.gate_proj):
            self._gate_up = fuse_linears(self.gate_proj, self.up_proj)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if is_fused(self._gate_up, self.gate_proj):
            return self.down_proj(silu_mul(F.linear(x, self._gate_up)))
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Experts(nn.Module):
    """Every expert's MLP weights in two stacked tensors (Hugging Face's fused names): gate_up_proj [E, 2I, D]
    (gate rows, then up rows, per expert) and down_proj [E, D, I]."""

    def __init__(self, num_experts: int, hidden: int, inner: int):
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * inner, hidden))
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden, inner))
        self.num_experts = num_experts

    def forward(self, x: torch.Tensor, expert_ids: torch.Tensor) -> torch.Tensor:
        """x [N, D]; expert_ids [N, k]. Returns each (token, slot)'s expert output [N, k, D]. Device-only
        routing (``ops.moe_route``): capturable in a CUDA graph."""
        N, k = expert_ids.shape
        pair_rows, offsets, order = moe_route(expert_ids, self.num_experts, validate=False)  # (topk's ids)
        gate_up = moe_gemm(x, self.gate_up_proj, pair_rows, offsets, num_pairs=N * k, validate=False)  # [P, 2I]
        y = moe_gemm(silu_mul(gate_up), self.down_proj, None, offsets, num_pairs=N * k, validate=False)  # [P, D]
        return torch.empty_like(y).index_copy_(0, order, y).view(N, k, -1)


class SparseMoE(nn.Module):
    """Softmax top-k router over ``experts`` plus a sigmoid-gated shared expert."""

    def __init__(self, hidden: int, num_experts: int, top_k: int, inner: int, shared_inner: int, norm_topk: bool):
        super().__init__()
        self.gate = nn.Linear(hidden, num_experts, bias=False)
        self.experts = Experts(num_experts, hidden, inner)
        self.shared_expert = MLP(hidden, shared_inner)
        self.shared_expert_gate = nn.Linear(hidden, 1, bias=False)
        self.top_k, self.norm_topk = top_k, norm_topk

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = F.softmax(self.gate(x), dim=-1, dtype=torch.float32)
        weights, idx = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk:
            weights = weights / weights.sum(-1, keepdim=True)
        routed = (self.experts(x, idx) * weights.to(x.dtype)[..., None]).sum(1)
        return routed + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
