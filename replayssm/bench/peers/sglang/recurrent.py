"""SGLang's recurrent speculative verify (the engine without a ReplaySSM flag), releases 0.5.16 and 0.5.23.

Per layer, ``fused_sigmoid_gating_delta_rule_update`` with ``disable_state_update=True`` writes the
state after every window token into the layer's ``intermediate_ssm`` [max_batch + 1, T, HV, V, K]
fp32, row ``i`` of the batch at ``intermediate_state_indices[i] = i``, reading the pool ``temporal``
at ``slots`` (``gdn_backend.forward_extend`` -> ``TritonGDNKernel.target_verify``: softplus beta 1,
threshold 20, qk l2-norm in kernel, ``cache_steps = T``, no tree mask, default scale K**-0.5; in
0.5.23 the launch picks BV=4 / one warp for <= 64 rows on SM90). After acceptance the engine calls
``fused_mamba_state_scatter_with_mask(temporal, intermediate_ssm, slots, num_accepted - 1)`` once for
all layers (``scatter_mamba_states_after_mtp_verify``): ``temporal[l, slot_i] = intermediate[l, i,
num_accepted_i - 1]``, skipping rows with a negative step or slot. That wrapper refuses CPU tensors; on
the CPU the peer does the same copy with torch indexing, as SGLang 0.5.23's engine does there.
"""

from __future__ import annotations

import torch

from .base import SGLangPeer


class SGLangRecurrentVerify(SGLangPeer):
    role = "recurrent"
    releases = ("0.5.16", "0.5.23")

    def __init__(self, case, kernels):
        super().__init__(case, kernels)
        geo = self.geo
        self.temporal = self.state_pool()
        self.intermediate = torch.zeros(self.layers, self.B + 1, self.T, geo.HV, geo.V, geo.K, device=self.device)
        self.rows = torch.arange(self.B, dtype=torch.int32, device=self.device)
        self.outputs = [None] * self.layers

    def __call__(self) -> None:
        x = self.x
        for layer in range(self.layers):
            o = self.kernels.fused_sigmoid_gating_delta_rule_update(
                A_log=x["A_log"], a=x["a"], dt_bias=x["dt_bias"], softplus_beta=1.0, softplus_threshold=20.0,
                q=x["q"].unsqueeze(0), k=x["k"].unsqueeze(0), v=x["v"].unsqueeze(0), b=x["b"],
                initial_state_source=self.temporal[layer], initial_state_indices=x["slots"],
                use_qk_l2norm_in_kernel=True, cu_seqlens=x["cu_seqlens"], is_kda=False, disable_state_update=True,
                intermediate_states_buffer=self.intermediate[layer], intermediate_state_indices=self.rows,
                cache_steps=self.T, retrieve_parent_token=None,
            )  # fmt: skip
            self.outputs[layer] = o.view(x["v"].shape)  # SGLang's wrapper allocates the output
        self.scatter(self.case.accept() - 1)

    def scatter(self, steps: torch.Tensor) -> None:
        slots = self.x["slots"]
        if self.temporal.is_cuda:
            self.kernels.fused_mamba_state_scatter_with_mask(self.temporal, self.intermediate, slots, steps)
            return
        keep = ((steps >= 0) & (slots >= 0)).nonzero().squeeze(1)
        self.temporal[:, slots[keep].long()] = self.intermediate[:, keep, steps[keep].long()]

    def committed(self, layer: int) -> torch.Tensor:
        rows = self.temporal[layer].index_select(0, self.x["slots"].long().clamp(min=0))
        return torch.where(self.live_rows(), rows, 0.0)
