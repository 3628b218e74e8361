"""What every subcommand shares: the parser that reports a user error in one line, range-checked flag
types and the device flag (the output files and folders: ``outputs``).

A user error is one line on stderr naming the flag and what it accepts, exit status 2, no traceback
(``--debug`` or ``REPLAYSSM_DEBUG=1`` shows it). Nothing here imports torch: ``replayssm --help`` must
stay fast.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import re
import sys

DEBUG_ENV = "REPLAYSSM_DEBUG"
SEED_MAX = 2**63 - 1  # what torch.Generator.manual_seed takes (engine.checks.check_seed)
TEMPERATURE_MAX = 3.4028234663852886e38  # fp32's largest: engine.checks.TEMPERATURE_MAX, without importing torch
GREEDY_BELOW = 1e-5  # a temperature below it decodes greedily: engine.accept.GREEDY_BELOW, without importing torch


class UsageError(Exception):
    """A bad flag or input. The message names the flag and what it accepts; main() prints it in one line."""

    def __init__(self, message: str, prog: str | None = None):
        super().__init__(message)
        self.prog = prog


class Parser(argparse.ArgumentParser):
    """argparse, but a user error is one line (no usage block) and exit status 2, and a flag is only taken
    spelled out (``--win`` is not ``--window``)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        raise UsageError(message.removeprefix("argument "), prog=self.prog)


class HelpFormatter(argparse.HelpFormatter):
    """Shows each option's default, unless it has none (None, False) or the help already says it; an option
    without a help text still gets its default listed."""

    @staticmethod
    def _default(action) -> str | None:
        default = action.default
        if default is None or default is False or default == argparse.SUPPRESS or not action.option_strings:
            return None
        if isinstance(default, (list, tuple)) and not default:
            return None
        text = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        return text.replace("%", "%%")  # the help text is %-formatted by argparse

    def _format_action(self, action):
        if not action.help and self._default(action) is not None:
            action = copy.copy(action)
            action.help = f"default: {self._default(action)}"
        return super()._format_action(action)

    def _get_help_string(self, action):
        text, default = action.help or "", self._default(action)
        if default is None or "default" in text:
            return text
        return f"{text} (default: {default})"


def check_environment(args) -> None:
    """``REPLAYSSM_IMPL`` (``ops``: unset, auto or triton) and the kernels' switches (``replayssm._env.SWITCHES``)
    before a command that runs kernels (one with ``--device``, or ``bench e2e``): triton on CPU tensors needs
    Triton's interpreter (``TRITON_INTERPRET=1``), else every kernel would fail with Triton's own "0 active drivers".
    A ``--device cuda`` without a GPU is the device check's."""
    if not hasattr(args, "device") and getattr(args, "bench", None) != "e2e":
        return  # (memory, bench peers: no kernel runs)
    env = os.environ.get("REPLAYSSM_IMPL", "")
    if env not in ("", "auto", "triton"):
        raise UsageError(f"REPLAYSSM_IMPL={env}: must be unset, auto or triton")
    from .._env import check_switches

    try:  # the kernels' forced paths (docs/kernels.md): refused here, before any work, not at the first step
        check_switches()
    except ValueError as e:
        raise UsageError(str(e)) from None
    if env == "triton" and hasattr(args, "device"):
        import torch

        from .._env import interpreter_requested

        if interpreter_requested():
            return
        if args.device == "cpu" or (args.device is None and not torch.cuda.is_available()):
            raise UsageError("REPLAYSSM_IMPL=triton: on the CPU the kernels run only in Triton's interpreter: also "
                             "set TRITON_INTERPRET=1 (or unset REPLAYSSM_IMPL to run the references)")  # fmt: skip


def debug_enabled(argv: list[str]) -> bool:
    """``--debug``, or ``REPLAYSSM_DEBUG`` read as a boolean the way Triton reads its switches (1, true, on, yes)."""
    from .._env import TRUTHY

    return "--debug" in argv or os.environ.get(DEBUG_ENV, "").lower() in TRUTHY


def report_usage_error(err: UsageError, prog: str) -> int:
    prog = err.prog or prog
    print(f"{prog}: error: {err} (see {prog} --help)", file=sys.stderr)
    return 2


def _number(kind, text: str, lo, hi, lo_open: bool) -> int | float:
    name = "an integer" if kind is int else "a finite number"
    if lo is not None and hi is not None and not lo_open:
        want = f"{name} from {lo} to {hi}"
    elif lo is not None:
        want = f"{name} {'>' if lo_open else '>='} {lo}" + (f" and <= {hi}" if hi is not None else "")
    else:
        want = name + (f" <= {hi}" if hi is not None else "")
    # ASCII digits only (int() would also take ' 4', '1_0' and other scripts' digits)
    plain = r"[+-]?[0-9]+" if kind is int else r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?"
    if not re.fullmatch(plain, text):
        raise argparse.ArgumentTypeError(f"must be {want}, got {text!r}")
    value = kind(text)
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be {want}, got {text!r}")
    too_low = lo is not None and (value <= lo if lo_open else value < lo)
    if too_low or (hi is not None and value > hi):
        raise argparse.ArgumentTypeError(f"must be {want}, got {text}")
    return value


def integer(lo: int | None = None, hi: int | None = None):
    """An argparse type: an int in [lo, hi]."""
    fn = lambda text: _number(int, text, lo, hi, False)
    fn.__name__ = "integer"
    return fn


def number(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False):
    """An argparse type: a finite float in [lo, hi] ((lo, hi] with ``lo_open``)."""
    fn = lambda text: _number(float, text, lo, hi, lo_open)
    fn.__name__ = "number"
    return fn


