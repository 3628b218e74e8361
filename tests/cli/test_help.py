"""--help lists every flag with its default (docs/cli.md), including flags without a help text."""

import argparse

import pytest

from replayssm.cli import build_parser


def _parsers(parser, name="replayssm"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, p in action.choices.items():
                yield from _parsers(p, f"{name} {sub}")


PARSERS = dict(_parsers(build_parser()))


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_default_is_shown(name):
    parser = PARSERS[name]
    for action in parser._actions:
        if not action.option_strings or action.default in (None, False, argparse.SUPPRESS, []):
            continue
        fmt = parser._get_formatter()
        fmt.add_argument(action)
        text = " ".join(fmt.format_help().split())
        assert "default" in text, f"{name} {action.option_strings[0]}: {text}"


def test_the_defaults_named_in_issue_12(capsys):
    for argv, flag, default in [(["bench", "kernels"], "--HV HV", "(default: 64)"),
                                (["bench", "kernels"], "--batches BATCHES [BATCHES ...]", "(default: 1 8 32 64"),
                                (["bench", "e2e"], "--prompt-len PROMPT_LEN", "(default: 128)"),
                                (["bench", "peers"], "--releases RELEASES [RELEASES ...]", "(default: 0.5.16 0.5.23)"),
                                (["generate"], "--max-new-tokens MAX_NEW_TOKENS", "default: "),
                                (["generate"], "--backend {replay,recurrent}", "default: ")]:  # fmt: skip
        with pytest.raises(SystemExit):
            build_parser().parse_args([*argv, "--help"])
        options = " ".join(capsys.readouterr().out.split("options:")[1].split())
        entry = options[options.index(flag) + len(flag) :][:150]
        assert default in entry, (flag, entry)
