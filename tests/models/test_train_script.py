"""The training script of the embedded model runs (a few steps) and its output loads into replayssm."""

import subprocess
import sys
from pathlib import Path

from replayssm.engine.llm import LLM

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_tiny.py"


def test_train_tiny_smoke(tmp_path):
    args = ["--steps", "3", "--batch", "2", "--seq-len", "64", "--out", str(tmp_path), "--sample-tokens", "0",
            "--threads", "1"]  # fmt: skip
    run = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    for f in ("config.json", "model.safetensors", "tokenizer.json", "TRAINING.md"):
        assert (tmp_path / f).is_file(), f
    llm = LLM(tmp_path, backend="replay", window=4, device="cpu", max_len=128)
    out = llm.generate(["def main():\n"], max_new_tokens=8)[0]
    assert len(out.token_ids) == 8 and isinstance(out.text, str)
    assert llm.decode(llm.encode("héllo wörld\n")) == "héllo wörld\n"  # byte-level round trip
