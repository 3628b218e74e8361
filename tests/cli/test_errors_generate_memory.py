"""generate and memory: bad model folders, out-of-range lengths and contradicting flags are one line, exit 2."""

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from replayssm.cli import main
from replayssm.tiny import TINY_MODEL
from tests.helpers.cli import assert_one_line_error

TINY = str(TINY_MODEL)


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    """Model folders that are each wrong in one way."""
    root = tmp_path_factory.mktemp("bad_models")

    def copy(name, config=None):
        folder = root / name
        shutil.copytree(TINY_MODEL, folder)
        if config is not None:
            (folder / "config.json").write_text(json.dumps(config))
        return folder

    cfg = json.loads((TINY_MODEL / "config.json").read_text())
    copy("list", [1, 2])
    copy("negative", {**cfg, "linear_num_value_heads": -4})
    copy("geometry", {**cfg, "linear_num_value_heads": 3})
    corrupt = copy("corrupt")
    (corrupt / "model.safetensors").write_bytes((TINY_MODEL / "model.safetensors").read_bytes()[:1000])
    no_mtp = copy("no_mtp")
    tensors = {k: v for k, v in load_file(str(TINY_MODEL / "model.safetensors")).items() if not k.startswith("mtp.")}
    save_file(tensors, str(no_mtp / "model.safetensors"))
    return root


GEN = ["generate", "--prompt", "x", "--device", "cpu", "--model"]
# (argv, the flag the message must name, a phrase the message must hold); "{bad}" is the fixture's folder
CASES = [
    (GEN + [TINY, "--max-len", "100000000000"], "--max-len", "from 2 to 4096 (the model's max_position_embeddings)"),
    (GEN + [TINY, "--max-len", "4097"], "--max-len", "from 2 to 4096"),
    (GEN + [TINY, "--window", "1", "--drafter", "mtp"], "--drafter mtp", "--window >= 2"),
    (GEN + [TINY, "--window", "1", "--drafter", "ngram"], "--drafter ngram", "use --drafter none (or auto)"),
    (GEN + [TINY, "--max-len", "64", "--max-new-tokens", "60"], "--max-len 64", "the prompt is 1 token, +"),
    (GEN + [TINY, "--draft-vocab", "0"], "--draft-vocab", ">= 1"),
    (GEN + [TINY, "--draft-vocab", "64", "--drafter", "ngram"], "--draft-vocab", "only with the MTP drafter"),
    (GEN + ["{bad}/list"], "--model {bad}/list", "must hold a JSON object, got an array"),
    (GEN + ["{bad}/negative"], "--model", "'linear_num_value_heads' must be a positive int, got -4"),
    (GEN + ["{bad}/corrupt"], "--model", "model.safetensors is not a readable safetensors file"),
    (GEN + ["{bad}/no_mtp", "--drafter", "mtp"], "--drafter mtp", "no mtp.* tensors"),
    (GEN + ["{bad}/no_mtp", "--drafter", "mtp"], "--drafter mtp", "use --drafter ngram (or auto)"),
    (GEN + ["{bad}/no_mtp", "--draft-vocab", "64"], "--draft-vocab", "so --drafter auto drafts n-grams"),
    (GEN + [TINY, "--max-len", "4"], "--max-len 4", "must be greater than --window 4"),
    (
        GEN + [TINY, "--drafter", "none", "--max-len", "7", "--max-new-tokens", "6"],
        "--max-len 7",
        "+ 1 (--drafter none",
    ),
    (GEN + [TINY, "--max-new-tokens", "5000"], "--max-new-tokens 5000", "lower --max-new-tokens or shorten --prompt"),
    (GEN + [TINY, "--seed", str(2**63)], "--seed", "from 0 to 9223372036854775807"),
    (GEN + [TINY, "--temperature", "1e39"], "--temperature", "from 0 to 3.4028234663852886e+38"),
    (["memory", "--model", "{bad}/list"], "--model {bad}/list", "config.json: must hold a JSON object"),
    (["memory", "--model", "{bad}/negative"], "--model", "'linear_num_value_heads' must be a positive int"),
    (["memory", "--model", "{bad}/geometry"], "--model", "linear_num_value_heads=3 must be a multiple of"),
    (["memory", "--model", "README.md"], "--model README.md", "not a JSON config"),
    (["memory", "--model", "qwen3.5-4b", "--context", "100000000000"], "--context", "from 0 to 16777216"),
    (["memory", "--model", TINY, "--context", "4097"], "--context", "from 0 to 4096 (the model's max_position"),
]


@pytest.mark.parametrize("argv, flag, phrase", CASES, ids=[" ".join(c[0][1:])[:70] for c in CASES])
def test_user_error_is_one_line_exit_2(argv, flag, phrase, bad, capsys):
    argv = [a.replace("{bad}", str(bad)) for a in argv]
    assert main(argv) == 2
    line = assert_one_line_error(capsys.readouterr(), flag.replace("{bad}", str(bad)), phrase)
    assert "drafter='" not in line  # the CLI spells flags, not kwargs


def test_auto_drafter_with_window_1_is_plain_decoding(capsys):
    argv = GEN + [TINY, "--window", "1", "--max-new-tokens", "3", "--max-len", "64"]
    assert main(argv) == 0
    assert "drafter none" in capsys.readouterr().err


PRE_LOAD = [c for c in CASES if c[0][:1] == ["generate"] and "--model" not in c[1]]


@pytest.mark.parametrize("argv, flag, phrase", PRE_LOAD, ids=[" ".join(c[0][5:])[:60] for c in PRE_LOAD])
def test_generate_checks_its_flags_before_the_weights_load(argv, flag, phrase, bad, capsys):
    """A first-hour trial (2026-12-05) found --max-len, --drafter mtp, --draft-vocab and --seed refused only after
    the weights had loaded (minutes for a large model); docs/cli.md says every check runs before any long work."""
    assert main([a.replace("{bad}", str(bad)) for a in argv]) == 2
    assert "loading " not in capsys.readouterr().err


def test_memory_takes_tiny_as_the_embedded_model(capsys):
    """'tiny' names the embedded model in every command (memory refused it)."""
    assert main(["memory", "--model", "tiny"]) == 0
    assert capsys.readouterr().out.startswith("model tiny  TP 1  T=4  L=16")
