"""Fixes of the thirty-second session to what the earlier first-hour trials left noticed: an output that cannot be
written (a full disk) after the work is done. Each case failed before its fix (a traceback, exit status 1)."""

import os
import subprocess
import sys

import pytest

from replayssm.cli import IO_ERROR, main
from tests.helpers.cli import assert_one_line_error

FULL = "/dev/full"  # every write fails with ENOSPC (Linux)
needs_full = pytest.mark.skipif(not os.path.exists(FULL), reason="no /dev/full on this system")


@needs_full
@pytest.mark.parametrize("flag", ["--json", "--json="])
def test_a_json_file_on_a_full_device_is_one_line_naming_it(flag, capsys):
    args = ["memory", "--model", "tiny"] + ([flag, FULL] if flag == "--json" else [flag + FULL])
    assert main(args) == IO_ERROR
    line = assert_one_line_error(capsys.readouterr(), f"--json {FULL}", "could not write")
    assert "No space left on device" in line


@needs_full
def test_a_bench_json_on_a_full_device_names_the_file(tmp_path):
    """``bench`` writes its JSON through ``bench.report.write_json``: the error carries the file's name."""
    from replayssm.bench.report import write_json

    with pytest.raises(OSError) as e:
        write_json(type(tmp_path)(FULL), {"a": 1})
    assert e.value.filename == FULL


@needs_full
def test_stdout_on_a_full_device_is_one_line_and_no_traceback():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(FULL, "w") as out:
        p = subprocess.run([sys.executable, "-m", "replayssm", "memory", "--model", "tiny"], stdout=out,
                           stderr=subprocess.PIPE, text=True, timeout=120, cwd=root,
                           env={**os.environ, "PYTHONPATH": root})  # fmt: skip
    assert p.returncode == IO_ERROR, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "could not write the output: No space left on device" in lines[0], p.stderr
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr


@pytest.mark.parametrize("text, kind", [("null", "got null"), ("[1]", "got an array"), ("true", "the boolean true")])
def test_a_config_that_is_not_an_object_is_named_in_jsons_words(text, kind, tmp_path, capsys):
    """A config.json holding ``null`` was "a JSON NoneType"."""
    (tmp_path / "config.json").write_text(text)
    assert main(["memory", "--model", str(tmp_path)]) == 2
    assert_one_line_error(capsys.readouterr(), "--model", kind)


@pytest.mark.parametrize("tag", ["a\nb", "tab\there", "nul\0"])
def test_a_tag_with_control_characters_is_refused(tag, capsys):
    """``--tag`` took a newline (a file name with a line break in it)."""
    assert main(["bench", "e2e", "--tag", tag]) == 2
    assert_one_line_error(capsys.readouterr(), "--tag", "control characters")


def test_a_budget_under_a_byte_is_refused(capsys):
    """``memory --budget-gib 1e-30`` was planned with a budget of 1 byte (rounded up)."""
    assert main(["memory", "--model", "tiny", "--budget-gib", "1e-30"]) == 2
    assert_one_line_error(capsys.readouterr(), "--budget-gib 1e-30", "less than a byte")
    assert main(["memory", "--model", "tiny", "--budget-gib", "1e-9", "--json"]) == 0
    assert '"budget": 1,' in capsys.readouterr().out
