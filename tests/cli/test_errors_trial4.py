"""A fourth fresh-eyes trial of the CLI and the Python API (2026-12-05, twenty-eighth session): each case here was
a flag silently ignored, an error naming a flag the user never passed, or a refusal after the model had loaded."""

import pytest

from replayssm.cli import main
from replayssm.tiny import TINY_MODEL
from tests.helpers.cli import assert_one_line_error

TINY = str(TINY_MODEL)
KERNELS = ["bench", "kernels", "--device", "cpu", "--H", "1", "--HV", "1", "--K", "16", "--V", "16", "--rings", "4",
           "--batches", "1", "--windows", "2"]  # fmt: skip


def test_demo_s_positions_are_checked_before_the_model_loads(capsys):
    """--max-new-tokens 4096 passed the range check, loaded the model (a line on stdout), then failed."""
    assert main(["demo", "--max-new-tokens", "4096"]) == 2
    cap = capsys.readouterr()
    assert_one_line_error(cap, "--max-new-tokens 4096", "+ 1 must fit the model's 4096 positions, so at most 3875")
    assert "loading" not in cap.out


def test_generate_names_max_new_tokens_when_no_max_len_would_do(capsys):
    """The error led with --max-len, which the user never passed."""
    assert main(["generate", "--model", TINY, "--prompt", "hi", "--max-new-tokens", "5000"]) == 2
    line = assert_one_line_error(capsys.readouterr(), "--max-new-tokens 5000", "max_position_embeddings (4096)")
    assert "--max-len" not in line


def test_tiny_is_taken_in_any_case(tmp_path, capsys):
    assert main(["memory", "--model", "TINY"]) == 0
    assert capsys.readouterr().out.startswith("model tiny ")
    assert main(["memory", "--model", "Tiny", "--json", str(tmp_path / "m.json")]) == 0


CASES = [
    (["bench", "peers", "--wheels"], "--wheels", "give at least one"),
    ([*KERNELS, "--peers", "none", "--peers-dir", "/nonexistent"], "--peers-dir /nonexistent",
     "not used with --peers none"),
    ([*KERNELS, "--peers-dir", TINY + "/config.json"], "--peers-dir", "a file, not a folder"),
    (["demo", "--steps", "10"], "--steps", "(it sets the one-layer simulation)"),
]  # fmt: skip


@pytest.mark.parametrize("argv, flag, phrase", CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_user_error_is_one_line_exit_2(argv, flag, phrase, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (a regression must not write into the checkout)
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr(), flag, phrase)


def test_llm_refuses_a_ring_without_a_replay_pool_and_points_tiny_at_the_embedded_model():
    """LLM(backend='recurrent', ring_len=16) was accepted silently (the CLI refuses --ring there); LLM('tiny') said
    only 'no config.json at tiny'."""
    import torch

    from replayssm.engine.llm import LLM

    with pytest.raises(ValueError, match="ring_len=16: only the replay backend keeps a ring"):
        LLM(TINY, backend="recurrent", ring_len=16, device="cpu")
    with pytest.raises(FileNotFoundError, match="replayssm.tiny.TINY_MODEL"):
        LLM("tiny", device="cpu")
    llm = LLM(TINY, backend="recurrent", shadow_backend="replay", ring_len=32, device="cpu", dtype=torch.float32,
              max_slots=1, max_len=64)  # fmt: skip
    assert llm.runner_config.ring_len == 32 and llm.runner.pool.shadow.cfg.ring_len == 32


@pytest.mark.parametrize("argv, flag", [
    (["demo", "--window", "4", "--window", "8"], "--window"),
    (["memory", "--model", "tiny", "--context=8", "--context", "16"], "--context"),
    (["bench", "peers", "--peers-dir", "a", "--peers-dir", "b"], "--peers-dir"),
])  # fmt: skip
def test_an_option_given_twice_is_refused(argv, flag, capsys, tmp_path, monkeypatch):
    """argparse kept the last value silently."""
    monkeypatch.chdir(tmp_path)  # (bench peers would extract into ./b if the check regressed)
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr(), flag, "given 2 times; give it once")


def test_debug_may_be_given_before_and_after_the_command(capsys):
    assert main(["--debug", "memory", "--model", "tiny", "--debug"]) == 0
