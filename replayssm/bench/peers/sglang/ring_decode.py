"""SGLang's ReplaySSM plain decode ring (``--enable-linear-replayssm``), releases 0.5.16 and 0.5.23.

The kernel file is byte-identical in both releases. Buffers: ``temporal`` [layers, S+1, HV, V, K]
fp32 is the checkpoint (read every step, written on a flush); per layer and slot a *linear* ring of
length ``L`` in the SSM dtype (fp32): ``d`` [HV, L, V], ``k`` [H, L, K], ``g`` [HV, L]; one cursor
``write_pos`` int32 [S+1] per slot, shared by all layers.

A step (``hybrid_linear_attn_backend`` metadata, then ``TritonGDNKernel.packed_decode`` per layer):
the engine snapshots ``write_pos[slots]`` once (padding rows read slot 0), every layer runs
``fused_recurrent_gdn_replayssm_decode`` on the packed ``mixed_qkv = [q | k | v]`` with that per-row
snapshot, ``scale = K**-0.5`` and qk l2-norm in kernel: the output from checkpoint + ring + token, the
token's record appended at ``write_pos``; a row whose snapshot is ``L - 1`` instead folds ring + token
into the checkpoint, open-loop (``d`` records folded with tensor-core dots, not bitwise). Then the
cursor advances: 0 after a flush, else +1. No radix-cache force-flush rows (``force_flush=None``).
"""

from __future__ import annotations

import torch

from .base import SGLangPeer


class SGLangRingDecode(SGLangPeer):
    role = "ring_decode"
    releases = ("0.5.16", "0.5.23")

    def __init__(self, case, kernels):
        super().__init__(case, kernels)
        if self.T != 1:
            raise ValueError(f"the ring decode takes one token per row, the case has T={self.T}")
        geo, L = self.geo, self.L
        self.temporal = self.state_pool()
        self.d = self.pool(geo.HV, L, geo.V, dtype=torch.float32)
        self.k = self.pool(geo.H, L, geo.K, dtype=torch.float32)
        self.g = self.pool(geo.HV, L, dtype=torch.float32)
        self.write_pos = self.cursor(torch.int32)
        self.frozen = None  # fixed per-row cursors of a frozen step

    def __call__(self) -> None:
        x, slots = self.x, self.x["slots"]
        rows = self.frozen if self.frozen is not None else self.write_pos[slots.long().clamp(min=0)]
        for layer in range(self.layers):
            self.kernels.fused_recurrent_gdn_replayssm_decode(
                mixed_qkv=x["mixed_qkv"], a=x["a"], b=x["b"], A_log=x["A_log"], dt_bias=x["dt_bias"],
                scale=self.scale, initial_state=self.temporal[layer], d_cache=self.d[layer],
                k_cache=self.k[layer], g_cache=self.g[layer], out=self.outputs[layer].unsqueeze(1),
                ssm_state_indices=slots, write_pos=rows, force_flush=None, use_qk_l2norm_in_kernel=True,
            )  # fmt: skip
        if self.frozen is None:
            nxt = torch.where(rows == self.L - 1, 0, rows + 1).to(torch.int32)
            self.write_pos.index_copy_(0, torch.where(slots >= 0, slots.long(), self.num_slots), nxt)

    def set_cursors(self, flush: bool) -> int:
        """Every row at ``L - 1`` (folds L-1 records and the token) or ``L - 2`` (reads L-2 records);
        the cursor no longer advances."""
        self.frozen = torch.full((self.B,), self.L - 1 if flush else self.L - 2, dtype=torch.int32, device=self.device)
        return self.L - 1 if flush else 0

    def committed(self, layer: int) -> torch.Tensor:
        """State after each row's last decoded token, reconstructed in fp32 torch from checkpoint and
        ring (the kernel never materialises it): ``exp(G) S0 + sum_j exp(G - P_j) d_j k_j^T``."""
        slots = self.x["slots"]
        idx = slots.long().clamp(min=0)
        written = torch.arange(self.L, device=self.device)[None, None, :] < self.write_pos[idx][:, None, None]
        g = torch.where(written, self.g[layer][idx], 0.0)  # [B, HV, L]
        P = torch.cumsum(g, dim=-1)
        weight = torch.where(written, torch.exp(P[..., -1:] - P), 0.0)
        keys = self.k[layer][idx].repeat_interleave(self.geo.HV // self.geo.H, dim=1)  # [B, HV, L, K]
        h = torch.exp(P[..., -1:])[..., None] * self.temporal[layer][idx]
        h = h + torch.einsum("bhl,bhlv,bhlk->bhvk", weight, self.d[layer][idx], keys)
        return torch.where(self.live_rows(), h, 0.0)
