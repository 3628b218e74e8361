"""Every user error of the CLI: exit status 2 and one line on stderr that names the flag, no traceback."""

import re
import subprocess
import sys

import pytest

from replayssm.cli import main
from replayssm.tiny import TINY_MODEL
from tests.helpers.cli import assert_one_line_error

TINY = str(TINY_MODEL)
M122 = ["memory", "--model", "qwen3.5-122b-a10b"]
GEN = ["generate", "--model", TINY, "--prompt", "x"]
KCPU = ["bench", "kernels", "--device", "cpu", "--peers", "none"]
FILE = TINY + "/config.json"  # an existing file, never written by these cases
ASSETS = str(TINY_MODEL.parent)  # a folder of the repository that holds no config.json (only tiny/)

# (argv, the flag the message must name, a phrase the message must hold)
CASES = [
    (M122 + ["--budget-gib", "-5"], "--budget-gib", "> 0"),
    (M122 + ["--budget-gib", "0"], "--budget-gib", "> 0"),
    (M122 + ["--budget-gib", "nan"], "--budget-gib", "> 0"),
    (M122 + ["--window", "-1"], "--window", "from 1 to 64"),
    (M122 + ["--window", "9", "--ring", "16"], "--ring 32", "--window of at most 8"),
    (M122 + ["--ring", "24"], "--ring", "power of two"),
    (M122 + ["--context", "-100"], "--context", "from 0 to 16777216"),
    (M122 + ["--tp", "0"], "--tp", "from 1 to 1024"),
    (M122 + ["--tp", "3"], "--tp 3", "one of 1, 2, 4, 8, 16"),
    (M122 + ["--tp", "two"], "--tp", "got 'two'"),
    (M122 + ["--window", " 4"], "--window", "got ' 4'"),  # int() would take these three
    (M122 + ["--window", "1_0"], "--window", "got '1_0'"),
    (M122 + ["--window", "\uff14"], "--window", "an integer from 1 to 64"),  # a full-width 4
    (M122 + ["--budget-gib", "1_0"], "--budget-gib", "got '1_0'"),
    (M122 + ["--dtype", "int8"], "--dtype", "invalid choice"),
    (["memory", "--model", "qwen9"], "--model qwen9", "neither a preset"),
    (["bench", "e2e", "--peak-steps", "3"], "--peak-steps", "only with --peak"),
    (["demo", "--json", FILE + "/x.json"], f"--json {FILE}/x.json", "config.json is a file, not a folder"),
    (["bench", "peers", "--wheels", "/no/such.whl"], "--wheels /no/such.whl", "no such file or folder"),
    (["bench", "e2e", "--capacity-context", "9", "--capacity-budget-gib", "2"], "--capacity-context", "only with"),
    (KCPU + ["--rings", "65536"], "--rings", "from 2 to 1024"),
    (KCPU[:4] + ["--H", "2", "--HV", "4", "--K", "16", "--V", "16"], "--K 16 --V 16", "or pass --peers none"),
    (["memory"], "--model", "required"),
    (["drift", "--tokens", "16"], "--every 32", "<= --tokens 16"),
    (["drift", "--tokens", "0"], "--tokens", "from 1 to 1048576"),
    (["drift", "--every", "0"], "--every", ">= 1"),
    (["drift", "--prompts", "4"], "--prompts", "from 1 to 3"),
    (["drift", "--window", "1"], "--window", "from 2 to 64"),
    (["drift", "--ring", "8", "--window", "8"], "--ring 8", "at least 2 x --window = 16"),
    (["drift", "--model", "qwen3.5-4b"], "--model qwen3.5-4b", "a preset needs --layers N"),
    (["drift", "--model", "qwen3.5-4b", "--layers", "2"], "--layers", "must be an integer >= 4, got 2"),
    (["drift", "--model", "qwen3.5-4b", "--layers", "40"], "--model qwen3.5-4b --layers 40", "from 4 to 32"),
    (["drift", "--model", "qwen3.5-4b", "--layers", "0"], "--layers", "an integer >= 4"),
    (["drift", "--model", "qwen3.5-4b", "--layers", "1000"], "--layers 1000", "from 4 to 32"),
    (["drift", "--model", "foo", "--layers", "4"], "--layers 4", "only with a preset --model (qwen3.5-4b, qwen3.5-9b"),
    (["drift", "--out", "/proc/x"], "--out /proc/x", "cannot write a folder there"),
    (["drift", "--out", FILE], f"--out {FILE}", "exists and is not a folder"),
    (["drift", "--out", FILE + "/sub"], f"--out {FILE}/sub", "cannot write a folder there"),
    (["drift", "--tag", ""], "--tag", "plain file name stem"),
    (["drift", "--tag", "../../etc/x"], "--tag", "no '/'"),
    (["drift", "--tag", ".hidden"], "--tag", "not starting with '.'"),
    (["drift", "--model", "qwen3.5-35b-a3b", "--layers", "8"], "--model qwen3.5-35b-a3b", "MoE"),
    (["drift", "--model", "/no/such/folder"], "--model /no/such/folder", "no such folder"),
    (["drift", "--device", "tpu"], "--device", "cpu, cuda or cuda:N"),
    (["generate", "--model", TINY + "/config.json", "--prompt", "x"], "--model", f"--model {TINY}"),
    (["generate", "--model", "/no/such/folder", "--prompt", "x"], "--model", "no such folder"),
    (GEN[:2] + [ASSETS, "--prompt", "x"], f"--model {ASSETS}", "no config.json"),
    (GEN[:3] + ["--max-len", "64", "--prompt", "y" * 5000], "--prompt", "the prompt is 5000 tokens"),
    (GEN + ["--max-new-tokens", "60", "--max-len", "64"], "--max-len 64", "raise --max-len"),
    (GEN[:3] + ["--prompt", ""], "--prompt", "must not be empty"),
    (GEN + ["--window", "0"], "--window", "from 1 to 64"),
    (GEN + ["--window", "16", "--ring", "16"], "--ring 16", "at least 2 x --window = 32"),
    (GEN + ["--ring", "3"], "--ring", "power of two"),
    (GEN + ["--temperature", "-1"], "--temperature", "from 0 to 3.4028234663852886e+38"),
    (GEN + ["--max-new-tokens", "0"], "--max-new-tokens", ">= 1"),
    (GEN + ["--max-len", "1"], "--max-len", ">= 2"),
    (GEN + ["--seed", "-1"], "--seed", "from 0 to 9223372036854775807"),
    (GEN + ["--backend", "fast"], "--backend", "invalid choice"),
    (GEN + ["--draft-vocab", "100000"], "--draft-vocab", "from 1 to 259"),
    (GEN + ["--window", "1", "--draft-vocab", "8"], "--draft-vocab", "--window 1 is plain decoding"),
    (GEN + ["--win", "2"], "unrecognized arguments: --win 2", "see replayssm generate --help"),
    (["memory", "--model", "qwen3.5-4b", "--budget-gib", "1e300"], "--budget-gib", "<= 1048576"),
    (["memory", "--model", "qwen3.5-4b", "--bogus"], "unrecognized arguments: --bogus", "replayssm memory --help"),
    (["drift", "--device", "cpu:7"], "--device", "cpu, cuda or cuda:N"),
    (["demo", "--layer", "--steps", "2", "--json", ""], "--json", "empty"),
    (["bench", "kernels", "--device", "cpu", "--K", "15"], "--K", "power of two >= 16"),
    (["bench", "kernels", "--device", "cpu", "--V", "8"], "--V", "power of two >= 16"),
    (["bench", "kernels", "--device", "cpu", "--sweep", "2x2"], "--sweep", "needs --device cuda"),
    (["bench", "kernels", "--device", "cpu", "--sweep"], "--sweep", "expected at least one argument"),
    (["bench", "kernels", "--device", "cpu", "--peers", "none", "0.5.23"], "--peers", "'none' stands alone"),
    (["bench", "peers", "--peers-dir", "/proc/x"], "--peers-dir /proc/x", "cannot write a folder there"),
    (["bench", "peers", "--dest", "/proc/x"], "--dest /proc/x", "now spelled --peers-dir /proc/x"),  # its old name
    (["bench", "e2e", "--draft-vocab", "8"], "--draft-vocab", "only for --modes replay-mtp"),
    (["demo", "--max-new-tokens", "0"], "--max-new-tokens", "from 1 to 4096"),
    (["demo", "--layer", "--window", "9", "--ring", "16"], "--ring 16", "at least 2 x --window = 18"),
    (["demo", "--json", "/proc/d.json"], "--json /proc/d.json", "cannot write a file there"),
    (["demo", "--layer", "--json", "/tmp"], "--json /tmp", "a folder; give a file name"),
    (["demo", "--steps", "5"], "--steps", "not used without --layer"),
    (["demo", "--batch", "2", "--seed", "1"], "--batch --seed", "not used without --layer"),
    (["demo", "--ring", "32"], "--ring", "or add --layer"),
    (["demo", "--layer", "--max-new-tokens", "8"], "--max-new-tokens", "not used with --layer"),
    (["demo", "--layer", "--steps", "0"], "--steps", "from 1 to 1000000"),
    (["demo", "--layer", "--batch", "0"], "--batch", "from 1 to 4096"),
    (["demo", "--layer", "--ring", "12"], "--ring", "power of two"),
    (["demo", "--device", "cuda:x"], "--device", "cpu, cuda or cuda:N"),
    (["bench", "e2e", "--window", "1"], "--window", "from 2 to 64"),
    (["bench", "e2e", "--concurrency", "8", "0"], "--concurrency", "from 1 to 8192"),
    (["bench", "e2e", "--mean-accepted", "5"], "--mean-accepted 5.0", "<= --window 4"),
    (["bench", "e2e", "--capacity-budget-gib", "0"], "--capacity-budget-gib", "> 0"),
    (["bench", "e2e", "--model", "qwen3.5-35b-a3b", "--layers", "2"], "--layers", "must be an integer >= 4, got 2"),
    (["bench", "e2e", "--model", "qwen3.5-35b-a3b", "--layers", "44"], "--model qwen3.5-35b-a3b", "from 4 to 40"),
    (["bench", "e2e", "--model", "qwen3.5-35b-a3b", "--layers", "1000"], "--layers 1000", "from 4 to 40"),
    (["bench", "e2e", "--tag", "a/b"], "--tag", "no '/'"),
    (["bench", "e2e", "--model", "llama"], "--model llama", "choose from"),
    (["bench", "kernels", "--batches", "8", "0"], "--batches", "from 1 to 65536"),
    (["bench", "kernels", "--rings", "12"], "--rings", "power of two"),
    (["bench", "kernels", "--target-ms", "0"], "--target-ms", "> 0"),
    (["bench", "kernels", "--H", "0"], "--H", "from 1 to 4096"),
    (["bench", "kernels", "--device", "cpu", "--dtype", "bf16"], "--dtype bf16", "fp16 or fp32"),
    (["bench", "kernels", "--device", "cpu", "--peers", "0.4"], "--peers", "known: 0.5.16, 0.5.23"),
    (["bench", "kernels", "--device", "cpu", "--sweep", "2x2", "4-1"], "--sweep 4-1", "WARPSxROWS[xSTAGES"),
    (["bench", "kernels", "--device", "cpu", "--tile", "best"], "--tile best", "needs --sweep"),
    (KCPU + ["--H", "3", "--HV", "4"], "--HV 4", "multiple of --H 3"),
    (KCPU + ["--windows", "16", "--rings", "16"], "--windows 16 --rings 16", "add --rings 32"),
    (KCPU + ["--out", FILE], f"--out {FILE}", "exists and is not a folder"),
    (KCPU + ["--tag", ""], "--tag", "plain file name stem"),
    (["bench", "peers", "--releases", "0.4"], "--releases", "known: 0.5.16, 0.5.23"),
    (["demo", "--no-such-flag"], "--no-such-flag", "unrecognized"),
    (["frobnicate"], "frobnicate", "invalid choice"),
]


@pytest.mark.parametrize("argv, flag, phrase", CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_user_error_is_one_line_exit_2(argv, flag, phrase, capsys):
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr(), flag, phrase)


def test_no_command_prints_the_help(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: replayssm") and "demo" in err and "docs/cli.md" in err


def test_debug_shows_the_exception_and_still_exits_2(monkeypatch, capsys):
    assert main(["memory", "--model", "qwen3.5-4b", "--tp", "0", "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "UsageError: --tp: must be an integer" in err
    assert err.strip().splitlines()[-1].startswith("replayssm memory: error: --tp")
    monkeypatch.setenv("REPLAYSSM_DEBUG", "1")
    assert main(["memory", "--model", "qwen3.5-4b", "--budget-gib", "-1"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_e2e_checks_its_out_folder_before_the_run(monkeypatch, capsys):
    """bench e2e needs a GPU; with one, a bad --out is refused before the model is built."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert main(["bench", "e2e", "--out", FILE]) == 2
    assert f"--out {FILE}: exists and is not a folder" in capsys.readouterr().err


COMMANDS = ["demo", "generate", "memory", "drift", "bench", "bench kernels", "bench peers", "bench e2e"]


def test_as_a_process_no_traceback_and_no_torch_for_help():
    """The installed entry point: exit 2 and one line; --help and --version never import torch (fast)."""
    bad = subprocess.run([sys.executable, "-m", "replayssm.cli", "memory", "--model", "qwen3.5-4b", "--tp", "0"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    argv = [sys.executable, "-m", "replayssm", "memory", "--model", "qwen3.5-4b", "--tp", "0", "--debug"]
    debug = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert debug.returncode == 2 and "Traceback" in debug.stderr
    code = (f"import sys; from replayssm.cli import main\nCOMMANDS = {COMMANDS!r}\n"
            "for argv in (['--help'], ['--version'], *[[*c.split(), '--help'] for c in COMMANDS]):\n"
            "    try: main(argv)\n    except SystemExit as e: assert e.code == 0\n"
            "assert 'torch' not in sys.modules, 'torch imported'")  # fmt: skip
    ok = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "replayssm 0.1.0" in ok.stdout and "``" not in ok.stdout
    assert all(f"usage: replayssm {c}" in ok.stdout for c in COMMANDS)


def test_repeated_e2e_values_run_once_and_a_tiny_budget_fits_nothing(monkeypatch, capsys):
    """A review found two tracebacks after the bench configs began to check their fields: ``--concurrency 8 8``
    (E2EConfig refuses a repeat; the kernels bench already ran each value once) and ``--budget-gib 1e-10`` (0 bytes
    after rounding down, refused by plan_memory; now a one-line error, a budget under a byte)."""
    import torch

    from replayssm.bench import e2e

    seen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(e2e, "run_e2e", lambda cfg, *a, **k: seen.append(cfg) or {"rows": []})
    main(["bench", "e2e", "--concurrency", "8", "8", "64", "--modes", "plain", "replay", "plain"])
    capsys.readouterr()
    assert seen and seen[0].concurrency == (8, 64) and seen[0].modes == ("plain", "replay")
    assert main(["memory", "--model", "qwen3.5-4b", "--budget-gib", "1e-9"]) == 0  # 1 byte: nothing fits
    assert re.search(r"requests that fit in 1 B .*\s0\s+0\n", capsys.readouterr().out)
    assert main(["memory", "--model", "qwen3.5-4b", "--budget-gib", "1e-10"]) == 2  # under a byte: refused since
    assert "less than a byte" in capsys.readouterr().err  # the thirty-second session (it was planned as 1 B)


def test_e2e_peak_flags_default_with_peak(monkeypatch, capsys):
    """--capacity-context and --peak-steps only set up --peak (refused without it, above); with it they default to
    E2EConfig's values."""
    import torch

    from replayssm.bench import e2e

    seen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(e2e, "run_e2e", lambda cfg, *a, **k: seen.append(cfg) or {"rows": []})
    assert main(["bench", "e2e", "--peak"]) == 0
    assert main(["bench", "e2e", "--peak", "--peak-steps", "3", "--capacity-context", "64"]) == 0
    capsys.readouterr()
    want = e2e.E2EConfig()
    assert (seen[0].capacity_context, seen[0].peak_steps) == (want.capacity_context, want.peak_steps)
    assert (seen[1].capacity_context, seen[1].peak_steps) == (64, 3)


@pytest.mark.parametrize(
    "env, phrase",
    [({"REPLAYSSM_IMPL": "bogus"}, "must be unset, auto or triton"),
     ({"REPLAYSSM_IMPL": "triton", "TRITON_INTERPRET": "0"}, "also set TRITON_INTERPRET=1")],
)  # fmt: skip
def test_a_bad_replayssm_impl_is_one_line(env, phrase, monkeypatch, capsys):
    """A first-hour trial: REPLAYSSM_IMPL=bogus was a traceback, REPLAYSSM_IMPL=triton without the interpreter on a
    CPU Triton's own traceback ("0 active drivers")."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(["demo", "--layer", "--steps", "2", "--device", "cpu"]) == 2
    assert_one_line_error(capsys.readouterr(), "REPLAYSSM_IMPL", phrase)
    assert main(["memory", "--model", "tiny"]) == 0  # a command that runs no kernel is not refused (a review)


def test_the_kernels_on_cpu_tensors_without_the_interpreter_are_a_named_error(monkeypatch):
    """The Python API's side of the same: a ValueError saying what to set, not Triton's driver error."""
    import torch

    from replayssm.ops import _gluon
    from replayssm.ops._common import use_triton

    monkeypatch.setattr(_gluon, "INTERPRET", False)
    with pytest.raises(ValueError, match="set TRITON_INTERPRET=1 before replayssm is imported"):
        use_triton("triton", torch.zeros(1))
    assert use_triton("reference", torch.zeros(1)) is False


def test_the_cli_bounds_are_the_engines():
    """--seed and --temperature are bounded in the CLI without importing torch; the bounds are the engine's."""
    from replayssm.cli.common import SEED_MAX, TEMPERATURE_MAX
    from replayssm.engine.checks import TEMPERATURE_MAX as ENGINE_MAX
    from replayssm.engine.checks import check_seed, check_temperature

    assert TEMPERATURE_MAX == ENGINE_MAX and check_temperature(TEMPERATURE_MAX) == TEMPERATURE_MAX
    assert check_seed(SEED_MAX) == SEED_MAX
    with pytest.raises(ValueError):
        check_seed(SEED_MAX + 1)
