"""The GPU kernels compile for an H200 (sm_90) on a CPU-only machine, within the register budget the verify's
launch assumes (128 per thread: four programs per SM) and without spills (scripts/sm90_compile.py)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def compile_env(**switches: str) -> dict:
    """The environment of the compile script: the interpreter off, the repository importable (also where replayssm
    is not installed, only checked out), and ``switches``."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return {**env, **switches}


@pytest.mark.parametrize(
    "T, one, B",
    [
        (1, "1", 256),
        (1, "0", 256),
        (2, "0", 256),
        (4, "0", 256),
        (4, "1", 256),
        (8, "0", 256),
        (1, "1", 1),
        (4, "1", 4),
        (4, "1", 8),
    ],
)
def test_the_verify_compiles_for_sm90_without_spills(T, one, B):
    """Both ways of the verify (ops/verify_launch.py, ``one_launch``): staged (the prep launch, then the main
    kernel) and one launch (the main kernel alone, computing the window's terms), at the window lengths where
    the launch table uses each, and T=1 and T=4 both ways; B=1 and B=4 split heads over programs of one or two warps."""
    env = compile_env(REPLAYSSM_VERIFY_ONE_LAUNCH=one)
    cmd = [sys.executable, str(ROOT / "scripts" / "sm90_compile.py"), "--T", str(T), "--B", str(B)]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    usage = {m[0]: (int(m[1]), int(m[2])) for m in re.findall(r"^(\w+)\s+regs (\d+) stack (\d+)", run.stdout, re.M)}
    assert set(usage) == ({"verify"} if one == "1" else {"prep", "verify"}), run.stdout
    regs, stack = usage["verify"]
    assert regs <= 128 and stack == 0, usage
    assert all(u[1] == 0 for u in usage.values()), usage


@pytest.mark.parametrize("T, L", [(1, 32), (4, 32)])
def test_the_staged_verify_fits_four_programs_per_sm_at_l32(T, L):
    """Staged at L=32, the main kernel's stream buffers live in its key rows (``verify_launch.pack_in_keys``): at most
    57,344 bytes of shared memory a program, the most four programs fit on an H200 SM (228 KiB, 1 KiB reserved a
    program). Without the packing it took 59,172 bytes at T=1 and 63,936 at T=4: three programs per SM."""
    env = compile_env(REPLAYSSM_VERIFY_ONE_LAUNCH="0")
    cmd = [sys.executable, str(ROOT / "scripts" / "sm90_compile.py"), "--T", str(T), "--L", str(L), "--B", "256"]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    shared = int(re.search(r"^verify\s+regs \d+ stack 0 local \d+ shared (\d+)", run.stdout, re.M).group(1))
    assert shared <= 57344, run.stdout


@pytest.mark.parametrize("layers, B", [(8, 8), (1, 4)])
def test_fold_ahead_compiles_for_sm90_without_spills(layers, B):
    """``gdn_fold_ahead``'s kernel (ops/fold_ahead.py) over eight layers at B=8, where the pool uses it, and over one
    layer (the GPU soak's pool: a kernel specialised on one layer once failed Triton's lowering)."""
    env = compile_env()
    cmd = [sys.executable, str(ROOT / "scripts" / "sm90_compile.py"), "--T", "4", "--B", str(B), "--fold-ahead",
           "--layers", str(layers)]  # fmt: skip
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    usage = {m[0]: (int(m[1]), int(m[2])) for m in re.findall(r"^(\w+)\s+regs (\d+) stack (\d+)", run.stdout, re.M)}
    assert {"fold_ahead", "mark"} <= set(usage), run.stdout
    assert usage["fold_ahead"][1] == 0 and usage["mark"][1] == 0, usage
