"""The hybrid causal LM (Qwen3-Next, Qwen3.5 dense and MoE), with Hugging Face tensor names."""

from __future__ import annotations

import torch
from torch import nn

from ..state.backend import GDNStateBackend
from ..state.kv import KVCache
from .attention import GatedAttention
from .config import ModelConfig
from .gdn import GatedDeltaNet
from .gemm import gemm_library
from .layers import MLP, RMSNorm, SparseMoE
from .step import Step


class DecoderLayer(nn.Module):
    """Layer ``i`` of the model (its type and MLP kind from the config); ``layer_type`` overrides the type
    (the MTP head's layer is full attention, with the MLP kind of layer 0)."""

    def __init__(self, cfg: ModelConfig, i: int, mixer_index: int, *, layer_type: str | None = None):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.is_gdn = (layer_type or cfg.layer_types[i]) == "linear_attention"
        if self.is_gdn:
            self.linear_attn = GatedDeltaNet(cfg, mixer_index)
        else:
            self.self_attn = GatedAttention(cfg, mixer_index)
        if cfg.is_moe_layer(i):
            self.mlp = SparseMoE(cfg.hidden_size, cfg.num_experts, cfg.top_k, cfg.moe_intermediate_size,
                                 cfg.shared_expert_intermediate_size, cfg.norm_topk_prob)  # fmt: skip
        else:
            self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, h: torch.Tensor, step: Step, pool: GDNStateBackend, kv: KVCache,
                pending: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """(h, m): the residual stream after this layer is ``h + m``. The add is left to whoever reads the stream
        next (the next layer's input norm, or the final norm), which fuses it into its norm (``RMSNorm.add``:
        the same rounding as a separate add, one kernel less per layer). ``pending``: the previous layer's m."""
        if pending is None:
            x = self.input_layernorm(h)
        else:
            h, x = self.input_layernorm.add(pending, h)
        h, x = self.post_attention_layernorm.add(self.linear_attn(x, step, pool) if self.is_gdn else
                                                 self.self_attn(x, step, kv), h)  # fmt: skip
        return h, self.mlp(x)


class _Body(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        gdn = {i: n for n, i in enumerate(cfg.gdn_layers)}
        attn = {i: n for n, i in enumerate(cfg.attention_layers)}
        self.layers = nn.ModuleList(DecoderLayer(cfg, i, gdn.get(i, attn.get(i))) for i in range(cfg.num_layers))
        rope_cache: list = []  # one cos/sin computation per step for all attention layers
        for layer in self.layers:
            if not layer.is_gdn:
                layer.self_attn.rope_cache = rope_cache
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class HybridLM(nn.Module):
    """``forward(ids, step, pool, kv)`` -> logits [N, vocab] for the N = B*T tokens of a step.

    ``pool`` holds the per-request state of the model's GDN layers, ``kv`` that of its attention layers;
    the model itself holds none. ``step.kind`` says what the pass is (prefill, verify or decode). ``mtp`` is
    the multi-token-prediction head (``models.mtp.MTPHead``, tensors ``mtp.*``) when the config has one and
    it was loaded, else None.
    """

    def __init__(self, cfg: ModelConfig):
        cfg.check_buildable()  # (a config that only plans memory may lack MLP sizes)
        super().__init__()
        self.config = cfg
        self.model = _Body(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        from .mtp import MTPHead  # mtp.py builds its layer from DecoderLayer above

        self.mtp = MTPHead(cfg) if cfg.mtp_num_hidden_layers else None
        self.tie_weights()

    def tie_weights(self) -> None:
        """Share the embedding with the LM head when the config says so (again after ``to_empty``,
        which gives every module its own new parameter)."""
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def fuse_projections(self) -> None:
        """Run sibling projections as one GEMM each (attention q|k|v, MLP gate|up, GDN q|k|v|z|b|a): their weights
        become views of one tensor. Call it once the model is on its final device and dtype (the runner does);
        idempotent."""
        for m in self.modules():
            if m is not self and hasattr(m, "fuse_"):
                m.fuse_()

    def hidden(self, ids: torch.Tensor, step: Step, pool: GDNStateBackend, kv: KVCache) -> torch.Tensor:
        """The final-norm hidden states [N, D] of the step's tokens (what the LM head and the MTP head read)."""
        with gemm_library(ids.shape[0], ids.device):
            h, m = self.model.embed_tokens(ids), None
            for layer in self.model.layers:
                h, m = layer(h, step, pool, kv, m)
            return self.model.norm(h) if m is None else self.model.norm.add(m, h)[1]

    def forward(self, ids: torch.Tensor, step: Step, pool: GDNStateBackend, kv: KVCache, *,
                last_only: bool = False) -> torch.Tensor:  # fmt: skip
        h = self.hidden(ids, step, pool, kv)
        if last_only:
            h = h[step.cu_seqlens[1:].long() - 1]
        return self.lm_head(h)
