"""Every user error of the CLI: exit status 2 and one line on stderr that names the flag, no traceback."""

import subprocess
import sys

import pytest

from replayssm.cli import main
from replayssm.cli.common import UsageError
from replayssm.tiny import TINY_MODEL

TINY = str(TINY_MODEL)
M122 = ["memory", "--model", "qwen3.5-122b-a10b"]
GEN = ["generate", "--model", TINY, "--prompt", "x"]

# (argv, the flag the message must name, a phrase the message must hold)
CASES = [
    (M122 + ["--budget-gib", "-5"], "--budget-gib", "> 0"),
    (M122 + ["--budget-gib", "0"], "--budget-gib", "> 0"),
    (M122 + ["--budget-gib", "nan"], "--budget-gib", "> 0"),
    (M122 + ["--window", "-1"], "--window", "from 1 to 64"),
    (M122 + ["--window", "9"], "--ring", "at least 2 x --window = 18"),
    (M122 + ["--window", "9", "--ring", "16"], "--ring 32", "--window of at most 8"),
    (M122 + ["--ring", "24"], "--ring", "power of two"),
    (M122 + ["--context", "-100"], "--context", "from 0 to 16777216"),
    (M122 + ["--tp", "0"], "--tp", "from 1 to 1024"),
    (M122 + ["--tp", "3"], "--tp 3", "one of 1, 2, 4, 8, 16"),
    (M122 + ["--tp", "two"], "--tp", "got 'two'"),
    (M122 + ["--dtype", "int8"], "--dtype", "invalid choice"),
    (["memory", "--model", "qwen9"], "--model qwen9", "neither a preset"),
    (["memory"], "--model", "required"),
    (["drift", "--tokens", "16"], "--every 32", "<= --tokens 16"),
    (["drift", "--tokens", "0"], "--tokens", "from 1 to 1048576"),
    (["drift", "--every", "0"], "--every", ">= 1"),
    (["drift", "--prompts", "4"], "--prompts", "from 1 to 3"),
    (["drift", "--window", "1"], "--window", "from 2 to 64"),
    (["drift", "--ring", "8", "--window", "8"], "--ring 8", "at least 2 x --window = 16"),
    (["drift", "--model", "random:qwen3.5-4b"], "--model random:qwen3.5-4b", "random:PRESET:LAYERS"),
    (["drift", "--model", "random:qwen3.5-4b:2"], "--model random:qwen3.5-4b:2", "layers must be >= 4"),
    (["drift", "--model", "random:qwen3.5-35b-a3b:8"], "--model random:qwen3.5-35b-a3b:8", "MoE"),
    (["drift", "--model", "/no/such/folder"], "--model /no/such/folder", "no such folder"),
    (["drift", "--device", "tpu"], "--device", "cpu, cuda or cuda:N"),
    (["generate", "--model", TINY + "/config.json", "--prompt", "x"], "--model", f"--model {TINY}"),
    (["generate", "--model", "/no/such/folder", "--prompt", "x"], "--model", "no such folder"),
    (GEN[:2] + ["/tmp", "--prompt", "x"], "--model /tmp", "no config.json"),
    (GEN + ["--max-len", "64", "--prompt", "y" * 5000], "--max-len 64", "the prompt is 5000 tokens"),
    (GEN + ["--max-new-tokens", "60", "--max-len", "64"], "--max-len 64", "raise --max-len"),
    (GEN + ["--prompt", ""], "--prompt", "must not be empty"),
    (GEN + ["--window", "0"], "--window", "from 1 to 64"),
    (GEN + ["--window", "16"], "--ring 16", "at least 2 x --window = 32"),
    (GEN + ["--ring", "3"], "--ring", "power of two"),
    (GEN + ["--temperature", "-1"], "--temperature", ">= 0"),
    (GEN + ["--max-new-tokens", "0"], "--max-new-tokens", ">= 1"),
    (GEN + ["--max-len", "1"], "--max-len", ">= 2"),
    (GEN + ["--seed", "-1"], "--seed", ">= 0"),
    (GEN + ["--backend", "fast"], "--backend", "invalid choice"),
    (["demo", "--max-new-tokens", "0"], "--max-new-tokens", "from 1 to 4096"),
    (["demo", "--window", "9"], "--ring 16", "at least 2 x --window = 18"),
    (["demo", "--layer", "--steps", "0"], "--steps", ">= 1"),
    (["demo", "--layer", "--batch", "0"], "--batch", "from 1 to 4096"),
    (["demo", "--layer", "--ring", "12"], "--ring", "power of two"),
    (["demo", "--device", "cuda:x"], "--device", "cpu, cuda or cuda:N"),
    (["bench", "e2e", "--window", "1"], "--window", "from 2 to 64"),
    (["bench", "e2e", "--concurrency", "8", "0"], "--concurrency", "from 1 to 8192"),
    (["bench", "e2e", "--mean-accepted", "5"], "--mean-accepted 5.0", "<= --window 4"),
    (["bench", "e2e", "--capacity-budget-gib", "0"], "--capacity-budget-gib", "> 0"),
    (["bench", "e2e", "--preset", "qwen3.5-35b-a3b", "--layers", "2"], "--preset qwen3.5-35b-a3b", ">= 4"),
    (["bench", "e2e", "--preset", "llama"], "--preset llama", "choose from"),
    (["bench", "kernels", "--batches", "8", "0"], "--batches", "from 1 to 65536"),
    (["bench", "kernels", "--rings", "12"], "--rings", "power of two"),
    (["bench", "kernels", "--target-ms", "0"], "--target-ms", "> 0"),
    (["bench", "kernels", "--H", "0"], "--H", "from 1 to 4096"),
    (["bench", "kernels", "--device", "cpu", "--dtype", "bf16"], "--dtype bf16", "fp16 or fp32"),
    (["bench", "kernels", "--device", "cpu", "--peers", "0.4"], "--peers", "known: 0.5.16, 0.5.23"),
    (["bench", "kernels", "--device", "cpu", "--sweep", "2x2", "4-1"], "--sweep 4-1", "WARPSxROWS[xSTAGES]"),
    (["bench", "kernels", "--device", "cpu", "--tile", "best"], "--tile best", "needs --sweep"),
    (["bench", "peers", "--releases", "0.4"], "--releases", "known: 0.5.16, 0.5.23"),
    (["demo", "--no-such-flag"], "--no-such-flag", "unrecognized"),
    (["frobnicate"], "frobnicate", "invalid choice"),
]


