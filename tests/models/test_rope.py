"""RoPE of the attention layers: YaRN against transformers on the same config and weights, and refusals."""

import json

import pytest
import torch

from replayssm.models.config import ModelConfig
from replayssm.models.loader import load_model
from replayssm.models.rope import RotaryEmbedding
from tests.helpers.hf_tiny import ROPE, build
from tests.helpers.model_state import prefill_logits

# Small enough an original context that YaRN's ramp covers the 4 rotary frequencies of the tiny model
# (head_dim 32 x 0.25): frequency 0 extrapolates, 1 is mixed, 2 and 3 interpolate; cos/sin x 1.139.
YARN = dict(ROPE, rope_type="yarn", factor=4.0, original_max_position_embeddings=64)
LOGIT_BOUND = 1e-4  # fp32 on both sides, as in test_hf_parity


def _logits(model, ids):
    return prefill_logits(model, ids)


def _ids(n=48):
    return torch.randint(3, 256, (n,), generator=torch.Generator().manual_seed(3))


def _hf_logits(hf, ids):
    with torch.no_grad():
        return hf(ids[None]).logits[0]


def _rewrite(path, fn):
    f = path / "config.json"
    d = json.loads(f.read_text())
    fn(d)
    f.write_text(json.dumps(d))


def test_yarn_rope_parameters_match_transformers(tmp_path):
    hf = build("qwen3_5_text", tmp_path, seed=7, rope=YARN)
    ids = _ids()
    ours, ref = _logits(load_model(tmp_path), ids), _hf_logits(hf, ids)
    assert (ours - ref).abs().max() < LOGIT_BOUND
    # and YaRN is what made them agree: the same weights with the default RoPE are far off

    def default(d):
        for k in ("factor", "original_max_position_embeddings"):
            d["rope_parameters"].pop(k)
        d["rope_parameters"]["rope_type"] = "default"

    _rewrite(tmp_path, default)
    plain = _logits(load_model(tmp_path), ids)
    assert (plain - ref).abs().max() > 100 * LOGIT_BOUND


def test_legacy_rope_scaling_block_matches_transformers(tmp_path):
    """Qwen3-Next style: rope_theta / partial_rotary_factor at the top level, YaRN in a rope_scaling block (what
    the model cards tell users to add), read by transformers from the same folder."""
    build("qwen3_next", tmp_path, seed=8, rope=YARN)

    def legacy(d):
        p = d.pop("rope_parameters")
        d.update(rope_theta=p["rope_theta"], partial_rotary_factor=p["partial_rotary_factor"],
                 rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})  # fmt: skip

    _rewrite(tmp_path, legacy)
    from transformers import Qwen3NextForCausalLM

    hf = Qwen3NextForCausalLM.from_pretrained(tmp_path).float().eval()
    assert hf.config.rope_parameters["rope_type"] == "yarn"
    ids = _ids()
    assert (_logits(load_model(tmp_path), ids) - _hf_logits(hf, ids)).abs().max() < LOGIT_BOUND


def _cfg(**change) -> dict:
    d = dict(model_type="qwen3_5_text", vocab_size=256, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
             linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4, intermediate_size=96,
             rope_parameters=dict(ROPE))  # fmt: skip
    d.update(change)
    return d


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(rope_parameters=dict(ROPE, rope_type="linear", factor=2.0)), "rope_type 'linear' is not supported"),
        (dict(rope_parameters=dict(ROPE, rope_type="dynamic", factor=2.0)), "rope_type 'dynamic' is not supported"),
        (dict(rope_parameters=dict(ROPE, rope_type="longrope")), "rope_type 'longrope' is not supported"),
        (dict(rope_parameters=dict(ROPE, factor=4.0)), r"\['factor'\] are not supported with rope_type 'default'"),
        (dict(rope_parameters=dict(YARN, low_freq_factor=1.0)), r"\['low_freq_factor'\] are not supported"),
        (dict(rope_parameters=dict(ROPE), rope_scaling={"type": "yarn", "factor": 4.0}), "both rope_parameters and"),
        (dict(rope_parameters=None, rope_scaling={"type": "ntk", "factor": 4.0}), "rope_type 'ntk' is not supported"),
        (dict(rope_parameters=dict(YARN, factor=0.5)), "factor must be >= 1"),
        (dict(rope_parameters=dict(YARN, original_max_position_embeddings=None)), None),  # falls back: no error
        (dict(hidden_act="gelu"), "hidden_act 'gelu' is not supported"),
        (dict(attn_output_gate=False), "attn_output_gate=false is not supported"),
        (dict(use_sliding_window=True), "use_sliding_window=true is not supported"),
    ],
)
def test_unsupported_rope_or_math_is_refused_at_load(change, message):
    if message is None:
        cfg = ModelConfig.from_dict(_cfg(max_position_embeddings=256, **change))
        assert cfg.rope_scaling.original_max_position_embeddings == 256
        return
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_dict(_cfg(**change))


