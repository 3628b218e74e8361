"""Writing an output file so that a failed write names its file (the CLI turns it into one line, docs/cli.md)."""

from __future__ import annotations

from pathlib import Path


def write_text(path: Path, text: str) -> None:
    """``path.write_text(text)``; an ``OSError`` raised by the write or the close (a full disk: the open succeeded)
    carries ``path`` as its filename, which Python leaves unset there."""
    try:
        path.write_text(text)
    except OSError as e:
        if e.filename is None and e.errno is not None:
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise
