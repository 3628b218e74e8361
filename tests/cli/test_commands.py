"""The commands on valid input: memory's model forms, generate's streaming and its stop at end-of-sequence."""

import json
import shutil
from pathlib import Path

import pytest

from replayssm.cli import main
from replayssm.cli.demo import ENGINE_RESULTS
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
    assert "tokens/s below is no measure of speed" in out and ENGINE_RESULTS in out
    assert (Path(__file__).parents[2] / ENGINE_RESULTS / "e2e_27b.json").is_file()  # the folder it cites holds the run
    assert "every speculative run gave exactly the plain tokens: yes" in out
    assert "bitwise equal to the recurrent baseline's, every layer, after each of" in out and ": NO" not in out
    res = json.loads((tmp_path / "d.json").read_text())
    assert all(r["same_tokens_as_plain"] for r in res["runs"].values())
    for name in res["runs"]:
        assert name in out


def test_generate_stops_at_any_of_a_list_of_eos_tokens(tmp_path, capsys):
    """config.json may list several end tokens (as Qwen3.5's does): the first of any of them stops generation."""
    prompt = "def fib(n):\n    if n < 2:\n        return n\n"
    argv = ["generate", "--prompt", prompt, "--max-new-tokens", "12", "--device", "cpu", "--backend", "recurrent"]
    assert main([*argv, "--model", "tiny"]) == 0  # 'tiny' names the embedded model, as in drift
    text = capsys.readouterr().out.removeprefix(prompt)[:-1]
    first = text[0]
    later = next(c for c in text[1:] if c != first)
    eos_model = _tiny_with_eos(tmp_path, [ord(later), ord(first)])  # the listed second one comes first
    assert main([*argv, "--model", eos_model]) == 0
    stopped = capsys.readouterr()
    assert stopped.out.removeprefix(prompt)[:-1] == first and "end-of-sequence token" in stopped.err


@pytest.mark.parametrize("eos", [99999, [258, "x"], [], True])
def test_generate_refuses_a_bad_eos_token_in_one_line(tmp_path, capsys, eos):
    model = _tiny_with_eos(tmp_path, eos)
    assert main(["generate", "--model", model, "--prompt", "x", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--model {model}" in err and "eos_token_id" in err


@pytest.mark.parametrize("cmd", ["generate", "drift"])
def test_a_corrupt_tokenizer_or_config_is_one_line(tmp_path, capsys, cmd):
    folder = tmp_path / "tiny"
    shutil.copytree(TINY_MODEL, folder)
    (folder / "tokenizer.json").write_text("{not json")
    extra = ["--prompt", "x"] if cmd == "generate" else ["--tokens", "4", "--every", "4"]
    assert main([cmd, "--model", str(folder), "--device", "cpu", *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tokenizer" in err and f"--model {folder}" in err
    shutil.copy(TINY_MODEL / "tokenizer.json", folder / "tokenizer.json")
    (folder / "config.json").write_text("[1, 2]")
    assert main([cmd, "--model", str(folder), "--device", "cpu", *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "JSON object" in err


def test_the_ring_defaults_to_fit_the_window(capsys):
    """--ring not given: 16, or the least power of two >= 2 x --window (a given --ring is taken as it is)."""
    sizes = []
    for window in ("4", "8", "9", "33"):
        assert main(["memory", "--model", "qwen3.5-4b", "--window", window, "--json"]) == 0
        sizes.append(json.loads(capsys.readouterr().out)["ring_len"])
    assert sizes == [16, 16, 32, 128]


def test_bench_kernels_that_times_nothing_fails(tmp_path, capsys):
    """--max-seconds that runs out before the first point: exit 1 and say so (not a silent success)."""
    argv = ["bench", "kernels", "--device", "cpu", "--peers", "none", "--H", "1", "--HV", "1", "--K", "16",
            "--V", "16", "--windows", "2", "--rings", "4", "--batches", "1", "--max-seconds", "1e-9",
            "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) == 1
    assert "nothing was timed" in capsys.readouterr().err


def test_bench_kernels_on_the_cpu_at_real_widths_says_it_is_slow(tmp_path, capsys, monkeypatch):
    """A note, not an error: the run itself is legitimate (here cut short by --max-seconds). It names what runs:
    with --peers none replayssm's ops run as their PyTorch references, unless REPLAYSSM_IMPL=triton puts them in
    Triton's interpreter."""
    argv = ["bench", "kernels", "--device", "cpu", "--peers", "none", "--windows", "2", "--rings", "4",
            "--batches", "1", "--max-seconds", "1e-9", "--out", str(tmp_path)]  # fmt: skip
    monkeypatch.delenv("REPLAYSSM_IMPL", raising=False)
    main(argv)
    assert "runs the PyTorch references at real widths" in capsys.readouterr().err
    monkeypatch.setenv("REPLAYSSM_IMPL", "triton")
    main(argv)
    assert "runs the Triton interpreter at real widths" in capsys.readouterr().err
