"""Benchmark headers, tables, JSON and plots."""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import subprocess
from pathlib import Path

import torch

from .._io import write_text

COMMIT_ENV = "REPLAYSSM_COMMIT"


def environment() -> dict:
    """Versions, GPU, date, the commit (``$REPLAYSSM_COMMIT`` when set: a copied checkout, as on the device machine,
    may carry stale git metadata, seen there on 2026-11-30; else ``git rev-parse``) and the ``REPLAYSSM_*``
    switches set in the environment (``switches``: e.g. ``REPLAYSSM_VERIFY_DIF``, which changes a kernel's path)."""
    commit = os.environ.get(COMMIT_ENV, "")
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=Path(__file__).parent, timeout=5).stdout.strip()  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            commit = ""
    import triton

    from .. import __version__

    return {
        "replayssm": __version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "commit": commit or "unknown",
        "switches": {k: v for k, v in sorted(os.environ.items()) if k.startswith("REPLAYSSM_") and k != COMMIT_ENV},
    }


def header(env: dict) -> str:
    sw = " ".join(f"{k}={v if len(v) <= 24 else '...'}" for k, v in env.get("switches", {}).items())  # (paths: JSON)
    return (f"{env['gpu']} | replayssm {env.get('replayssm', '?')} commit {env['commit']} | torch {env['torch']} | "
            f"triton {env['triton']} | {env['date']}" + (f" | {sw}" if sw else ""))  # fmt: skip


def format_table(rows: list[dict], cols: list[tuple[str, str, str]]) -> str:
    """cols: (key, title, format spec)."""
    widths = [max(len(t), 9) for _, t, _ in cols]
    lines = ["  ".join(t.rjust(w) for (_, t, _), w in zip(cols, widths))]
    for r in rows:
        cells = []
        for (k, _, f), w in zip(cols, widths):
            v = r.get(k)
            cells.append(("-" if v is None else format(v, f)).rjust(w))
        lines.append("  ".join(cells))
    return "\n".join(lines)


def write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(payload, indent=2, default=str))


def plot_lines(path: Path, panels: list[tuple[str, list[dict], list[tuple[str, str]]]], xkey: str, ylabel: str,
               title: str, *, ncols: int | None = None, yscale: str = "log") -> None:  # fmt: skip
    """One subplot per panel: (panel title, rows, [(key, label)]) drawn against ``xkey`` (log2 axis), ``ncols`` to
    a row (default: all in one row). ``yscale="symlog"`` keeps zeros visible: linear below a decade under the
    smallest positive value, logarithmic above. Raises ImportError without matplotlib."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = min(ncols or len(panels), len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.5 * ncols, 4.5 * nrows), squeeze=False, layout="constrained")
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, (ptitle, rows, series) in zip(axes.flat, panels):
        for key, label in series:
            pts = [(r[xkey], r[key]) for r in rows if r.get(key) is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=label)
        ax.set_xscale("log", base=2)
        if yscale == "symlog":
            positive = [r[k] for r in rows for k, _ in series if r.get(k)]
            ax.set_yscale("symlog", linthresh=10 ** (math.floor(math.log10(min(positive))) - 1) if positive else 1e-12)
            ax.set_ylim(0, 3 * max(positive) if positive else 1e-11)
        else:
            ax.set_yscale(yscale)
        ax.set_xlabel(xkey)
        ax.set_ylabel(ylabel)
        ax.set_title(textwrap.fill(ptitle, 60), fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(textwrap.fill(title, int(11 * 5.5 * ncols)), fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