@pytest.mark.parametrize("argv, flag, phrase", CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_user_error_is_one_line_exit_2(argv, flag, phrase, capsys):
    assert main(argv) == 2
    cap = capsys.readouterr()
    lines = [ln for ln in cap.err.strip().splitlines() if ln.strip()]
    progress_bars = [ln for ln in lines[:-1] if ln.startswith("loading ")]  # generate's model load
    assert len(lines) == 1 + len(progress_bars), cap.err
    line = lines[-1]
    assert "error: " in line and flag in line and phrase in line, line
    assert "Traceback" not in cap.err + cap.out


def test_no_command_prints_the_help(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: replayssm") and "demo" in err and "docs/cli.md" in err


def test_debug_shows_the_exception(monkeypatch):
    with pytest.raises(UsageError, match="--tp"):
        main(["memory", "--model", "qwen3.5-4b", "--tp", "0", "--debug"])
    monkeypatch.setenv("REPLAYSSM_DEBUG", "1")
    with pytest.raises(UsageError, match="--budget-gib"):
        main(["memory", "--model", "qwen3.5-4b", "--budget-gib", "-1"])


COMMANDS = ["demo", "generate", "memory", "drift", "bench", "bench kernels", "bench peers", "bench e2e"]


def test_as_a_process_no_traceback_and_no_torch_for_help():
    """The installed entry point: exit 2 and one line; --help and --version never import torch (fast)."""
    bad = subprocess.run([sys.executable, "-m", "replayssm.cli", "memory", "--model", "qwen3.5-4b", "--tp", "0"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    code = (f"import sys; from replayssm.cli import main\nCOMMANDS = {COMMANDS!r}\n"
            "for argv in (['--help'], ['--version'], *[[*c.split(), '--help'] for c in COMMANDS]):\n"
            "    try: main(argv)\n    except SystemExit as e: assert e.code == 0\n"
            "assert 'torch' not in sys.modules, 'torch imported'")  # fmt: skip
    ok = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "replayssm 0.1.0" in ok.stdout and "``" not in ok.stdout
    assert all(f"usage: replayssm {c}" in ok.stdout for c in COMMANDS)
