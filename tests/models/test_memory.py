"""The planner against bytes computed by hand (arithmetic spelled out in the comments)."""

import json

import pytest

from replayssm.cli import main
from replayssm.models.config import ModelConfig
from replayssm.models.memory import plan_memory
from replayssm.models.presets import preset


def test_qwen35_122b_tp1_by_hand():
    p = plan_memory(preset("qwen3.5-122b-a10b"), tp=1, T=4, L=16, budget_bytes=40 * 2**30)
    # 48 layers, every 4th full attention -> 36 GDN layers; H=16, HV=64, K=V=128, conv 4
    assert p["gdn_layers"] == 36
    assert p["per_layer"]["state"] == 4_194_304  # 64*128*128*4
    assert p["conv_channels"] == 12_288  # 2*16*128 + 64*128
    assert p["per_layer"]["conv_state"] == 73_728  # 3*12288*2
    # 16*(16*128*4 (k^, fp32) + 64*128*2 (v) + 64*4*2 (g, beta) + 64*128*2 (u)) + 64*(128/4)*4 (fold markers)
    assert p["per_layer"]["ring"] == 671_744
    assert p["per_layer"]["snapshots"] == 16_777_216  # 4*4194304
    # (4194304 + 73728 + 172032 conv window + 16777216) * 36
    assert p["per_request"]["recurrent"] == 619_802_880 + 144_019_200
    # (4194304 + 73728 + 172032 + 671744) * 36 + 20 cursor bytes (write_pos, base, flush, pending, epoch)
    assert p["per_request"]["replay"] == 184_025_108
    assert p["requests_fit"] == {"recurrent": 56, "replay": 233}  # floor(42949672960 / per request)


def test_qwen35_27b_tp2_by_hand():
    p = plan_memory(preset("qwen3.5-27b"), tp=2, T=4, L=16)
    # 64 layers -> 48 GDN; per GPU H=8, HV=24; C = 2*8*128 + 24*128 = 5120
    assert (p["H"], p["HV"], p["conv_channels"]) == (8, 24, 5120)
    assert p["per_layer"]["ring"] == 268_288  # 16*(8*128*4 + 24*128*2 + 24*8 + 24*128*2) + 24*32*4 = 16*16576 + 3072
    assert p["per_request"]["recurrent"] == 382_402_560  # 48*(1572864 + 30720 + 71680 + 6291456)
    assert p["per_request"]["replay"] == 93_290_516  # 48*(1572864 + 30720 + 71680 + 268288) + 20


def test_kv_cache_and_errors(tmp_path):
    cfg = preset("qwen3-next-80b-a3b")
    p = plan_memory(cfg, tp=1, context=1000)
    assert p["kv_cache"] == 12 * 2 * 2 * 256 * 2 * 1000  # 12 attention layers, K and V, 2 kv heads, bf16
    with pytest.raises(ValueError, match="tp=3 does not divide linear_num_key_heads=16"):
        plan_memory(cfg, tp=3)
    text = {"num_hidden_layers": 8, "hidden_size": 64, "vocab_size": 256, "linear_num_key_heads": 2,
            "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
            "linear_conv_kernel_dim": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "full_attention_interval": 4}  # fmt: skip
    d = {"model_type": "qwen3_5", "text_config": text}  # the multimodal wrapper of a Qwen3.5 config.json
    path = tmp_path / "config.json"
    path.write_text(json.dumps(d))
    c = ModelConfig.from_file(path)
    assert len(c.gdn_layers) == 6 and c.HV == 4
    assert plan_memory(c)["per_layer"]["state"] == 4 * 16 * 16 * 4  # HV*V*K fp32
    del d["text_config"]["linear_num_value_heads"]
    path.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="lacks the field 'linear_num_value_heads'"):
        ModelConfig.from_file(path)


def test_cli_memory(capsys):
    assert main(["memory", "--model", "qwen3.5-122b-a10b", "--tp", "1", "--window", "4"]) == 0
    out = capsys.readouterr().out
    # replay per request: 36 layers x (state + conv state + conv scratch + ring) + 20 B of ring cursors
    assert "4,194,304" in out and f"{36 * (4_194_304 + 73_728 + 172_032 + 671_744) + 20:,}" in out
    assert main(["memory", "--model", "qwen3.5-4b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gdn_layers"] == 24
