"""A misuse review of the models and bench APIs (2026-12-04): what it found, each refused early with an error that
names the field, before anything was changed. Each test failed before its fix."""

import json
import shutil

import pytest
import torch

from replayssm.bench.bytes import ModelBytes, fold_rate_at_mean, step_bytes
from replayssm.bench.drift import DriftConfig
from replayssm.bench.e2e import E2EConfig
from replayssm.bench.floor import fold_rate
from replayssm.bench.kernels import KernelBenchConfig
from replayssm.models.config import ModelConfig, ModelConfigError
from replayssm.models.loader import WeightError, load_model, load_weights, read_safetensors
from replayssm.models.memory import plan_memory
from replayssm.models.presets import preset
from replayssm.tiny import TINY_MODEL


def _config() -> dict:
    return json.loads((TINY_MODEL / "config.json").read_text())


def test_load_weights_refuses_unusable_values_before_copying_any():
    """Finding 1: a NumPy array or a meta tensor among the values raised mid-copy, 99 of 108 parameters already
    overwritten; an int32 ``A_log`` was cast silently."""
    model = load_model(TINY_MODEL)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    good = {n: t.float() + 1 for n, t in read_safetensors(TINY_MODEL).items() if not n.startswith("mtp.")}
    name = sorted(good)[-1]  # copied last: everything before it would have been overwritten
    a_log = next(n for n in good if n.endswith("A_log"))
    meta = torch.empty(good[name].shape, device="meta")
    for target, bad, what in ((name, good[name].numpy(), "ndarray, not a tensor"), (name, meta, "meta tensor"),
                              (a_log, good[a_log].int(), "dtype torch.int32")):  # fmt: skip
        with pytest.raises(WeightError, match=f"unusable tensors: {target}: .*{what}"):
            load_weights(model, {**good, target: bad})
        assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_a_tensor_in_two_shards_and_a_mis_shaped_expert_are_named(tmp_path):
    """Finding 5: the later shard silently won. Finding 11: a per-expert tensor of another shape gave a bare
    ``torch.stack`` error naming no tensor."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "m"
    shutil.copytree(TINY_MODEL, folder)
    (shard,) = folder.glob("*.safetensors")
    tensors = load_file(str(shard))
    one = sorted(tensors)[0]
    save_file({one: tensors[one].clone()}, str(folder / "zz-extra.safetensors"))
    with pytest.raises(WeightError, match=f"{one} is in the checkpoint twice: {shard.name} and zz-extra"):
        read_safetensors(folder)
    (folder / "zz-extra.safetensors").unlink()
    experts = {f"model.layers.0.mlp.experts.{e}.{k}.weight": torch.randn(4, 8) for e in range(2)
               for k in ("gate_proj", "up_proj", "down_proj")}  # fmt: skip
    experts["model.layers.0.mlp.experts.1.up_proj.weight"] = torch.randn(5, 8)
    save_file(experts, str(folder / "zz-experts.safetensors"))
    with pytest.raises(WeightError, match=r"experts\.1\.up_proj\.weight: \(5, 8\)"):
        read_safetensors(folder)


def test_config_fields_of_the_wrong_kind_are_refused():
    """Finding 4: ``tie_word_embeddings: "false"`` tied the head (dropping the checkpoint's); ``mlp_only_layers:
    "13"`` read as ('1', '3'); ``rms_norm_eps`` of "1e-6", -1 or NaN failed at generate time. Finding 10: heads
    that do not group, top_k beyond the experts, no GDN layer."""
    for change, field in (({"tie_word_embeddings": "false"}, "tie_word_embeddings"),
                          ({"attention_bias": 0}, "attention_bias"), ({"rms_norm_eps": "1e-6"}, "rms_norm_eps"),
                          ({"rms_norm_eps": -1}, "rms_norm_eps"), ({"rms_norm_eps": float("nan")}, "rms_norm_eps"),
                          ({"mlp_only_layers": "13"}, "mlp_only_layers"),
                          ({"num_attention_heads": 3, "num_key_value_heads": 2}, "num_key_value_heads"),
                          ({"layer_types": ["full_attention"] * _config()["num_hidden_layers"]}, "no linear_attention"),
                          ({"linear_conv_kernel_dim": 1}, "linear_conv_kernel_dim")):  # fmt: skip
        with pytest.raises(ModelConfigError, match=field):
            ModelConfig.from_dict({**_config(), **change})
    moe = {**_config(), "model_type": "qwen3_5_moe_text", "num_experts": 4, "num_experts_per_tok": 5,
           "moe_intermediate_size": 32}  # fmt: skip
    with pytest.raises(ModelConfigError, match="num_experts_per_tok=5 must be from 1 to num_experts=4"):
        ModelConfig.from_dict(moe)
    plans = ModelConfig.from_dict({**moe, "num_experts_per_tok": 2})  # enough to plan memory, not to build
    with pytest.raises(ModelConfigError, match="lacks the field 'shared_expert_intermediate_size'"):
        plans.check_buildable()  # (HybridLM and load_model call it; an MLP of None inner size failed in torch)


def test_load_model_checks_its_arguments_and_the_config_before_reading_weights(tmp_path):
    """Finding 12: bad dtypes and devices were accepted or failed after the whole checkpoint was read;
    ``progress`` was called before ``mtp="yes"`` was refused. Finding 10: a dense config without
    ``intermediate_size`` failed after every weight was read."""
    calls = []
    for kw, err, match in ((dict(dtype=torch.float64), ValueError, "dtype must be one of"),
                           (dict(device="meta"), ValueError, "a meta tensor holds no data"),
                           (dict(device="cuda:7"), ValueError, "CUDA GPU"), (dict(mtp="yes"), ValueError, "mtp"),
                           (dict(mtp=1), ValueError, "mtp"), (dict(progress=5), TypeError, "progress")):  # fmt: skip
        with pytest.raises(err, match=match):
            load_model(TINY_MODEL, progress=kw.pop("progress", calls.append), **kw)
    assert not calls  # refused before a byte was read
    with pytest.raises(FileNotFoundError, match="is not a model folder"):
        load_model(TINY_MODEL / "config.json")
    folder = tmp_path / "m"
    shutil.copytree(TINY_MODEL, folder)
    cfg = _config()
    del cfg["intermediate_size"]
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelConfigError, match="lacks the field 'intermediate_size'"):
        load_model(folder, progress=calls.append)
    assert not calls
    assert plan_memory(ModelConfig.from_dict(cfg))["gdn_layers"] > 0  # planning needs no MLP size


def test_plan_memory_and_the_byte_helpers_refuse_nonsense():
    """Findings 6 and 9: ``tp=True``, a negative context or budget, act_bytes 0 gave numbers; ``fold_rate`` at
    L=12 or T=0 and an unknown ``step_bytes`` mode answered."""
    cfg = preset("qwen3.5-27b")
    for kw, match in ((dict(tp=True), "tp must be an int"), (dict(tp=0), "tp must be an int"),
                      (dict(context=-1000), "context"), (dict(budget_bytes=-1), "budget_bytes"),
                      (dict(budget_bytes=float("nan")), "budget_bytes"), (dict(act_bytes=0), "act_bytes")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            plan_memory(cfg, **kw)
    for call in (lambda: fold_rate(0, 16, "full"), lambda: fold_rate(4, 12, "random"),
                 lambda: fold_rate_at_mean(4, 16, 9.0), lambda: fold_rate_at_mean(4, 16, 0)):  # fmt: skip
        with pytest.raises(ValueError):
            call()
    mb = ModelBytes(dense=10**9, expert=0, moe_layers=0, num_experts=0, top_k=0, act_bytes=2)
    with pytest.raises(ValueError, match="mode must be one of"):
        step_bytes(mb, cfg, "bogus", 8, 4, 0, ring_len=16, mean_accepted=3.0)


def test_bench_configs_check_their_fields():
    """Findings 3, 7, 8: ``DriftConfig(every=0)`` never returned; ``E2EConfig`` and ``KernelBenchConfig`` turned
    nonsense into failed rows, ZeroDivisionError or a correctness gate 'failing'."""
    for build, match in ((lambda: DriftConfig(every=0), "DriftConfig.every"),
                         (lambda: DriftConfig(window=1), "DriftConfig.window"),
                         (lambda: E2EConfig(concurrency=()), "E2EConfig.concurrency"),
                         (lambda: E2EConfig(concurrency=(True,)), "E2EConfig.concurrency"),
                         (lambda: E2EConfig(modes="replay"), "E2EConfig.modes"),
                         (lambda: E2EConfig(steps=0), "E2EConfig.steps"),
                         (lambda: E2EConfig(window=2, mean_accepted=3.0), "E2EConfig.mean_accepted"),
                         (lambda: E2EConfig(capacity_budget_gib=float("nan")), "E2EConfig.capacity_budget_gib"),
                         (lambda: KernelBenchConfig(rings=(12,)), "KernelBenchConfig.rings"),
                         (lambda: KernelBenchConfig(batches=(0,)), "KernelBenchConfig.batches"),
                         (lambda: KernelBenchConfig(windows=(4, 4)), "twice"),
                         (lambda: KernelBenchConfig(target_ms=-1), "KernelBenchConfig.target_ms")):  # fmt: skip
        with pytest.raises((ValueError, TypeError), match=match):
            build()
