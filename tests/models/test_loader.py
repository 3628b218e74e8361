import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from replayssm.models.config import ModelConfig
from replayssm.models.loader import WeightError, load_model
from tests.helpers.hf_tiny import build


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    build("qwen3_5_text", path)
    return path


def _rewrite(src, dst, fn):
    dst.mkdir()
    (dst / "config.json").write_text((src / "config.json").read_text())
    tensors = load_file(str(src / "model.safetensors"))
    fn(tensors)
    save_file(tensors, str(dst / "model.safetensors"))


def test_missing_extra_misshaped_weights_name_the_tensor(tiny, tmp_path):
    name = "model.layers.0.linear_attn.in_proj_z.weight"
    _rewrite(tiny, tmp_path / "missing", lambda t: t.pop(name))
    with pytest.raises(WeightError, match=f"missing tensors: {name}"):
        load_model(tmp_path / "missing")
    _rewrite(tiny, tmp_path / "extra", lambda t: t.update({"model.layers.0.bogus.weight": torch.zeros(2)}))
    with pytest.raises(WeightError, match="unexpected tensors: model.layers.0.bogus.weight"):
        load_model(tmp_path / "extra")
    _rewrite(tiny, tmp_path / "shape", lambda t: t.update({name: t[name][:, :8].contiguous()}))
    with pytest.raises(WeightError, match=rf"mis-shaped tensors: {name}: checkpoint \(64, 8\), model \(64, 64\)"):
        load_model(tmp_path / "shape")


def test_ignored_prefixes_and_vlm_wrapper(tiny, tmp_path):
    def wrap(t):
        for n in list(t):
            if n.startswith("model."):
                t["model.language_model." + n[len("model.") :]] = t.pop(n)
        t["mtp.layers.0.weight"] = torch.zeros(3)
        t["model.visual.patch_embed.weight"] = torch.zeros(3)

    _rewrite(tiny, tmp_path / "vlm", wrap)
    cfg = json.loads((tiny / "config.json").read_text())
    (tmp_path / "vlm" / "config.json").write_text(json.dumps({"model_type": "qwen3_5", "text_config": cfg}))
    a, b = load_model(tiny), load_model(tmp_path / "vlm")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_config_errors(tmp_path):
    with pytest.raises(ValueError, match="model_type 'llama' is not supported"):
        ModelConfig.from_dict({"model_type": "llama"})
    with pytest.raises(ValueError, match="lacks the field 'linear_num_key_heads'"):
        ModelConfig.from_dict({"model_type": "qwen3_5_text", "num_hidden_layers": 4, "vocab_size": 8,
                               "hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 1})  # fmt: skip
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_model(tmp_path)


def test_per_expert_checkpoints_load_into_stacked_experts(tmp_path):
    """Published MoE checkpoints name every expert's matrices; the model keeps them stacked ([E, 2I, D] gate|up,
    [E, D, I] down). Both spellings load to the same model."""
    build("qwen3_5_moe_text", tmp_path / "fused")

    def split(t):
        for n in [n for n in t if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
            w = t.pop(n)
            prefix, kind = n.rsplit(".", 1)
            for e in range(w.shape[0]):
                if kind == "gate_up_proj":
                    gate, up = w[e].chunk(2, 0)
                    t[f"{prefix}.{e}.gate_proj.weight"], t[f"{prefix}.{e}.up_proj.weight"] = gate, up
                else:
                    t[f"{prefix}.{e}.down_proj.weight"] = w[e]

    _rewrite(tmp_path / "fused", tmp_path / "split", split)
    names = load_file(str(tmp_path / "split" / "model.safetensors"))
    assert "model.layers.0.mlp.experts.3.up_proj.weight" in names
    a, b = load_model(tmp_path / "fused"), load_model(tmp_path / "split")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    _rewrite(tmp_path / "split", tmp_path / "short", lambda t: t.pop("model.layers.0.mlp.experts.1.down_proj.weight"))
    with pytest.raises(WeightError, match="missing tensors: model.layers.0.mlp.experts.down_proj"):
        load_model(tmp_path / "short")
