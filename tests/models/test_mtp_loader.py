"""MTP heads in Hugging Face folders: loaded strictly, under the checkpoint names, or refused with a clear error."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from replayssm.engine.llm import LLM
from replayssm.models.loader import MTPUnavailableError, WeightError, load_model
from tests.helpers.hf_tiny import build
from tests.helpers.mtp_ckpt import add_mtp

KINDS = ["qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"]


@pytest.fixture(scope="module", params=KINDS)
def with_mtp(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param + "_mtp")
    build(request.param, path, seed=3)
    return request.param, path, add_mtp(path, request.param, seed=4)


def _param(model, name):
    return dict(model.named_parameters())[name]


def test_mtp_tensors_round_trip(with_mtp):
    kind, path, mtp = with_mtp
    model = load_model(path, mtp=True)
    assert model.mtp is not None and model.config.mtp_num_hidden_layers == 1
    n_params = sum(1 for n, _ in model.named_parameters() if n.startswith("mtp."))
    checked = 0
    experts = {}  # Qwen3-Next names every expert; the model stacks them (experts.gate_up_proj / down_proj)
    for name, t in mtp.items():
        if ".mlp.experts." in name and not name.endswith(("gate_up_proj", "down_proj")):
            prefix, e, kind, _ = name.rsplit(".", 3)
            experts.setdefault(prefix, {})[(int(e), kind)] = t
            continue
        assert torch.equal(_param(model, name), t), name
        checked += 1
    for prefix, w in experts.items():
        E = 1 + max(e for e, _ in w)
        gate_up = torch.stack([torch.cat([w[(e, "gate_proj")], w[(e, "up_proj")]]) for e in range(E)])
        assert torch.equal(_param(model, f"{prefix}.gate_up_proj"), gate_up)
        assert torch.equal(_param(model, f"{prefix}.down_proj"), torch.stack([w[(e, "down_proj")] for e in range(E)]))
        checked += 2
    assert checked == n_params  # every MTP parameter came from the checkpoint
    # the main model is the same whether or not the head is loaded
    plain = load_model(path)
    assert plain.mtp is None
    main = {n: p for n, p in model.named_parameters() if not n.startswith("mtp.")}
    assert all(torch.equal(main[n], p) for n, p in plain.named_parameters())
    assert load_model(path, mtp="auto").mtp is not None


def _copy_with(src, dst, fn, cfg_fn=None):
    shutil.copytree(src, dst)
    tensors = load_file(str(dst / "model.safetensors"))
    fn(tensors)
    save_file(tensors, str(dst / "model.safetensors"))
    if cfg_fn:
        cfg = json.loads((dst / "config.json").read_text())
        cfg_fn(cfg)
        (dst / "config.json").write_text(json.dumps(cfg))


def test_mtp_tensors_are_checked_strictly(with_mtp, tmp_path):
    kind, path, _ = with_mtp
    name = "mtp.layers.0.self_attn.k_proj.weight"
    _copy_with(path, tmp_path / "missing", lambda t: t.pop(name))
    with pytest.raises(WeightError, match=f"missing tensors: {name}"):
        load_model(tmp_path / "missing", mtp=True)
    _copy_with(path, tmp_path / "extra", lambda t: t.update({"mtp.layers.0.bogus.weight": torch.zeros(2)}))
    with pytest.raises(WeightError, match="unexpected tensors: mtp.layers.0.bogus.weight"):
        load_model(tmp_path / "extra", mtp="auto")
    _copy_with(path, tmp_path / "shape", lambda t: t.update({"mtp.fc.weight": t["mtp.fc.weight"][:, :64].clone()}))
    with pytest.raises(WeightError, match=r"mis-shaped tensors: mtp.fc.weight: checkpoint \(64, 64\), model \(64, 128"):
        load_model(tmp_path / "shape", mtp=True)
    # a config.json without the field: the layer count comes from the tensor names
    _copy_with(path, tmp_path / "undeclared", lambda t: None, lambda c: c.pop("mtp_num_hidden_layers"))
    assert load_model(tmp_path / "undeclared", mtp=True).mtp is not None
    # two layers: not runnable -- refused when asked for, left out by "auto"
    two = {n.replace("layers.0.", "layers.1."): t for n, t in load_file(str(path / "model.safetensors")).items()
           if n.startswith("mtp.layers.0.")}  # fmt: skip
    _copy_with(path, tmp_path / "two", lambda t: t.update(two), lambda c: c.update(mtp_num_hidden_layers=2))
    with pytest.raises(MTPUnavailableError, match="2 MTP layers"):
        load_model(tmp_path / "two", mtp=True)
    assert load_model(tmp_path / "two", mtp="auto").mtp is None


def test_checkpoint_without_mtp(tmp_path):
    build("qwen3_5_text", tmp_path, seed=1)
    with pytest.raises(MTPUnavailableError, match="no mtp.* tensors.*use drafter='ngram'"):
        load_model(tmp_path, mtp=True)
    with pytest.raises(MTPUnavailableError):
        LLM(tmp_path, drafter="mtp", device="cpu", max_len=64)
    with pytest.raises(MTPUnavailableError, match="has no MTP head"):
        LLM(load_model(tmp_path), drafter="mtp", device="cpu", max_len=64)
    assert LLM(tmp_path, drafter="auto", device="cpu", max_len=64).drafter == "ngram"
    with pytest.raises(ValueError, match="mtp must be True, False or 'auto'"):
        load_model(tmp_path, mtp="yes")
    with pytest.raises(ValueError, match="drafter must be one of"):
        LLM(tmp_path, drafter="eagle", device="cpu", max_len=64)
