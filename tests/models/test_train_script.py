"""The training script of the embedded model runs (a few steps) and its output loads into replayssm."""

import importlib.util
from pathlib import Path

from replayssm.engine.llm import LLM

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_tiny.py"


def test_train_tiny_smoke(tmp_path):
    spec = importlib.util.spec_from_file_location("train_tiny", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(["--steps", "3", "--batch", "2", "--seq-len", "64", "--out", str(tmp_path), "--sample-tokens", "0",
              "--threads", "1"])  # fmt: skip
    for f in ("config.json", "model.safetensors", "tokenizer.json", "TRAINING.md"):
        assert (tmp_path / f).is_file(), f
    llm = LLM(tmp_path, backend="replay", window=4, device="cpu", max_len=128)
    out = llm.generate(["def main():\n"], max_new_tokens=8)[0]
    assert len(out.token_ids) == 8 and isinstance(out.text, str)
    assert llm.decode(llm.encode("héllo wörld\n")) == "héllo wörld\n"  # byte-level round trip
