"""The commands on valid input: memory's model forms, generate's streaming and its stop at end-of-sequence."""

import json
import shutil

import pytest

from replayssm.cli import main
from replayssm.tiny import TINY_MODEL


def test_memory_takes_a_preset_in_any_case_a_folder_or_a_config(capsys):
    outs = []
    for model in ("qwen3.5-4b", "Qwen3.5-4B", str(TINY_MODEL), str(TINY_MODEL / "config.json")):
        assert main(["memory", "--model", model, "--json"]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0] == {**outs[1], "model": "qwen3.5-4b"} and outs[0]["gdn_layers"] == 24
    assert outs[2]["gdn_layers"] == outs[3]["gdn_layers"] == 6 and outs[2]["per_request"] == outs[3]["per_request"]


def _tiny_with_eos(tmp_path, eos: int):
    folder = tmp_path / "tiny"
    shutil.copytree(TINY_MODEL, folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "eos_token_id": eos}))
    return str(folder)


def test_generate_streams_and_stops_at_eos(tmp_path, capsys):
    """The byte-level tokenizer: token id = byte. Declaring 't' the end-of-sequence token makes the first 't' of
    the continuation stop generation; --ignore-eos runs on to --max-new-tokens."""
    prompt = "def fib(n):\n    if n < 2:\n        return n\n"
    argv = ["generate", "--prompt", prompt, "--max-new-tokens", "12", "--device", "cpu", "--backend", "recurrent"]
    assert main([*argv, "--model", str(TINY_MODEL)]) == 0
    free = capsys.readouterr()
    text = free.out.removeprefix(prompt)[:-1]  # the command ends its output with a newline
    assert free.out.startswith(prompt) and len(text.encode()) == 12 and "12 tokens" in free.err
    assert "t" in text, "the continuation must hold a 't' for this test"
    eos_model = _tiny_with_eos(tmp_path, ord("t"))
    assert main([*argv, "--model", eos_model]) == 0
    stopped = capsys.readouterr()
    assert stopped.out.removeprefix(prompt)[:-1] == text[: text.index("t") + 1]
    assert "stopped at the end-of-sequence token" in stopped.err
    assert main([*argv, "--model", eos_model, "--ignore-eos"]) == 0
    assert capsys.readouterr().out.removeprefix(prompt)[:-1] == text


def test_demo_layer(tmp_path, capsys):
    """--json works with --layer too: the layer's numbers, in a folder it makes."""
    path = tmp_path / "new" / "layer.json"
    assert main(["demo", "--layer", "--steps", "6", "--device", "cpu", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "6/6 steps equal to the recurrent baseline" in out and f"wrote {path}" in out
    res = json.loads(path.read_text())
    assert res["steps"] == res["bitwise_steps"] == 6 and res["config"]["steps"] == 6 and res["config"]["ring_len"] == 16


@pytest.mark.slow  # six engine runs over nine prompts: about a minute of CPU
def test_demo_explains_a_cpu_run(tmp_path, capsys):
    """A short demo: every run's line as it ends, the CPU note, the summary; --json holds the same numbers."""
    assert main(["demo", "--max-new-tokens", "3", "--device", "cpu", "--json", str(tmp_path / "d.json")]) == 0
    out = capsys.readouterr().out
    assert "tokens/s below is no measure of speed" in out and "bench/results/2026-11-30-h200-e2e/" in out
    assert "every speculative run gave exactly the plain tokens: yes" in out
    assert "bitwise equal to the recurrent baseline's, every layer, after each of" in out and ": NO" not in out
    res = json.loads((tmp_path / "d.json").read_text())
    assert all(r["same_tokens_as_plain"] for r in res["runs"].values())
    for name in res["runs"]:
        assert name in out
