"""Fixes from the thirty-first session's first-hour CLI trial: each case failed before its fix (a traceback, a
check after the weights loaded, a flag silently unused, or a message naming the wrong flag)."""

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from replayssm import fit
from replayssm.cli import main
from replayssm.tiny import TINY_MODEL
from tests.helpers.cli import assert_one_line_error

GEN = ["generate", "--prompt", "hi", "--device", "cpu", "--max-new-tokens", "2", "--model"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Copies of the tiny model, each wrong in one way."""
    root = tmp_path_factory.mktemp("trial6")

    def copy(name):
        shutil.copytree(TINY_MODEL, root / name)
        return root / name

    tensors = load_file(str(TINY_MODEL / "model.safetensors"))
    name = "model.layers.2.input_layernorm.weight"
    save_file({k: v for k, v in tensors.items() if k != name}, str(copy("missing") / "model.safetensors"))
    save_file({**tensors, name: tensors[name][:-1].clone()}, str(copy("shape") / "model.safetensors"))
    stdir = copy("stdir")
    (stdir / "model.safetensors").unlink()
    (stdir / "model.safetensors").mkdir()
    tok = json.loads((TINY_MODEL / "tokenizer.json").read_text())
    vocab = json.loads((TINY_MODEL / "config.json").read_text())["vocab_size"]
    tok["added_tokens"].append({"id": vocab, "content": "<zz>", "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": False, "special": True})  # fmt: skip
    (copy("bigtok") / "tokenizer.json").write_text(json.dumps(tok))
    return root


@pytest.mark.parametrize(
    "name, phrase",
    [
        ("missing", "missing tensors: model.layers.2.input_layernorm.weight"),
        ("shape", "mis-shaped tensors: model.layers.2.input_layernorm.weight"),
        ("stdir", "not a readable safetensors file: a folder, not a file"),
    ],
)
def test_a_bad_checkpoint_is_named_before_the_weights_load(name, phrase, folders, capsys):
    """From the safetensors headers (``models.checkpoint``): before, the weights loaded to 100% first, and a folder
    named model.safetensors was 'No such device (os error 19)'."""
    drift = ["drift", "--model", str(folders / name), "--tokens", "4", "--every", "4"]
    for argv in (GEN + [str(folders / name)], drift):
        assert main(argv) == 2
        cap = capsys.readouterr()
        assert_one_line_error(cap, "--model", phrase)
        assert "loading " not in cap.err and cap.out == ""  # no progress bar, no drift header


def test_load_model_checks_the_headers_before_reading_weights(folders, monkeypatch):
    """The library call too: ``read_safetensors`` (every weight) is never reached for a checkpoint that lacks one."""
    from replayssm.models import loader

    monkeypatch.setattr(loader, "read_safetensors", lambda *a, **k: pytest.fail("read the weights"))
    with pytest.raises(loader.WeightError, match="missing tensors: model.layers.2.input_layernorm.weight"):
        loader.load_model(folders / "missing")


def test_a_prompt_outside_the_vocabulary_is_refused_before_loading(folders, capsys):
    assert main(["generate", "--prompt", "hi<zz>", "--device", "cpu", "--model", str(folders / "bigtok")]) == 2
    cap = capsys.readouterr()
    assert_one_line_error(cap, "--model", "outside config.json's vocab_size")
    assert "loading " not in cap.err


def test_seed_only_with_sampling(capsys):
    assert main(GEN + ["tiny", "--seed", "5"]) == 2
    assert_one_line_error(capsys.readouterr(), "--seed 5", "only with sampling")
    assert main(GEN + ["tiny", "--seed", "5", "--temperature", "1e-6"]) == 2  # below 1e-5: greedy
    capsys.readouterr()
    assert main(GEN + ["tiny", "--seed", "5", "--temperature", "0.7"]) == 0


def test_generate_says_tiny_is_the_embedded_model(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").mkdir()
    assert main(GEN + ["tiny"]) == 0
    assert "note: --model tiny is the embedded model, not the folder tiny/ here" in capsys.readouterr().err


def test_runs_that_cannot_fit_are_refused_before_they_allocate(tmp_path, monkeypatch, capsys):
    """On a machine with 64 MiB to spare: bench kernels' largest point, drift's random preset weights, and (with
    1 KiB) generate's weights; a point that fits still runs."""
    monkeypatch.setattr(fit, "memory_bytes", lambda dev: 64 << 20)
    kernels = ["bench", "kernels", "--device", "cpu", "--peers", "none", "--H", "1", "--HV", "1", "--K", "16",
               "--V", "16", "--windows", "2", "--rings", "4", "--max-seconds", "1e-9",
               "--out", str(tmp_path)]  # fmt: skip
    assert main(kernels + ["--batches", "1", "65536"]) == 2
    assert_one_line_error(capsys.readouterr(), "--batches 65536", "more than this machine can spare")
    assert main(kernels + ["--batches", "1"]) == 1  # fits: runs, and --max-seconds stops it before a point
    assert "nothing was timed" in capsys.readouterr().err
    assert main(["drift", "--model", "qwen3.5-4b", "--layers", "4", "--out", str(tmp_path)]) == 2
    cap = capsys.readouterr()
    assert_one_line_error(cap, "--model qwen3.5-4b --layers 4", "its weights in float32 need")
    assert cap.out == ""  # before the header
    monkeypatch.setattr(fit, "memory_bytes", lambda dev: 1 << 10)
    assert main(GEN + ["tiny"]) == 2
    cap = capsys.readouterr()
    assert_one_line_error(cap, "--model tiny", "its weights in float32 need")
    assert "loading " not in cap.err


def test_bench_peers_and_kernels_name_the_environment_they_read(tmp_path, monkeypatch, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    monkeypatch.setenv("REPLAYSSM_WHEEL_CACHE", str(afile))
    for extra in ([], ["--download"]):
        assert main(["bench", "peers", "--peers-dir", str(tmp_path / "p"), *extra]) == 2
        assert_one_line_error(capsys.readouterr(), f"$REPLAYSSM_WHEEL_CACHE {afile}", "not a folder")
    monkeypatch.delenv("REPLAYSSM_WHEEL_CACHE")
    assert main(["bench", "peers", "--cache", "", "--peers-dir", str(tmp_path / "p")]) == 2
    assert_one_line_error(capsys.readouterr(), "--cache", "empty name")
    monkeypatch.setenv("REPLAYSSM_PEERS", str(afile))
    small = ["--device", "cpu", "--H", "1", "--HV", "1", "--K", "32", "--V", "32", "--out", str(tmp_path)]
    assert main(["bench", "kernels", *small]) == 2
    assert_one_line_error(capsys.readouterr(), f"$REPLAYSSM_PEERS {afile}", "a file, not a folder")
    monkeypatch.delenv("REPLAYSSM_PEERS")
    assert main(["bench", "kernels", *small, "--peers-dir", ""]) == 2
    assert_one_line_error(capsys.readouterr(), "--peers-dir", "empty name")
