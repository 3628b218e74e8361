"""The drift study at a tiny length (CPU): exact fold bitwise at every check, open-loop error measured."""

import json

from replayssm.cli import main
from tests.models.hf_tiny import build


def test_drift_command_tiny(tmp_path):
    build("qwen3_5_text", tmp_path / "model", seed=3)
    rc = main(["drift", "--model", str(tmp_path / "model"), "--tokens", "40", "--every", "8", "--prompts", "1",
               "--out", str(tmp_path), "--tag", "d", "--device", "cpu"])  # fmt: skip
    assert rc == 0
    res = json.loads((tmp_path / "d.json").read_text())
    rows = res["teacher_forced"][0]
    assert len(rows) >= 3
    assert all(r["exact_bitwise"] and r["exact_rel_err"] == 0.0 for r in rows)
    errs = [r["open_loop_rel_err"] for r in rows]
    assert errs[-1] > 0  # the open-loop fold leaves rounding in the state ...
    assert errs[-1] >= errs[0]  # ... and it does not shrink as folds accumulate
    fr = res["free_running"][0]
    assert fr["tokens"] == 40 and 0.0 <= fr["recurrent"]["repetition"] <= 1.0
