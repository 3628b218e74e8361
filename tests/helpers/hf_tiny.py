"""Tiny random Hugging Face hybrid models (built with transformers, pure-PyTorch path) for the tests."""

import sys

import torch

COMMON = dict(vocab_size=256, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
              linear_value_head_dim=16, linear_conv_kernel_dim=4,
              layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
              rms_norm_eps=1e-6, initializer_range=0.1, max_position_embeddings=2048, tie_word_embeddings=False,
              pad_token_id=0, bos_token_id=1, eos_token_id=None)  # fmt: skip
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48)
ROPE = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}


def block_fla():
    """Make flash-linear-attention and causal-conv1d unimportable so transformers stays on its torch path."""
    for name in ("fla", "causal_conv1d"):
        sys.modules[name] = None


def build(kind: str, path, seed: int = 0):
    block_fla()
    from transformers import (
        Qwen3_5Config,
        Qwen3_5ForCausalLM,
        Qwen3_5MoeForCausalLM,
        Qwen3_5MoeTextConfig,
        Qwen3NextConfig,
        Qwen3NextForCausalLM,
    )  # fmt: skip

    torch.manual_seed(seed)
    if kind == "qwen3_next":
        cfg = Qwen3NextConfig(**COMMON, intermediate_size=96, **MOE, norm_topk_prob=True, decoder_sparse_step=1,
                              mlp_only_layers=[2], rope_parameters=ROPE)  # fmt: skip
        model = Qwen3NextForCausalLM(cfg)
    elif kind == "qwen3_5_text":
        from transformers import Qwen3_5TextConfig

        cfg = Qwen3_5TextConfig(**COMMON, intermediate_size=96, rope_parameters=dict(ROPE, mrope_section=[2, 1, 1]))
        model = Qwen3_5ForCausalLM(cfg)
    else:
        kw = dict(COMMON, tie_word_embeddings=True)  # one of the three ties its LM head to the embedding
        cfg = Qwen3_5MoeTextConfig(**kw, **MOE, rope_parameters=dict(ROPE, mrope_section=[2, 1, 1]))
        model = Qwen3_5MoeForCausalLM(cfg)
    del Qwen3_5Config
    with torch.no_grad():  # HF initialises norms trivially: randomise them so norm-variant bugs show
        for n, p in model.named_parameters():
            if "linear_attn.norm" in n:
                p.normal_(1.0, 0.2)
            elif n.endswith("norm.weight") or "layernorm" in n:
                p.normal_(0.0, 0.2)
            elif n.endswith("dt_bias"):
                p.normal_(0.0, 0.5)
    model = model.float().eval()
    model.save_pretrained(path, safe_serialization=True)
    return model
