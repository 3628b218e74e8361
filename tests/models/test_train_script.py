"""The training script of the embedded model runs (a few steps) and its output loads into replayssm."""

import importlib.util
from pathlib import Path

from replayssm.engine.llm import LLM

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_tiny.py"


def test_train_tiny_smoke(tmp_path):
    spec = importlib.util.spec_from_file_location("train_tiny", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mtp = ["--mtp-steps", "2", "--mtp-batch", "2", "--mtp-gen-seqs", "2", "--mtp-text-seqs", "2",
           "--mtp-eval-seqs", "1", "--mtp-prompt-len", "16", "--mtp-gen-tokens", "8"]  # fmt: skip
    mod.main(["--steps", "3", "--batch", "2", "--seq-len", "64", "--out", str(tmp_path), "--sample-tokens", "0",
              "--threads", "1", *mtp])  # fmt: skip
    for f in ("config.json", "model.safetensors", "tokenizer.json", "TRAINING.md", "heldout_prompts.json"):
        assert (tmp_path / f).is_file(), f
    assert "## MTP head" in (tmp_path / "TRAINING.md").read_text()
    llm = LLM(tmp_path, backend="replay", window=4, device="cpu", max_len=128)
    assert llm.drafter == "mtp"  # "auto" found the trained head
    out = llm.generate(["def main():\n"], max_new_tokens=8)[0]
    assert len(out.token_ids) == 8 and isinstance(out.text, str)
    assert llm.decode(llm.encode("héllo wörld\n")) == "héllo wörld\n"  # byte-level round trip
