"""replayssm bench peers: extract the SGLang releases' kernel files from their wheels into the peers folder that
``bench kernels --peers-dir`` reads (docs/cli.md)."""

from __future__ import annotations

import argparse
import contextlib
import os

from .common import UsageError, add_command
from .outputs import out_dir

ROOT_HELP = "$REPLAYSSM_PEERS, else .peers/ in the repository"


def add_parser(bench) -> None:
    """Add ``peers`` to the ``replayssm bench`` subparsers."""
    p = add_command(bench, "peers", "extract the SGLang releases' kernel files from their wheels (for --peers-dir)",
                    cmd_peers)  # fmt: skip
    p.add_argument("--wheels", nargs="*", default=None, help="sglang-<version>-*.whl files, or folders holding them")
    p.add_argument("--download", action="store_true", help="pip download the wheels that are not given")
    p.add_argument("--cache", default=None,
                   help="download folder, searched for wheels even without --download "
                   "(default $REPLAYSSM_WHEEL_CACHE or ~/.cache/replayssm/wheels)")  # fmt: skip
    p.add_argument("--peers-dir", dest="dest", default=None, metavar="DIR",
                   help=f"the peers folder to extract into, as bench kernels --peers-dir reads it (default "
                        f"{ROOT_HELP})")  # fmt: skip
    p.add_argument("--dest", dest="old_dest", default=None, help=argparse.SUPPRESS)  # the old spelling: refused
    p.add_argument("--releases", nargs="+", default=["0.5.16", "0.5.23"], help="SGLang releases to extract")


def cmd_peers(args) -> int:
    from ..bench.peers.sglang import RELEASES, PeerKernelsError, default_root
    from ..bench.peers.sglang.extract import extract_all

    if args.old_dest is not None:
        raise UsageError(f"--dest {args.old_dest}: now spelled --peers-dir {args.old_dest}")
    unknown = [v for v in args.releases if v not in RELEASES]
    if unknown:
        raise UsageError(f"--releases: no peer for {', '.join(unknown)}; known: {', '.join(RELEASES)}")
    if args.wheels == []:  # the flag without a file (argparse's nargs="*" takes none)
        raise UsageError("--wheels: give at least one sglang-<version>-*.whl file or a folder holding them")
    args.wheels = args.wheels or []
    missing = [w for w in args.wheels if not os.path.exists(os.path.expanduser(w))]
    if missing:
        raise UsageError(f"--wheels {' '.join(missing)}: no such file or folder")
    from pathlib import Path

    for w in map(lambda w: Path(w).expanduser(), args.wheels):
        if w.is_file() and not (w.name.startswith("sglang-") and w.name.endswith(".whl")):
            raise UsageError(f"--wheels {w}: not an SGLang wheel (sglang-<version>-*.whl)")
        if w.is_dir() and not any(w.glob("sglang-*.whl")):
            raise UsageError(f"--wheels {w}: a folder without SGLang wheels (sglang-<version>-*.whl)")
    if args.dest is not None and not args.dest.strip():
        raise UsageError("--peers-dir: give a folder, got an empty name")
    if args.dest is None:  # the default folder: $REPLAYSSM_PEERS or .peers/, checked as --peers-dir would be
        env = os.environ.get("REPLAYSSM_PEERS")
        args.dest, dest_flag = (env, "$REPLAYSSM_PEERS") if env else (None, "--peers-dir")
    else:
        dest_flag = "--peers-dir"
    if args.cache is not None and not args.cache.strip():
        raise UsageError("--cache: give a folder, got an empty name")
    cache_flag = "--cache" if args.cache is not None else "$REPLAYSSM_WHEEL_CACHE"
    cache = args.cache if args.cache is not None else os.environ.get("REPLAYSSM_WHEEL_CACHE") or None
    if cache and not_a_folder(cache):
        raise UsageError(f"{cache_flag} {cache}: exists and is not a folder (the folder wheels are downloaded to)")
    folders = [(f, p) for f, p in ((dest_flag, args.dest), (cache_flag, cache if args.download else None)) if p]
    made = [q for _, p in folders for q in _missing(p)]  # removed again when the command fails
    try:
        for flag, path in folders:  # writable, checked (and made) before anything is downloaded
            out_dir(path, flag)
        root = Path(args.dest).expanduser() if args.dest else default_root()  # (bash leaves --peers-dir=~/x as is)
        done = extract_all([RELEASES[v] for v in args.releases], root, wheels=args.wheels,
                           download=args.download, cache=args.cache)  # fmt: skip
    except (PeerKernelsError, UsageError) as e:
        for q in sorted(made, key=lambda q: -len(q.parts)):
            with contextlib.suppress(OSError):
                q.rmdir()  # only if still empty
        if isinstance(e, UsageError):
            raise
        raise UsageError(f"--wheels/--download: {e}") from None
    for version, folder in done.items():
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        print(f"sglang {version}: {folder} ({size / 1024:.0f} KiB)")
    return 0


def not_a_folder(path: str) -> bool:
    """``path`` (``~`` expanded) exists and is not a folder."""
    p = os.path.expanduser(path)
    return os.path.exists(p) and not os.path.isdir(p)


def _missing(path) -> list:
    """``path`` and those of its parents that do not exist yet."""
    from pathlib import Path

    p, out = Path(path).expanduser().absolute(), []
    while not p.exists() and p != p.parent:
        out.append(p)
        p = p.parent
    return out
