"""Random MTP tensors under the names real Qwen3-Next / Qwen3.5 checkpoints use, added to a test folder.

The names are written out here, not taken from replayssm's modules, so that a naming mistake in the
package cannot make its own test pass. Dense checkpoints (Qwen3.5 27B and the like) hold the 15
tensors of ``DENSE``; MoE ones replace the MLP with a router, experts (per expert in Qwen3-Next,
fused ``gate_up_proj`` / ``down_proj`` in Qwen3.5-MoE) and a gated shared expert.
"""

import json

import torch
from safetensors.torch import load_file, save_file

HEAD = ("mtp.fc.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.norm.weight")
LAYER = ("input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
         "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight", "self_attn.q_norm.weight",
         "self_attn.k_norm.weight")  # fmt: skip
DENSE_MLP = ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")


def mtp_tensors(cfg: dict, kind: str, seed: int = 0) -> dict[str, torch.Tensor]:
    """Every ``mtp.*`` tensor of a one-layer head for an HF text config dict (random, fp32)."""
    g = torch.Generator().manual_seed(seed)
    D, nH, nKV, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    shapes = {"mtp.fc.weight": (D, 2 * D)}
    shapes.update({n: (D,) for n in HEAD[1:]})
    p = "mtp.layers.0."
    shapes.update({p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
                   p + "self_attn.q_proj.weight": (2 * nH * hd, D), p + "self_attn.k_proj.weight": (nKV * hd, D),
                   p + "self_attn.v_proj.weight": (nKV * hd, D), p + "self_attn.o_proj.weight": (D, nH * hd),
                   p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)})  # fmt: skip
    if kind == "qwen3_5_text":
        inner = cfg["intermediate_size"]
        shapes.update({p + "mlp.gate_proj.weight": (inner, D), p + "mlp.up_proj.weight": (inner, D),
                       p + "mlp.down_proj.weight": (D, inner)})  # fmt: skip
    else:
        E, inner, shared = cfg["num_experts"], cfg["moe_intermediate_size"], cfg["shared_expert_intermediate_size"]
        shapes.update({p + "mlp.gate.weight": (E, D), p + "mlp.shared_expert_gate.weight": (1, D),
                       p + "mlp.shared_expert.gate_proj.weight": (shared, D),
                       p + "mlp.shared_expert.up_proj.weight": (shared, D),
                       p + "mlp.shared_expert.down_proj.weight": (D, shared)})  # fmt: skip
        if kind == "qwen3_next":  # one tensor per expert
            for e in range(E):
                q = f"{p}mlp.experts.{e}."
                shapes.update({q + "gate_proj.weight": (inner, D), q + "up_proj.weight": (inner, D),
                               q + "down_proj.weight": (D, inner)})  # fmt: skip
        else:  # Qwen3.5-MoE: fused experts
            shapes.update({p + "mlp.experts.gate_up_proj": (E, 2 * inner, D),
                           p + "mlp.experts.down_proj": (E, D, inner)})  # fmt: skip
    out = {}
    for name, shape in shapes.items():
        t = torch.randn(shape, generator=g)
        out[name] = t * 0.3 if len(shape) == 1 else t * shape[-1] ** -0.5  # norms near 0 (1 + w), matrices ~unit gain
    return out


def add_mtp(path, kind: str, seed: int = 0, *, declare: bool = True) -> dict[str, torch.Tensor]:
    """Add a random MTP head to the HF folder ``path`` (its model.safetensors and, if ``declare``, config.json)."""
    cfg_path = path / "config.json"
    cfg = json.loads(cfg_path.read_text())
    text = cfg.get("text_config", cfg)
    mtp = mtp_tensors(text, kind, seed)
    f = path / "model.safetensors"
    save_file({**load_file(str(f)), **mtp}, str(f), metadata={"format": "pt"})
    if declare:
        text["mtp_num_hidden_layers"] = 1
        cfg_path.write_text(json.dumps(cfg))
    return mtp
