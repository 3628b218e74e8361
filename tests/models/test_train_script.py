"""The training script of the embedded model runs (a few steps, main model then MTP head) and its output loads
into replayssm."""

import os
import subprocess
import sys
from pathlib import Path

from replayssm.engine.llm import LLM

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "train_tiny.py"


def test_train_tiny_smoke(tmp_path):
    args = ["--steps", "3", "--batch", "2", "--seq-len", "64", "--out", str(tmp_path), "--sample-tokens", "0",
            "--threads", "1", "--mtp-steps", "2", "--mtp-batch", "2", "--mtp-gen-seqs", "2", "--mtp-text-seqs", "2",
            "--mtp-eval-seqs", "1", "--mtp-prompt-len", "16", "--mtp-gen-tokens", "8"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's replayssm, not another installed one
    run = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    for f in ("config.json", "model.safetensors", "tokenizer.json", "TRAINING.md", "heldout_prompts.json"):
        assert (tmp_path / f).is_file(), f
    assert "## MTP head" in (tmp_path / "TRAINING.md").read_text()
    llm = LLM(tmp_path, backend="replay", window=4, device="cpu", max_len=128)
    assert llm.drafter == "mtp"  # "auto" found the trained head
    out = llm.generate(["def main():\n"], max_new_tokens=8)[0]
    assert len(out.token_ids) == 8 and isinstance(out.text, str)
    assert llm.decode(llm.encode("héllo wörld\n")) == "héllo wörld\n"  # byte-level round trip
