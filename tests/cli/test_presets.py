"""A preset (random weights at a published config's widths) is spelled --model PRESET in every command, with
--layers N where the command cuts the layers; the old spellings are one-line errors that give the new one."""

import json

import pytest

from replayssm.cli import main
from replayssm.tiny import TINY_MODEL
from tests.helpers.cli import assert_one_line_error

TINY = str(TINY_MODEL)
SMALL = {"model_type": "qwen3_5_text", "hidden_size": 64, "vocab_size": 256, "linear_num_value_heads": 4,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "linear_num_key_heads": 2,
         "linear_key_head_dim": 16, "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
         "intermediate_size": 96}  # fmt: skip

# (argv, the flag the message must name, a phrase it must hold)
CASES = [
    (["drift", "--model", "random:qwen3.5-4b:8"], "--model random:qwen3.5-4b:8",
     "random:PRESET:LAYERS is now spelled --model qwen3.5-4b --layers 8"),
    (["drift", "--model", "random:Qwen3.5-9B"], "--model random:Qwen3.5-9B",
     "now spelled --model qwen3.5-9b --layers N"),
    (["bench", "e2e", "--preset", "qwen3.5-35b-a3b", "--layers", "4"], "--preset qwen3.5-35b-a3b",
     "now spelled --model qwen3.5-35b-a3b"),
    (["drift", "--model", "tiny", "--layers", "8"], "--layers 8", "only with a preset --model"),
    (["drift", "--model", TINY, "--layers", "8"], "--layers 8", "'tiny' and a model folder keep their own layers"),
    (["bench", "e2e", "--model", "tiny"], "--model tiny", "bench e2e takes a preset (random weights): choose from"),
]  # fmt: skip


@pytest.mark.parametrize("argv, flag, phrase", CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_old_spellings_and_misplaced_layers_are_one_line(argv, flag, phrase, capsys):
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr(), flag, phrase)


def test_drift_runs_a_preset_cut_to_layers(tmp_path, capsys, monkeypatch):
    """--model PRESET --layers N reaches the random-weight model as (preset, N). The widths are shrunk so the run
    takes a second on the CPU (qwen3.5-4b's real ones: 45 s and 9 GB); the real checks still run."""
    from replayssm.bench import synthetic
    from replayssm.models.config import ModelConfig

    real, calls = synthetic.preset_config, []

    def small(name, layers=None):
        calls.append((name, layers))
        return ModelConfig.from_dict({**SMALL, "num_hidden_layers": real(name, layers).num_layers})

    monkeypatch.setattr(synthetic, "preset_config", small)
    argv = ["drift", "--model", "Qwen3.5-4B", "--layers", "4", "--tokens", "8", "--every", "4", "--device", "cpu",
            "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    assert "qwen3.5-4b (first 4 layers, random weights) on cpu" in capsys.readouterr().out
    assert set(calls) == {("qwen3.5-4b", 4)}
    res = json.loads((tmp_path / "drift.json").read_text())
    assert (res["model"], res["layers"]) == ("qwen3.5-4b", 4)


def test_bench_e2e_takes_a_preset_as_model(tmp_path, monkeypatch):
    import torch

    from replayssm.bench import e2e

    configs = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(e2e, "run_e2e", lambda cfg, out, tag: configs.append(cfg))
    assert main(["bench", "e2e", "--model", "Qwen3.5-35B-A3B", "--layers", "4", "--out", str(tmp_path)]) == 0
    assert (configs[0].preset, configs[0].layers) == ("qwen3.5-35b-a3b", 4)
