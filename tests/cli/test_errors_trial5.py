"""A fifth fresh-eyes trial of the CLI (2026-12-05, thirtieth session): each case here was a traceback, a misleading
line or a silent surprise before its fix."""

import pytest

from replayssm.cli import main
from tests.helpers.cli import assert_one_line_error

LONG = "a" * 300  # a file name no Linux file system takes
GENERATE = ["generate", "--model", "tiny", "--prompt", "hi", "--max-new-tokens", "2"]


@pytest.mark.parametrize("name, value, shown", [
    ("REPLAYSSM_FOLD_AHEAD", "x", "REPLAYSSM_FOLD_AHEAD must be 0, 1 or unset, got 'x'"),
    ("REPLAYSSM_FOLD_PHASE", "2", "REPLAYSSM_FOLD_PHASE must be 0, 1 or unset, got '2'"),
    ("REPLAYSSM_VERIFY_DIF", "4", "REPLAYSSM_VERIFY_DIF must be 0, 1, 2, 3 or unset, got '4'"),
    ("REPLAYSSM_VERIFY_TC", "yes", "REPLAYSSM_VERIFY_TC must be 0, 1 or unset, got 'yes'"),
])  # fmt: skip
def test_a_bad_kernel_switch_is_refused_before_any_work(name, value, shown, monkeypatch, capsys):
    """REPLAYSSM_FOLD_AHEAD=x was a 46-line traceback at the first commit, after the model had loaded."""
    monkeypatch.setenv(name, value)
    assert main(GENERATE) == 2
    assert_one_line_error(capsys.readouterr(), name, shown)


def test_the_interpreter_switched_off_for_a_cpu_kernel_bench_is_a_usage_error(monkeypatch, capsys):
    """TRITON_INTERPRET=0 with bench kernels --device cpu was reported as the peers failing their gates (exit 1)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    argv = ["bench", "kernels", "--device", "cpu", "--peers", "0.5.16", "--H", "1", "--HV", "1", "--K", "16", "--V",
            "16", "--rings", "4", "--batches", "1"]  # fmt: skip
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr(), "TRITON_INTERPRET=0", "unset it or set it to 1")


@pytest.mark.parametrize("under", [False, True], ids=["a file", "a path under a file"])
def test_a_peers_folder_from_the_environment_is_checked_as_the_flag_is(under, tmp_path, monkeypatch, capsys):
    """REPLAYSSM_PEERS=/etc/passwd was a FileExistsError traceback; --peers-dir with the same path, one line."""
    (tmp_path / "f").write_text("x")
    path = tmp_path / "f" / "sub" if under else tmp_path / "f"
    monkeypatch.setenv("REPLAYSSM_PEERS", str(path))
    assert main(["bench", "peers"]) == 2
    assert_one_line_error(capsys.readouterr(), "$REPLAYSSM_PEERS", str(path))


@pytest.mark.parametrize("argv, flag", [
    (["memory", "--model", "tiny", "--json", f"/tmp/{LONG}.json"], "--json"),
    (["memory", "--model", f"/tmp/{LONG}"], "--model"),
    (["drift", "--tokens", "8", "--every", "8", "--out", f"/tmp/{LONG}"], "--out"),
    (["bench", "peers", "--peers-dir", f"/tmp/{LONG}"], "--peers-dir"),
])  # fmt: skip
def test_a_path_too_long_is_one_line_naming_its_flag(argv, flag, capsys):
    """Each was an OSError traceback (File name too long)."""
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr(), flag, "a name longer than the file system takes")


def test_a_json_path_ending_in_a_slash_is_refused(tmp_path, capsys):
    """--json /x/newdir/ wrote the JSON as a file named newdir."""
    target = tmp_path / "newdir"
    assert main(["memory", "--model", "tiny", "--json", f"{target}/"]) == 2
    assert_one_line_error(capsys.readouterr(), "--json", "a folder; give a file name")
    assert not target.exists()


def test_a_json_path_of_a_file_and_a_slash_does_not_call_the_file_a_folder(tmp_path, capsys):
    """--json x/ with x an existing file said "a folder; give a file name (e.g. x/results.json)", a path that cannot
    exist; the file is left as it was."""
    target = tmp_path / "x"
    target.write_text("kept")
    assert main(["memory", "--model", "tiny", "--json", f"{target}/"]) == 2
    assert_one_line_error(capsys.readouterr(), "--json", f"{target} is a file, not a folder; give a file name")
    assert target.read_text() == "kept"


@pytest.mark.parametrize("model, shown", [
    ("random:tiny:8", "PRESET a dense preset (qwen3.5-4b, qwen3.5-9b, qwen3.5-27b)"),
    ("random:qwen3.5-35b-a3b:8", "PRESET a dense preset"),
    ("random:Qwen3.5-9B:8", "now spelled --model qwen3.5-9b --layers 8"),
])  # fmt: skip
def test_the_old_drift_spelling_suggests_only_what_drift_takes(model, shown, capsys):
    """random:tiny:8 was told "--model tiny --layers 8", itself refused; random:<MoE>:8 a MoE preset."""
    assert main(["drift", "--model", model]) == 2
    assert_one_line_error(capsys.readouterr(), f"--model {model}", shown)


def test_debug_off_reads_as_off(monkeypatch, capsys):
    """REPLAYSSM_DEBUG=false turned tracebacks on (anything but "" or "0" counted)."""
    monkeypatch.setenv("REPLAYSSM_DEBUG", "false")
    assert main(["memory", "--model", "tiny", "--tp", "3"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1
    monkeypatch.setenv("REPLAYSSM_DEBUG", "yes")
    assert main(["memory", "--model", "tiny", "--tp", "3"]) == 2
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.parametrize("argv, flag", [
    (["memory", "--model", "tiny", "--json", f"/tmp/tiny_{LONG}.json"], "--json"),
    (["memory", "--tp", "1", "--model", "tiny", "--json", f"/tmp/run1_{LONG}.json"], "--json"),
    (["memory", "--json", f"~/{LONG}.json", "--model", "tiny"], "--json"),
])  # fmt: skip
def test_the_flag_named_for_a_path_too_long_is_the_one_it_came_from(argv, flag, capsys):
    """A review found the first flag whose value was a substring of the path named instead (--model tiny,
    --debug's next word), and none for a path given with ~."""
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr(), f"{flag} ", "a name longer than the file system takes")


