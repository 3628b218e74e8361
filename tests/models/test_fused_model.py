"""Fused projections (one GEMM for q|k|v, gate|up, qkv|z|b|a): same weights, same model, idempotent."""

import torch

from replayssm.models.loader import load_model
from tests.helpers.hf_tiny import build
from tests.helpers.model_state import prefill_logits


def _logits(model, ids):
    return prefill_logits(model, ids, max_len=64)


def test_fusion_keeps_weights_and_outputs(tmp_path):
    build("qwen3_5_text", tmp_path, seed=2)
    model = load_model(tmp_path)
    before = {n: p.clone() for n, p in model.state_dict().items()}
    ids = torch.randint(0, 256, (12,), generator=torch.Generator().manual_seed(0))
    ref = _logits(model, ids)
    model.fuse_projections()
    mlp, attn = model.model.layers[0].mlp, model.model.layers[1].self_attn
    assert mlp.gate_proj.weight.data_ptr() == mlp._gate_up.data_ptr()
    assert attn.v_proj.weight.data_ptr() == attn._qkv[-attn.v_proj.weight.shape[0] :].data_ptr()
    gdn = model.model.layers[0].linear_attn
    assert gdn.in_proj_a.weight.data_ptr() == gdn._qkvz[-gdn.in_proj_a.weight.shape[0] :].data_ptr()
    fused = mlp._gate_up
    model.fuse_projections()  # idempotent: no second copy
    assert mlp._gate_up is fused
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[n], after[n]) for n in before)
    assert sum(p.numel() for p in model.parameters()) == sum(t.numel() for t in before.values())
    # one GEMM instead of two or three: the same products, summed in the same order per output (fp32)
    assert torch.allclose(_logits(model, ids), ref, atol=1e-5, rtol=1e-5)