def test_default_rope_reads_both_layouts():
    new = ModelConfig.from_dict(_cfg(rope_parameters=dict(ROPE, rope_theta=1e6)))
    old = ModelConfig.from_dict(_cfg(rope_parameters=None, rope_theta=1e6, partial_rotary_factor=0.25,
                                     rope_scaling=None))  # fmt: skip
    assert new == old and new.rope_theta == 1e6 and new.rope_scaling is None


YARN_VARIANTS = {
    "paper": dict(factor=4.0, original_max_position_embeddings=64),
    "betas": dict(factor=2.0, original_max_position_embeddings=4096, beta_fast=16, beta_slow=2),
    "attention_factor": dict(factor=8.0, original_max_position_embeddings=256, attention_factor=1.3),
    "mscale": dict(factor=4.0, original_max_position_embeddings=128, mscale=1.0, mscale_all_dim=0.707),
    "untruncated": dict(factor=4.0, original_max_position_embeddings=64, truncate=False),
    "factor_1": dict(factor=1.0, original_max_position_embeddings=64),
}


@pytest.mark.parametrize("layout", ["rope_parameters", "rope_scaling", "top_level_original"])
@pytest.mark.parametrize("variant", list(YARN_VARIANTS))
def test_yarn_frequencies_equal_transformers(variant, layout):
    """The inverse frequencies bitwise, and the cos/sin scale, of transformers' YaRN for the same config.json,
    in the Qwen3.5 layout (rope_parameters), the legacy one (rope_scaling) and with a top-level
    original_max_position_embeddings (which transformers lets win over the block's)."""
    from transformers import Qwen3NextConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    yarn = YARN_VARIANTS[variant]
    d = _cfg(model_type="qwen3_next", max_position_embeddings=8192, rope_parameters=dict(ROPE, rope_type="yarn",
                                                                                          **yarn))  # fmt: skip
    if layout == "rope_scaling":
        p = d.pop("rope_parameters")
        d.update(rope_theta=p["rope_theta"], partial_rotary_factor=p["partial_rotary_factor"],
                 rope_scaling=dict(yarn, type="yarn"))  # fmt: skip
    elif layout == "top_level_original":
        d["original_max_position_embeddings"] = 32
    ours = ModelConfig.from_dict(d)
    rope = RotaryEmbedding(ours.rotary_dim, ours.rope_theta, ours.rope_scaling)
    inv, scale = rope.inv_freq, rope.scale
    hf = Qwen3NextConfig.from_dict({k: v for k, v in d.items() if k != "model_type"})
    assert hf.rope_parameters["rope_type"] == "yarn"
    ref_inv, ref_scale = ROPE_INIT_FUNCTIONS["yarn"](hf, "cpu")
    assert torch.equal(inv, ref_inv)
    assert scale == ref_scale
    assert not torch.equal(inv, RotaryEmbedding(ours.rotary_dim, ours.rope_theta).inv_freq) or yarn["factor"] == 1


@pytest.mark.parametrize("kind", ["qwen3_5_text", "qwen3_next"])
def test_yarn_generation_past_the_original_context_matches_transformers(tmp_path, kind):
    """Through the engine (fused q/k norm + rotary, paged KV, verify windows of 4 with n-gram drafts), greedy
    tokens equal transformers' generate on the same weights, at positions well past the original context."""
    from replayssm.engine.llm import LLM

    hf = build(kind, tmp_path, seed=9, rope=dict(YARN, original_max_position_embeddings=16))
    prompt = _ids(9).tolist()
    with torch.no_grad():
        ref = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, 9, dtype=torch.long),
                          max_new_tokens=48, do_sample=False)[0, 9:].tolist()  # fmt: skip
    llm = LLM(tmp_path, backend="replay", drafter="ngram", window=4, max_len=128)
    assert llm.model.config.rope_scaling.original_max_position_embeddings == 16
    assert llm.generate([prompt], max_new_tokens=48)[0].token_ids == ref