def test_a_switch_is_not_taken_for_a_flag_with_a_value():
    """--debug (a switch) took the next word ("memory") for its value, a substring of the path."""
    from replayssm.cli import _flag_of

    path = f"/tmp/memory-{LONG}.json"
    assert _flag_of(["--debug", "memory", "--model", "tiny", "--json", path], path) == "--json "
    assert _flag_of(["--debug", "memory"], path) == ""


def test_a_peers_folder_with_a_tilde_is_expanded(tmp_path, monkeypatch):
    """$REPLAYSSM_PEERS='~/p' (and --peers-dir=~/p, which bash leaves as is) extracted into ./~/p."""
    from replayssm.bench.peers.sglang import extract

    seen = []
    monkeypatch.setattr(extract, "extract_all", lambda releases, root, **kw: seen.append(root) or {})
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for env, argv in (("~/p", []), (None, ["--peers-dir=~/q"])):
        if env:
            monkeypatch.setenv("REPLAYSSM_PEERS", env)
        else:
            monkeypatch.delenv("REPLAYSSM_PEERS")
        main(["bench", "peers", *argv])
    assert [str(r) for r in seen] == [str(tmp_path / "p"), str(tmp_path / "q")]
    assert not (tmp_path / "~").exists()


@pytest.mark.parametrize("name, what", [("qwen3.5-4b", "the preset"), ("tiny", "the embedded model")])
def test_a_folder_named_as_a_preset_is_mentioned(name, what, tmp_path, monkeypatch, capsys):
    """With a folder ./qwen3.5-4b here, memory --model qwen3.5-4b took the preset without a word."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).mkdir()
    assert main(["memory", "--model", name]) == 0
    err = capsys.readouterr().err
    assert f"note: --model {name} is {what}, not the folder {name}/ here; write ./{name} for the folder" in err
