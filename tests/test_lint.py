"""The repository is ``ruff check`` and ``ruff format`` clean (the ruff pinned in the ``test`` extra: another
release may format differently). Markdown code blocks count: ``ruff format`` formats them too."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_the_repository_is_ruff_clean(args):
    done = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"ruff {' '.join(args)} failed:\n{done.stdout[-4000:]}{done.stderr[-2000:]}"
