"""replayssm memory's table: one label per number (snapshots vs ring), columns that hold any number, and no
snapshots at T=1."""

import os
import re
import subprocess
import sys

from replayssm.cli import main
from replayssm.models.memory import plan_memory
from replayssm.models.presets import preset

README_CMD = ["memory", "--model", "qwen3.5-122b-a10b", "--tp", "1", "--window", "4"]


def _table(out: str) -> list[str]:
    lines = out.splitlines()[2:]  # below the model and geometry lines, above the T=1 note
    return lines[: next((i for i, ln in enumerate(lines) if ln.startswith("T=1")), len(lines))]


def _cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def test_every_row_has_a_label_and_two_numbers_in_aligned_columns(capsys):
    for extra in ([], ["--context", "16777216"], ["--window", "1"], ["--budget-gib", "1000000"]):
        base = README_CMD[:-2] if extra[:1] == ["--window"] else README_CMD  # (an option given twice is refused)
        assert main(base + extra) == 0
        rows = _table(capsys.readouterr().out)
        assert len({len(r) for r in rows}) == 1, rows  # right-aligned: every row ends in the same column
        assert all(len(_cells(r)) == 3 for r in rows), rows  # label, recurrent, replay: never run together


def test_scratch_is_labelled_the_same_way_in_every_row(capsys):
    assert main(README_CMD) == 0
    out = capsys.readouterr().out
    assert "ring buffers" not in out and "speculative scratch per request" not in out
    p = plan_memory(preset("qwen3.5-122b-a10b"), T=4, L=16, budget_bytes=40 * 2**30)
    rows = {_cells(r)[0]: _cells(r)[1:] for r in _table(out)}
    of_it = rows["of it snapshots (recurrent) / ring (replay)"]
    # recurrent: 36 layers x 4 x 4,194,304 B of snapshots; replay: 36 layers of ring + 20 B of cursors, a layer's
    # ring L * (4HK + HV*V*2 + 8HV + HV*V*2) B of records (bf16 values and update vectors) + HV * V/4 * 4 B of markers
    H, HV, K, V, L = 16, 64, 128, 128, 16
    ring = L * (4 * H * K + 2 * HV * V + 8 * HV + 2 * HV * V) + HV * (V // 4) * 4
    assert ring == 671_744
    per_request = 36 * ring + 20
    assert of_it == ["603,979,776", f"{per_request:,}"]
    assert p["scratch_per_request"] == {"recurrent": 603_979_776, "replay": per_request}
    assert p["scratch_total"] == {"recurrent": 56 * 603_979_776, "replay": 233 * per_request}
    assert rows["their snapshots (recurrent) / rings (replay)"] == [f"{56 * 603_979_776:,}", f"{233 * per_request:,}"]


def test_window_1_has_no_snapshots(capsys):
    p = plan_memory(preset("qwen3.5-122b-a10b"), T=1, L=16, budget_bytes=40 * 2**30)
    assert p["per_layer"]["snapshots"] == 0 and p["scratch_per_request"]["recurrent"] == 0
    # 36 x (4,194,304 state + 73,728 conv state + 98,304 conv scratch)
    assert p["per_request"]["recurrent"] == 36 * (4_194_304 + 73_728 + 98_304)
    assert main(["memory", "--model", "qwen3.5-122b-a10b", "--window", "1"]) == 0
    out = capsys.readouterr().out
    assert "T=1 is plain decoding" in out and "(no snapshots)" in out


def test_a_reader_that_goes_away_gets_no_traceback():
    """``replayssm memory ... | head`` printed a BrokenPipeError traceback when head closed the pipe first."""
    r, w = os.pipe()
    os.close(r)  # the reader is gone before anything is written
    try:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        p = subprocess.run([sys.executable, "-m", "replayssm", "memory", "--model", "qwen3.5-122b-a10b", "--json"],
                           stdout=w, stderr=subprocess.PIPE, text=True, timeout=120, cwd=root,
                           env={**os.environ, "PYTHONPATH": root})  # fmt: skip
    finally:
        os.close(w)
    # 141 (128 + SIGPIPE), as a shell reports a command that SIGPIPE ended: not 1, which means a bug or a failed check
    assert p.returncode == 141 and "Traceback" not in p.stderr and "BrokenPipeError" not in p.stderr
