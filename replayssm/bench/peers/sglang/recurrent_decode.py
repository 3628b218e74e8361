"""SGLang's plain recurrent decode (no ReplaySSM flag, one token per row), releases 0.5.16 and 0.5.23.

On CUDA the engine's decode takes the packed path (``gdn_backend.forward_decode`` ->
``TritonGDNKernel.packed_decode``): per layer, ``fused_recurrent_gated_delta_rule_packed_decode`` on
the packed ``mixed_qkv = [q | k | v]`` straight from the conv, ``scale = K**-0.5``, qk l2-norm in
kernel, the pool ``temporal`` [layers, S+1, HV, V, K] fp32 read and written in place at ``slots``
(padding rows output zeros), ``out`` [B, 1, HV, V]. It rounds beta to the activation dtype.
"""

from __future__ import annotations

import torch

from .base import SGLangPeer


class SGLangRecurrentDecode(SGLangPeer):
    role = "recurrent_decode"
    releases = ("0.5.16", "0.5.23")

    def __init__(self, case, kernels):
        super().__init__(case, kernels)
        if self.T != 1:
            raise ValueError(f"the decode takes one token per row, the case has T={self.T}")
        self.temporal = self.state_pool()

    def __call__(self) -> None:
        x = self.x
        for layer in range(self.layers):
            self.kernels.packed_decode(
                mixed_qkv=x["mixed_qkv"], a=x["a"], b=x["b"], A_log=x["A_log"], dt_bias=x["dt_bias"],
                scale=self.scale, initial_state=self.temporal[layer], out=self.outputs[layer].unsqueeze(1),
                ssm_state_indices=x["slots"], use_qk_l2norm_in_kernel=True,
            )  # fmt: skip

    def committed(self, layer: int) -> torch.Tensor:
        rows = self.temporal[layer].index_select(0, self.x["slots"].long().clamp(min=0))
        return torch.where(self.live_rows(), rows, 0.0)
