"""The drift study at a tiny length (CPU): exact fold bitwise at every check, open-loop error measured."""

import json
import sys

import pytest

from replayssm.bench.drift import repetition
from replayssm.cli import main
from replayssm.cli.drift import _plot, _summary
from tests.helpers.hf_tiny import build


def test_repetition():
    assert repetition([1, 2, 3, 4, 5, 6, 7, 8], window=8) == 0.0  # 5 distinct 4-grams
    assert repetition([1, 2, 3, 4] * 2, window=8) == 1 - 4 / 5  # 1234 again among 1234 2341 3412 4123 1234
    assert repetition([9, 9, 1, 2, 3, 4] * 2, window=6) == repetition([1, 2, 3, 4, 9, 9], window=6)  # last 6 only
    assert repetition([7] * 10, window=10) == 1 - 1 / 7


@pytest.mark.parametrize("ahead", ["0", "1"], ids=["fold-in-verify", "fold-ahead"])
def test_drift_command_tiny(ahead, tmp_path, capsys, monkeypatch):
    """Also with every commit of the exact pool folding ahead (``REPLAYSSM_FOLD_AHEAD=1``): the open-loop pool still
    folds open-loop (it never folds ahead), so its error is still measured."""
    monkeypatch.setenv("REPLAYSSM_FOLD_AHEAD", ahead)
    build("qwen3_5_text", tmp_path / "model", seed=3)
    rc = main(["drift", "--model", str(tmp_path / "model"), "--tokens", "38", "--every", "8", "--prompts", "1",
               "--out", str(tmp_path), "--tag", "d", "--device", "cpu"])  # fmt: skip
    assert rc == 0
    out = capsys.readouterr().out
    assert "None" not in out and "exact fold bitwise at every check: yes" in out
    assert (tmp_path / "d.png").stat().st_size > 0
    res = json.loads((tmp_path / "d.json").read_text())
    rows = res["teacher_forced"][0]
    assert len(rows) >= 4
    assert 38 <= rows[-1]["tokens"] < 38 + 4  # the last check is at the end, not at the last multiple of --every
    assert all(r["exact_bitwise"] and r["exact_rel_err"] == 0.0 for r in rows)
    errs = [r["open_loop_rel_err"] for r in rows]
    assert errs[-1] > 0  # the open-loop fold leaves rounding in the state ...
    assert errs[-1] >= errs[0]  # ... and it does not shrink as folds accumulate
    fr = res["free_running"][0]
    assert fr["tokens"] == 38
    for variant in ("exact", "open_loop"):  # output rounding can flip a token only where the baseline nearly tied
        f = fr[variant]
        assert f["first_diff"] is None or f["margin_at_first_diff"] < 1e-3, (variant, f)


def _result(rows):
    fr = {"tokens": 8, "recurrent": {"repetition": 0.0}}
    same = {"first_diff": None, "margin_at_first_diff": None, "repetition": 0.0}
    fr.update({v: dict(same) for v in ("exact", "open_loop")})
    return {"teacher_forced": [rows], "free_running": [fr]}


def test_drift_zero_checks_is_a_failure(capsys):
    assert _summary(_result([])) == 1
    assert "no check ran" in capsys.readouterr().err
    row = {"tokens": 8, "exact_rel_err": 0.0, "exact_bitwise": True, "open_loop_rel_err": 1e-7, "mean_accepted": 2.0}
    assert _summary(_result([row])) == 0
    assert _summary(_result([{**row, "exact_bitwise": False, "exact_rel_err": 1e-9}])) == 1


def test_drift_plot_skipped_without_matplotlib(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    _plot(_result([]), tmp_path / "d.png", "title")
    assert "plot skipped: matplotlib is not installed" in capsys.readouterr().out
    assert not (tmp_path / "d.png").exists()
