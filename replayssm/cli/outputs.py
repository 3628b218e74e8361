"""The commands' output files and folders: ``--out`` / ``--tag`` and ``--json FILE``, each checked writable before
any work (a bad path never costs a finished run; docs/cli.md)."""

from __future__ import annotations

import argparse
import os

from .common import UsageError

RESULTS_DIR = "replayssm-results"  # default --out: beside the user's work, never the repository's bench/results


def stem(text: str) -> str:
    """An argparse type (``--tag``): a plain file-name stem, the outputs' names without a suffix."""
    if not text or text.startswith(".") or any(c in text for c in "/\\") or not text.isprintable():
        raise argparse.ArgumentTypeError(f"must be a plain file name stem (not empty, no '/', '\\' or control "
                                         f"characters, not starting with '.'), e.g. run-1, got {text!r}")  # fmt: skip
    return text


def _unwritable(flag: str, path, what: str, err: OSError) -> UsageError:
    reason = err.strerror or type(err).__name__
    return UsageError(f"{flag} {path}: cannot write {what} there ({reason}); give a writable {what.split()[-1]}")


def out_dir(path, flag: str = "--out", files: tuple[str, ...] = ()):
    """Checks before any work that the output folder ``path`` can be created and written: makes it (with its
    parents) and creates then removes a probe file in it; and that each of ``files`` (the names the command will
    write there, from ``--tag``) can be written: not a folder, a name the file system takes (its length). Returns
    the folder as a Path."""
    import tempfile
    from pathlib import Path

    if not str(path).strip():
        raise UsageError(f"{flag}: give a folder name, got an empty one")
    folder = Path(path).expanduser()
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{flag} {path}: exists and is not a folder; give a folder (created when missing)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise _unwritable(flag, path, "a folder", e) from None
    for name in files:
        _probe(folder / name, flag, path)
    return folder


def _touch(file) -> None:
    """Raises OSError where ``file`` cannot be written: an existing file is opened for appending (unchanged), a new
    one is created and removed again."""
    if file.exists():
        with file.open("a"):
            pass
    else:
        with file.open("x"):
            pass
        file.unlink()


def _probe(file, flag: str, folder) -> None:
    """``file`` (in the checked folder ``folder``) can be written; errors name ``--tag`` for a name the file system
    refuses, ``flag`` for a folder in the way."""
    try:
        if file.is_dir():
            raise UsageError(f"{flag} {folder}: {file.name} there is a folder, and the command writes a file of that "
                             "name; give another --out or --tag")  # fmt: skip
        _touch(file)
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise UsageError(f"--tag: cannot write {file.name} in {folder} ({reason}); give a shorter plain name") from None


def out_file(path, flag: str):
    """Checks before any work that the output file ``path`` can be written: not a folder, its folder created
    (with parents) and writable; an existing file is opened for appending (unchanged), a new one is created and
    removed again. Returns it as a Path. ``-`` is refused: a command that can print its JSON to standard output
    (``memory --json -``) handles it before calling this."""
    from pathlib import Path

    if not str(path).strip():
        raise UsageError(f"{flag}: give a file name, got an empty one")
    if str(path) == "-":
        raise UsageError(f"{flag} -: this command writes its JSON to a file (it prints its report to standard "
                         "output); give a file name")  # fmt: skip
    file = Path(path).expanduser()
    if str(path).endswith(("/", os.sep)) and file.exists() and not file.is_dir():  # ("x/" with x a file)
        raise UsageError(f"{flag} {path}: {file} is a file, not a folder; give a file name")
    if file.is_dir() or str(path).endswith(("/", os.sep)):  # (Path drops a trailing "/": "x/" would be written as x)
        raise UsageError(f"{flag} {path}: a folder; give a file name (e.g. {Path(path) / 'results.json'})")
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        _touch(file)
    except OSError as e:
        blocker = next((p for p in file.parents if p.exists() and not p.is_dir()), None)
        if blocker is not None:  # (mkdir says "File exists" about it)
            raise UsageError(f"{flag} {path}: {blocker} is a file, not a folder; give a path in a folder") from None
        raise _unwritable(flag, path, "a file", e) from None
    return file


def add_out(p: argparse.ArgumentParser, tag: str) -> None:
    p.add_argument("--out", default=RESULTS_DIR,
                   help=f"folder for the JSON and PNG (default ./{RESULTS_DIR}; the repository's committed results "
                        "live in bench/results/)")  # fmt: skip
    p.add_argument("--tag", type=stem, default=tag, help="file name stem of the outputs (no '/')")