def power_of_two(lo: int = 2, hi: int = 1 << 16):
    """An argparse type: a power of two in [lo, hi]."""

    def fn(text: str) -> int:
        value = _number(int, text, lo, hi, False)
        if value & (value - 1):
            raise argparse.ArgumentTypeError(f"must be a power of two >= {lo}, got {value}")
        return value

    fn.__name__ = "power_of_two"
    return fn


RING = 16  # the default ring length L (docs/design.md: the fold rate and memory at T=4)


def check_ring(ring: int | None, window: int, *, ring_flag: str = "--ring", window_flag: str = "--window") -> int:
    """The ring protocol needs L >= 2T (a window's records and the committed history fit at once). ``ring`` None
    (the flag not given): ``RING``, or the least power of two >= 2T for a longer window. Returns the ring length."""
    if ring is None:
        return max(RING, 1 << (2 * window - 1).bit_length())
    if ring < 2 * window:
        fit = 1 << (2 * window - 1).bit_length()
        raise UsageError(f"{ring_flag} {ring} must be at least 2 x {window_flag} = {2 * window}: use {ring_flag} "
                         f"{fit} or a {window_flag} of at most {ring // 2}")  # fmt: skip
    return ring


def device(name: str | None):
    """``--device``: cuda, cuda:N or cpu; default cuda when a GPU is present."""
    import torch

    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device: must be cpu, cuda or cuda:N, got {name!r}") from None
    if dev.type not in ("cpu", "cuda") or (dev.type == "cpu" and dev.index is not None):
        raise UsageError(f"--device: must be cpu, cuda or cuda:N, got {name!r}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device {name}: no CUDA GPU here (use --device cpu)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UsageError(f"--device {name}: this machine has {torch.cuda.device_count()} GPU(s)")
    return dev


def add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when a GPU is present)")


def add_draft_vocab(p, when: str = "") -> None:
    """``--draft-vocab N``: the MTP drafter proposes only the N lowest token ids (``RunnerConfig.draft_vocab``)."""
    p.add_argument("--draft-vocab", type=integer(1), default=None, metavar="N",
                   help=f"{when}the MTP drafter proposes only the N lowest token ids (a smaller draft head; "
                        "default: the whole vocabulary)")  # fmt: skip


def add_command(sub, name: str, help: str, fn) -> argparse.ArgumentParser:
    """A subcommand with ``--debug`` (show the traceback of an error) and its handler."""
    p = sub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".", formatter_class=HelpFormatter)
    p.add_argument("--debug", action="store_true", help=f"show tracebacks (or set {DEBUG_ENV}=1)")
    p.set_defaults(fn=fn)
    return p


def note_shadowed(text: str, flag: str = "--model") -> None:
    """A name taken as a preset or as 'tiny' while a folder of that name is here too: say which was taken (stderr)."""
    from pathlib import Path

    if Path(text).expanduser().is_dir():
        what = "the embedded model" if text.lower() == "tiny" else "the preset"
        print(f"note: {flag} {text} is {what}, not the folder {text}/ here; write ./{text} for the folder",
              file=sys.stderr)  # fmt: skip


def model_folder(text: str, flag: str = "--model"):
    """A Hugging Face model folder (config.json, *.safetensors, tokenizer.json); a path to its config.json is
    refused with the folder to pass instead."""
    from pathlib import Path

    if not str(text).strip():
        raise UsageError(f"{flag}: give a model folder, got an empty name")
    path = Path(text).expanduser()
    if path.is_file():
        hint = f"give the folder that holds it: {flag} {path.parent}" if path.name == "config.json" else "give a folder"
        raise UsageError(f"{flag} {text}: a file; the model is a folder (config.json, *.safetensors, "
                         f"tokenizer.json): {hint}")  # fmt: skip
    if not path.is_dir():
        raise UsageError(f"{flag} {text}: no such folder{_not_a_folder_hint(text)}")
    missing = [n for n, ok in (("config.json", (path / "config.json").is_file()),
                               ("*.safetensors", any(path.glob("*.safetensors")))) if not ok]  # fmt: skip
    if missing:
        raise UsageError(f"{flag} {text}: the folder has no {' and no '.join(missing)} (a Hugging Face model "
                         "folder holds config.json, *.safetensors and tokenizer.json)")  # fmt: skip
    return path


def _not_a_folder_hint(text: str) -> str:
    """What a name that is no folder may have meant: a preset (sizes only, no weights) or a Hugging Face id."""
    from ..models.presets import PRESETS

    if text.lower() in PRESETS:
        return (f" ({text} is a preset: shapes without weights, which replayssm memory, drift (with --layers N) and "
                "bench e2e take as --model, the last two with random weights; otherwise give a local model "
                "folder)")  # fmt: skip
    if text.count("/") == 1 and not text.startswith((".", "/", "~")):
        return " (a Hugging Face id? only local folders are read: download the model first)"
    return ""


def model_files(folder, text: str, flag: str = "--model"):
    """A model folder's config.json (and its tokenizer.json, when there is one) read before any work, so a file
    replayssm cannot use is a one-line error naming ``flag`` ``text``, not a failure after the weights load.
    Returns the ``ModelConfig``."""
    from ..models.config import ModelConfig
    from ..models.loader import load_tokenizer

    try:
        cfg = ModelConfig.from_file(folder)  # not JSON, not an object, a missing or ill-typed field
        if (folder / "tokenizer.json").is_file():
            load_tokenizer(folder)
    except (ValueError, OSError) as e:
        raise UsageError(f"{flag} {text}: {e}") from None
    return cfg
