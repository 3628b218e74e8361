"""What README and docs quote agrees with what the code prints now, and the names they write import."""

import importlib
import re
from pathlib import Path

from replayssm.cli import main
from replayssm.models.memory import plan_memory
from replayssm.models.presets import preset

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = {p.name: p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))}
MEMORY_CMD = ["memory", "--model", "qwen3.5-122b-a10b", "--tp", "1", "--window", "4"]


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_readme_memory_numbers_are_what_the_command_prints():
    assert "`replayssm " + " ".join(MEMORY_CMD) + "`" in README
    p = plan_memory(preset("qwen3.5-122b-a10b"), tp=1, T=4, L=16, budget_bytes=40 * 2**30)
    mb = lambda b: f"{b / 1e6:.0f} MB"
    rec, rep = p["per_request"]["recurrent"], p["per_request"]["replay"]
    snaps, ring = p["scratch_per_request"]["recurrent"], p["scratch_per_request"]["replay"]
    fit = p["requests_fit"]
    want = (f"{mb(rec)} per request for the recurrent backend ({mb(snaps)} of it speculative snapshots) vs {mb(rep)} "
            f"for ReplaySSM ({mb(ring)} of it the ring); in a 40 GiB budget, {fit['recurrent']} vs {fit['replay']} "
            "requests.")  # fmt: skip
    assert want in _flat(README), want


def test_cli_doc_shows_the_memory_table_as_printed(capsys):
    assert main(MEMORY_CMD) == 0
    out = capsys.readouterr().out.strip()
    assert f"```\n{out}\n```" in DOCS["cli.md"]


def test_readme_names_the_drift_run_that_was_committed():
    results = (ROOT / "bench/results/2026-11-29-cpu-drift/README.md").read_text()
    run = re.search(r"replayssm drift --model tiny (--tokens \d+ --every \d+ --prompts \d+)", results).group(1)
    assert f"the published run (`bench/results/2026-11-29-cpu-drift/`) is `{run}`" in README
    assert "15 checks, up to 15,360 tokens" in results and "the last check at 15,360" in README


def test_dotted_names_in_the_docs_import_as_written():
    pattern = re.compile(r"`((?:replayssm\.)?(?:ops|models|engine|state|bench|cli)(?:\.[A-Za-z_]\w*)+)")
    names = {m.group(1) for text in (README, *DOCS.values()) for m in pattern.finditer(text)}
    assert len(names) > 10
    bad = []
    for name in sorted(names):
        parts = name.removeprefix("replayssm.").split(".")
        for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
            try:
                obj = importlib.import_module("replayssm." + ".".join(parts[:cut]))
                break
            except ImportError:
                continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            bad.append(name)
    assert not bad, f"written in README/docs but not importable as written: {bad}"
