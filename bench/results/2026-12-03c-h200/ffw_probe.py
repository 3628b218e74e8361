"""Run ../2026-12-03-h200/ff_probe.py with ``verify.FOLD_FREE_WAVES`` (the staged main kernel's fold-free tail, in
waves; 1.5 in the landed code) set from $FFW: a sweep of a constant the tenth session chose without measuring."""

import os
import runpy
import sys

sys.path.insert(0, os.getcwd())
import replayssm.ops.verify as verify  # noqa: E402

verify.FOLD_FREE_WAVES = float(os.environ["FFW"])
print("FOLD_FREE_WAVES =", verify.FOLD_FREE_WAVES, flush=True)
sys.argv = [sys.argv[0], *sys.argv[1:]]
runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "2026-12-03-h200", "ff_probe.py"), run_name="__main__")
