"""The README and docs/ as a stranger uses them: the API snippet runs as written, every command they list
parses, the two commands at the top stay two (the second is exactly what CI runs), no link leaves the repo."""

import ast
import re
import shlex
from pathlib import Path

import pytest

from replayssm.cli import build_parser
from replayssm.ops._gluon import INTERPRET

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = {p.name: p.read_text() for p in (ROOT / "docs").glob("*.md")}


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_api_snippet_runs_as_written(monkeypatch, capsys):
    (snippet,) = _blocks(README.split("## Use it from Python")[1].split("\n## ")[0], "python")
    monkeypatch.chdir(ROOT)
    exec(compile(snippet, "README.md", "exec"), {})
    text, stats = capsys.readouterr().out.rsplit("\n", 2)[:2]
    assert text.strip() and re.fullmatch(r"32 tokens in \d+ steps, mean accepted \d\.\d\d of 4", stats), stats


@pytest.mark.parametrize(
    "impl", ["", pytest.param("triton", marks=pytest.mark.skipif(not INTERPRET, reason="CPU tensors: interpreter"))]
)
def test_the_state_pool_example_runs_as_written(impl, monkeypatch, capsys):
    """docs/state.md's pool on its own: lockstep replay and recurrent pools, six steps, bitwise after each (its own
    asserts), then the memory report; with the references and with the interpreted kernels."""
    (snippet,) = _blocks(DOCS["state.md"], "python")
    monkeypatch.setenv("REPLAYSSM_IMPL", impl)
    exec(compile(snippet, "docs/state.md", "exec"), {})
    report = ast.literal_eval(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(report) == {"checkpoints", "rings", "snapshots", "conv", "total"}
    assert report["total"] == sum(v for k, v in report.items() if k != "total") > 0


def test_the_engine_example_runs_as_written(capsys):
    """docs/engine.md's hand-built engine: MTP drafts, and the tokens plain greedy decoding gives."""
    from replayssm.engine.engine import Engine
    from replayssm.engine.runner import ModelRunner, RunnerConfig

    (snippet,) = _blocks(DOCS["engine.md"], "python")
    ns: dict = {}
    exec(compile(snippet, "docs/engine.md", "exec"), ns)
    r = ns["r"]
    assert capsys.readouterr().out.strip() == f"{r.generated} {r.accepted}" and len(r.generated) == 16
    plain = Engine(ModelRunner(ns["model"], RunnerConfig(max_slots=1, max_len=256, window=1)), drafter="none")
    q = plain.add([5, 6, 7, 8], max_new_tokens=16)
    plain.run()
    assert r.generated == q.generated and max(r.accepted) > 1


def test_two_commands_at_the_top_and_ci_runs_the_second():
    top = README.split("## What you can run")[0]
    main_job, tests = _blocks(top, "bash")
    assert main_job.count("\n") == tests.count("\n") == 1
    assert main_job.strip().endswith(".venv/bin/replayssm demo") and tests.strip().endswith("pytest -q")
    pins = "torch==2.13.0 triton==3.6.0 'numpy<2.4'"
    assert pins in main_job and pins in tests
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1] == tests.strip()


def _ansi_c(match: re.Match) -> str:  # bash $'...' quoting, as the README uses for multi-line prompts
    return shlex.quote(match.group(1).encode().decode("unicode_escape"))


def _commands() -> list[str]:
    """The README's command table, and every replayssm line of a bash block in the README and docs/."""
    found = re.findall(r"^\| `(replayssm [^`]*)`", README, flags=re.M)
    for text in [README, *DOCS.values()]:
        lines = [ln.split("  #")[0].strip() for b in _blocks(text, "bash") for ln in b.splitlines()]
        found += [ln for ln in lines if ln.startswith("replayssm ")]
    return sorted(set(found))


@pytest.mark.parametrize("command", _commands())
def test_every_listed_command_parses(command):
    argv = shlex.split(re.sub(r"\$'((?:[^'\\]|\\.)*)'", _ansi_c, command))[1:]
    args = build_parser().parse_args(argv)
    assert callable(args.fn)


def test_links_stay_inside_the_repository():
    for name, text in [("README.md", README), *DOCS.items()]:
        for target in re.findall(r"\]\(([^)#]+)", text):
            assert not re.match(r"\w+://", target), (name, target)
            base = ROOT if name == "README.md" else ROOT / "docs"
            assert (base / target).exists(), (name, target)
        assert "DESIGN" not in text and "§" not in text, name
