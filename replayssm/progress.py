"""Progress bars (tqdm) on stderr, shared by the command line and the benchmarks; no torch import."""

from __future__ import annotations

import sys


def progress(total: int | None, desc: str, unit: str = "tok", *, unit_scale: bool = False):
    """A progress bar with an ETA on stderr. When stderr is not a terminal (a log file) it is redrawn every
    30 s instead of every 0.1 s."""
    from tqdm import tqdm

    tty = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, file=sys.stderr, dynamic_ncols=True,
                mininterval=0.1 if tty else 30)  # fmt: skip
