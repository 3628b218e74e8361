"""A second fresh-eyes trial of the CLI (2026-12-05): each case here was a traceback, a silent acceptance or a
misleading line before its fix."""

import json
import shutil

import pytest

from replayssm.cli import main
from replayssm.tiny import TINY_MODEL
from tests.helpers.cli import assert_one_line_error

TINY = str(TINY_MODEL)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("trial")
    corrupt = root / "corrupt"
    shutil.copytree(TINY_MODEL, corrupt)
    (corrupt / "model.safetensors").write_text("garbage")
    (root / "notes.txt").write_text("not a wheel")
    (root / "empty").mkdir()
    return root


# (argv, the flag the message must name, a phrase it must hold); "{f}" is the fixture's folder
CASES = [
    (["drift", "--model", "{f}/corrupt", "--tokens", "4", "--every", "4", "--out", "{f}/out"], "--model",
     "not a readable safetensors file"),
    (["drift", "--model", "random:qwen3.5-4b:\u0664"], "--model random:qwen3.5-4b:",
     "now spelled --model qwen3.5-4b --layers N"),
    (["drift", "--out", ""], "--out", "give a folder name, got an empty one"),
    (["generate", "--model", "", "--prompt", "x"], "--model", "give a model folder, got an empty name"),
    (["generate", "--model", TINY, "--prompt", "\udcff\udcfe abc"], "--prompt", "not valid UTF-8"),
    (["generate", "--model", TINY, "--prompt", "x", "--drafter", "none", "--window", "8"], "--window 8",
     "--drafter none decodes plainly"),
    (["bench", "peers", "--peers-dir", "{f}/peers", "--wheels", "{f}/notes.txt"], "--wheels", "not an SGLang wheel"),
    (["bench", "peers", "--peers-dir", "{f}/peers", "--wheels", "{f}/empty"], "--wheels",
     "a folder without SGLang wheels"),
    (["demo", "--layer", "--batch", "4096", "--ring", "65536", "--steps", "1", "--device", "cpu"],
     "--batch 4096 / --ring 65536", "lower --batch or --ring"),
    (["demo", "--layer", "--steps", "2000000"], "--steps", "from 1 to 1000000"),
    (["demo", "--max-new-tokens", "4000", "--device", "cpu"], "--max-new-tokens 4000", "so at most 3875"),
    (["-V"], "-V", "unrecognized option -V before the command"),  # said that COMMAND was missing
    (["-x", "demo"], "-x", "allowed: -h, --help, --version, --debug"),
]  # fmt: skip


@pytest.mark.parametrize("argv, flag, phrase", CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_user_error_is_one_line_exit_2(argv, flag, phrase, files, capsys):
    assert main([a.replace("{f}", str(files)) for a in argv]) == 2
    assert_one_line_error(capsys.readouterr(), flag, phrase)


def test_the_layer_demo_names_the_code_it_runs(monkeypatch, capsys):
    """With REPLAYSSM_IMPL=triton (the interpreter) it said 'PyTorch references' from the device alone."""
    monkeypatch.setenv("REPLAYSSM_IMPL", "triton")
    assert main(["demo", "--layer", "--steps", "1", "--device", "cpu"]) == 0
    assert "cpu (Triton kernels)" in capsys.readouterr().out


def test_the_demo_records_bitwise_only_where_it_checked(tmp_path):
    """Runs without a lockstep pool recorded bitwise_every_step: true, never having compared anything."""
    from replayssm.demo import ModelDemo, _run

    demo = ModelDemo(max_new_tokens=2, device="cpu", window=2)
    prompts = demo.prompts[:2]
    plain = _run(demo._runner("recurrent", T=1), prompts, 2, "none")
    checked = _run(demo._runner("replay", "recurrent"), prompts, 2, "ngram", check_lockstep=True)
    assert plain["bitwise_every_step"] is None and checked["bitwise_every_step"] is True


def test_bench_kernels_says_where_it_wrote(tmp_path, capsys):
    argv = ["bench", "kernels", "--device", "cpu", "--peers", "none", "--H", "1", "--HV", "1", "--K", "16", "--V",
            "16", "--windows", "2", "--rings", "4", "--batches", "1", "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'kernels.json'} and {tmp_path / 'kernels.png'}" in out
    assert json.loads((tmp_path / "kernels.json").read_text())["points"]


def test_the_top_level_lists_are_the_parsers():
    """The names an unknown top-level option's message lists are those the parser takes."""
    from replayssm.cli import COMMANDS, TOP_LEVEL_OPTIONS, build_parser

    p = build_parser()
    assert set(TOP_LEVEL_OPTIONS) == {o for a in p._actions for o in a.option_strings}
    assert set(COMMANDS) == set(next(a for a in p._actions if a.dest == "cmd").choices)
