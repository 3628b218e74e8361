"""The replayssm command line (one module per subcommand; torch is imported only when a command runs)."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import traceback

from .. import __version__
from .common import Parser, UsageError, check_environment, debug_enabled, report_usage_error

IO_ERROR = 74  # EX_IOERR of sysexits.h: the work was done but its output could not be written (a full disk)
WRITE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)
BROKEN_PIPE = 141  # the exit status when the reader of stdout went away (``| head``): 128 + SIGPIPE, as a shell reports
# a command that SIGPIPE ended; neither 1 (a bug or a failed check) nor 0 (the command did not finish)

DESCRIPTION = """\
Exact, memory-lean speculative decoding for Gated DeltaNet hybrid models (Qwen3-Next, Qwen3.5):
one checkpoint and a small ring of per-token inputs per request instead of a state snapshot per
draft token, with a committed state bitwise equal to the recurrent baseline's."""

EPILOG = """\
Start with: replayssm demo. Each command has its own --help. The design and every command's
flags are documented in docs/ (docs/design.md, docs/cli.md) of the repository."""


def build_parser() -> Parser:
    from . import bench, demo, drift, generate, memory

    p = Parser(prog="replayssm", description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("--version", action="version", version=f"replayssm {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks (or set REPLAYSSM_DEBUG=1)")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for module in (demo, generate, memory, drift, bench):
        module.add_parser(sub)
    return p


TOP_LEVEL_OPTIONS = ("-h", "--help", "--version", "--debug")
COMMANDS = ("demo", "generate", "memory", "drift", "bench")


def check_top_level_options(argv: list[str]) -> None:
    """An unknown option before the command is named as such (argparse would first say that COMMAND is missing)."""
    for a in argv:
        if not a.startswith("-"):
            return
        if a not in TOP_LEVEL_OPTIONS:
            raise UsageError(
                f"unrecognized option {a} before the command (allowed: {', '.join(TOP_LEVEL_OPTIONS)}; "
                f"then a COMMAND: {', '.join(COMMANDS)})"
            )


def check_repeated_options(argv: list[str]) -> None:
    """An option given twice is refused: argparse keeps the last value silently
    (``--window 4 --window 8``). ``--debug`` may be given before and after the command."""
    seen: dict[str, int] = {}
    for a in argv:
        if a == "--":
            break
        if a.startswith("--") and a != "--debug":
            name = a.split("=", 1)[0]
            seen[name] = seen.get(name, 0) + 1
    twice = [n for n, c in seen.items() if c > 1]
    if twice:
        raise UsageError(f"{twice[0]}: given {seen[twice[0]]} times; give it once")


def _flag_of(argv: list[str], path) -> str:
    """The flag (with a space after it) whose value ``path`` is, or lies under, the longest such value; or "" (a
    path too long for the file system reaches ``main`` as an OSError from wherever it was first used)."""
    pairs = [(f, v) for f, v in zip(argv, argv[1:]) if f.startswith("--") and "=" not in f and v]
    pairs += [tuple(a.split("=", 1)) for a in argv if a.startswith("--") and "=" in a]
    path = str(path)
    hits = []
    for f, v in pairs:
        full = os.path.expanduser(v)
        if path in (v, full) or path.startswith(full.rstrip("/") + "/"):
            hits.append((len(v), f))
    return f"{max(hits)[1]} " if hits else ""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    prog = "replayssm"
    if not argv:  # a first try: show what there is
        parser.print_help(sys.stderr)
        return 2
    try:
        check_top_level_options(argv)
        args, extra = parser.parse_known_args(argv)
        prog = f"replayssm {args.cmd}" + (f" {args.bench}" if getattr(args, "bench", None) else "")
        if extra:  # named by the command they were given to (argparse would name the top-level program)
            raise UsageError(f"unrecognized arguments: {' '.join(extra)}", prog=prog)
        check_repeated_options(argv)
        check_environment(args)
        return args.fn(args)
    except UsageError as e:
        if debug_enabled(argv):  # the traceback, then the same one line and the same exit status
            traceback.print_exc()
        return report_usage_error(e, prog)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout went away (``| head``): stop quietly, as Python's docs advise
        if debug_enabled(argv):
            traceback.print_exc()
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (the interpreter's last flush, too)
        return BROKEN_PIPE
    except OSError as e:  # (after BrokenPipeError, an OSError too)
        if e.errno in WRITE_ERRORS:
            return _write_failed(e, argv, prog)
        if e.errno != errno.ENAMETOOLONG:
            raise
        if debug_enabled(argv):
            traceback.print_exc()
        name = str(e.filename) if e.filename is not None else "a path"
        shown = name if len(name) <= 60 else f"{name[:60]}..."
        return report_usage_error(UsageError(f"{_flag_of(argv, name)}{shown}: a name longer than the file system "
                                             "takes; give a shorter path"), prog)  # fmt: skip


def _write_failed(e: OSError, argv: list[str], prog: str) -> int:
    """One line for an output that could not be written (a full disk, ``--json /dev/full``, stdout on a full device):
    the file (with its flag) or the standard output, and the system's reason; exit status ``IO_ERROR``."""
    if debug_enabled(argv):
        traceback.print_exc()
    where = f"{_flag_of(argv, e.filename)}{e.filename}" if e.filename is not None else "the output"
    print(f"{prog}: error: could not write {where}: {os.strerror(e.errno)}", file=sys.stderr)
    with contextlib.suppress(OSError):  # stdout may hold what it could not write: the last flush would fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return IO_ERROR
