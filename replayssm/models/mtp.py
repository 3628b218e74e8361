"""The multi-token-prediction (MTP) head of Qwen3-Next / Qwen3.5, with Hugging Face tensor names (``mtp.*``).

One MTP step reads the main model's final-norm hidden state at position ``t`` and the embedding of the
token at ``t + 1``, RMS-normalises each, concatenates them (embedding first), projects back to the
model width with ``fc``, runs one full-attention decoder layer and a final norm, and returns a hidden
state that the main model's LM head turns into a guess for the token at ``t + 2``. Fed back with that
guess, the same head drafts one more token per call. Its attention layer keeps its own KV cache
(positions are the positions of the hidden states it reads); the embedding and LM head are the main
model's.
"""

from __future__ import annotations

import torch
from torch import nn

from .config import ModelConfig
from .layers import RMSNorm
from .model import DecoderLayer


class MTPHead(nn.Module):
    """``forward(hidden, embeds, step, kv)`` -> final-norm hidden [N, D] of the N rows of ``step``.

    hidden: [N, D] final-norm hidden states (the main model's, or this head's own for a chained
    draft); embeds: [N, D] embeddings of the tokens that follow them; ``kv``: a one-layer ``KVCache``
    owned by the drafter. Qwen3-Next MoE checkpoints give the layer a sparse MoE MLP (as their layer 0).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.mtp_num_hidden_layers != 1:
            raise ValueError(f"only one MTP layer is supported, the config has {cfg.mtp_num_hidden_layers}")
        D, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.fc = nn.Linear(2 * D, D, bias=False)
        self.pre_fc_norm_hidden = RMSNorm(D, eps)
        self.pre_fc_norm_embedding = RMSNorm(D, eps)
        self.layers = nn.ModuleList([DecoderLayer(cfg, 0, 0, layer_type="full_attention")])
        self.norm = RMSNorm(D, eps)

    def fuse(self, hidden: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
        """The layer's input [N, D]: ``fc([norm(embeds), norm(hidden)])``."""
        return self.fc(torch.cat([self.pre_fc_norm_embedding(embeds), self.pre_fc_norm_hidden(hidden)], -1))

    def forward(self, hidden: torch.Tensor, embeds: torch.Tensor, step, kv) -> torch.Tensor:
        h, m = self.layers[0](self.fuse(hidden, embeds), step, None, kv)
        return self.norm.add(m, h)[1]
