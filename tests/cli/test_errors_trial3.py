"""A third fresh-eyes trial of the CLI (2026-12-05, later): each case here was a traceback after a finished run, a
refusal of a default, a silent drop or a misleading line before its fix."""

import json
import shutil

import pytest

from replayssm.cli import main
from replayssm.tiny import TINY_MODEL
from tests.helpers.cli import assert_one_line_error

TINY = str(TINY_MODEL)
LONG = "a" * 300  # a file name no Linux file system takes
KERNELS = ["bench", "kernels", "--device", "cpu", "--peers", "none", "--H", "1", "--HV", "1", "--K", "16", "--V",
           "16", "--rings", "4", "--batches", "1"]  # fmt: skip


@pytest.fixture(scope="module")
def short_model(tmp_path_factory):
    """The embedded model with 1,024 positions (generate's default --max-len, 2048, was refused)."""
    folder = tmp_path_factory.mktemp("short") / "tiny"
    shutil.copytree(TINY_MODEL, folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": 1024}))
    return str(folder)


@pytest.mark.parametrize("argv", [
    ["drift", "--tokens", "8", "--every", "8", "--tag", LONG],
    [*KERNELS, "--windows", "2", "--tag", LONG],
], ids=["drift", "bench kernels"])  # fmt: skip
def test_an_output_name_too_long_is_refused_before_the_run(argv, tmp_path, capsys):
    """Both ran to the end, then raised OSError (File name too long) with a traceback."""
    assert main([*argv, "--out", str(tmp_path)]) == 2
    assert_one_line_error(capsys.readouterr(), "--tag", "File name too long")
    assert list(tmp_path.iterdir()) == []


def test_a_folder_in_the_way_of_an_output_is_refused_before_the_run(tmp_path, capsys):
    """drift wrote drift.json, then raised IsADirectoryError on drift.png."""
    (tmp_path / "drift.png").mkdir()
    assert main(["drift", "--tokens", "8", "--every", "8", "--out", str(tmp_path)]) == 2
    assert_one_line_error(capsys.readouterr(), f"--out {tmp_path}", "drift.png there is a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["drift.png"]


def test_generate_s_default_max_len_follows_a_shorter_model(short_model, capsys):
    assert main(["generate", "--model", short_model, "--prompt", "x", "--max-new-tokens", "4", "--device",
                 "cpu"]) == 0  # fmt: skip
    assert "4 tokens" in capsys.readouterr().err
    assert main(["generate", "--model", short_model, "--prompt", "x", "--max-len", "2048"]) == 2
    assert_one_line_error(capsys.readouterr(), "--max-len", "from 2 to 1024 (the model's max_position_embeddings)")


CASES = [
    (["generate", "--model", "qwen3.5-4b", "--prompt", "x"], "--model qwen3.5-4b",
     "is a preset: shapes without weights, which replayssm memory, drift (with --layers N) and bench e2e take as"),
    (["drift", "--model", "Qwen3.5-4B"], "--model Qwen3.5-4B", "a preset needs --layers N"),
    (["generate", "--model", "Qwen/Qwen3.5-4B", "--prompt", "x"], "--model Qwen/Qwen3.5-4B",
     "only local folders are read"),
    (["generate", "--model", TINY, "--prompt", "x", "--backend", "recurrent", "--ring", "32"], "--ring 32",
     "only the replay backend keeps a ring"),
    (["memory", "--model", ""], "--model", "got an empty name"),
    ([*KERNELS, "--windows", "2", "--target-ms", "inf"], "--target-ms", "a finite number > 0"),
    ([*KERNELS, "--windows", "2", "--tag", "x\\y"], "--tag", "no '/', '\\'"),
    (["bench", "e2e", "--prompt-len", "99999999"], "--prompt-len", "from 1 to 1048576"),
    (["bench", "e2e", "--peak", "--capacity-context", "99999999"], "--capacity-context", "from 1 to 1048576"),
    (["demo", "--json", "-"], "--json -", "give a file name"),  # (it wrote a file named "-")
]  # fmt: skip


@pytest.mark.parametrize("argv, flag, phrase", CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_user_error_is_one_line_exit_2(argv, flag, phrase, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (a regression must not write into the checkout: demo --json - wrote "-" here)
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr(), flag, phrase)


def test_bench_kernels_says_which_windows_it_drops(tmp_path, capsys):
    """--windows 2 4 --rings 4 timed T=2 only, saying nothing; the JSON's lists were empty."""
    assert main([*KERNELS, "--windows", "2", "4", "--out", str(tmp_path)]) == 0
    assert "note: not timed: T=4 L=4 (a ring holds at least 2T records" in capsys.readouterr().out
    saved = json.loads((tmp_path / "kernels.json").read_text())
    assert saved["dropped"] == [{"T": 4, "L": 4}] and {p["T"] for p in saved["points"]} == {2}
    assert saved["config"]["windows"] == [2, 4]  # the config as JSON, not a Python repr string


def test_memory_json_to_a_file_and_the_table_s_total_with_a_kv_cache(tmp_path, capsys):
    """--json took no file name (memory) where demo's does; with --context the table's per-request row left out
    the KV cache that the JSON's per_request counts, and no row showed that number."""
    path = tmp_path / "plan.json"
    argv = ["memory", "--model", "qwen3.5-4b", "--context", "1024"]
    assert main([*argv, "--json", str(path)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {path}"
    plan = json.loads(path.read_text())
    assert main(argv) == 0
    total = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("= per request"))
    assert total.split()[-2:] == [f"{plan['per_request'][b]:,}" for b in ("recurrent", "replay")]


def test_bench_peers_takes_the_folder_under_the_name_bench_kernels_reads(tmp_path, capsys):
    assert main(["bench", "peers", "--peers-dir", str(tmp_path / "x"), "--wheels", str(tmp_path)]) == 2
    assert_one_line_error(capsys.readouterr(), "--wheels", "a folder without SGLang wheels")
