"""Copy each release's kernel files out of SGLang's PyPI wheel into the peers folder (default ``.peers/``).

``replayssm bench peers --download`` (or ``--wheels FILE...``) writes, per release,
``<root>/sglang-<version>/`` holding the listed wheel members at their wheel paths plus a
``MANIFEST.json`` (version, wheel, sha256 of every file). Only those few ``.py`` files leave the
wheel (about 0.1 MB per release, against 15-40 MB of wheel), each checked before it is written:
version of the wheel, pinned sha256, imports (``source.check_source``). The folder is ignored by
git; nothing of SGLang is committed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .releases import Release
from .source import PeerSourceError, check_source

MANIFEST = "MANIFEST.json"
CACHE_ENV = "REPLAYSSM_WHEEL_CACHE"
# The wheels are CPython-3.11 manylinux builds; their .py files are the same on every platform, so the
# download asks for that build whatever Python runs it.
_PIP_TARGET = ["--python-version", "3.11", "--implementation", "cp", "--platform", "manylinux_2_34_x86_64"]


class PeerKernelsError(RuntimeError):
    """A wheel or an extracted folder is missing, of another version, incomplete or modified."""


def default_cache() -> Path:
    """Where downloaded wheels are kept: ``$REPLAYSSM_WHEEL_CACHE`` or ``~/.cache/replayssm/wheels``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "replayssm" / "wheels").expanduser()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def wheel_version(zf: zipfile.ZipFile, path: Path) -> str:
    metas = [n for n in zf.namelist() if re.fullmatch(r"sglang-[^/]+\.dist-info/METADATA", n)]
    if len(metas) != 1:
        raise PeerKernelsError(f"{path} is not an sglang wheel: no single sglang-*.dist-info/METADATA in it")
    for line in zf.read(metas[0]).decode("utf-8", "replace").splitlines():
        if not line.strip():  # the header block ends at the first blank line
            break
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    raise PeerKernelsError(f"{path}: {metas[0]} has no Version header")


def checked_source(release: Release, member: str, data: bytes, where: str) -> str:
    """The file's text after the sha256 pin and import checks (raises PeerKernelsError / PeerSourceError)."""
    pinned = release.files[member]
    if pinned is not None and sha256(data) != pinned:
        raise PeerKernelsError(f"{where}: {member} is not SGLang {release.version}'s file (sha256 differs)")
    source = data.decode("utf-8")
    check_source(member, source, release.bound)
    return source


def extract_release(wheel: str | os.PathLike, root: str | os.PathLike, release: Release) -> Path:
    """Write ``release``'s kernel files from ``wheel`` to ``<root>/sglang-<version>/`` (replacing an
    older copy only once every file has passed its checks); returns that folder."""
    path = Path(wheel)
    if not path.is_file():
        raise PeerKernelsError(f"no wheel at {path}")
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as e:
        raise PeerKernelsError(f"{path} is not a wheel (zip) file: {e}") from None
    with zf:
        version = wheel_version(zf, path)
        if version != release.version:
            raise PeerKernelsError(f"{path} is sglang {version}; this peer needs sglang=={release.version}")
        names = set(zf.namelist())
        files = {}
        for member in release.files:
            if member not in names:
                raise PeerKernelsError(f"{path} has no {member}")
            data = zf.read(member)
            checked_source(release, member, data, str(path))
            files[member] = data
    dest = Path(root) / release.folder
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{release.folder}-", dir=dest.parent))
    for member, data in files.items():
        (staging / member).parent.mkdir(parents=True, exist_ok=True)
        (staging / member).write_bytes(data)
    manifest = {"version": version, "wheel": path.name, "files": {m: sha256(d) for m, d in files.items()}}
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return dest


def find_wheel(version: str, folders) -> Path | None:
    for folder in folders:
        hits = sorted(Path(folder).glob(f"sglang-{version}-*.whl"))
        if hits:
            return hits[0]
    return None


def download_wheel(version: str, cache: str | os.PathLike) -> Path:
    """``pip download --no-deps sglang==<version>`` into ``cache`` (kept there; reused when present)."""
    cache = Path(cache)
    found = find_wheel(version, [cache])
    if found is not None:
        return found
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", *_PIP_TARGET,
           "-d", str(cache), f"sglang=={version}"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    found = find_wheel(version, [cache])
    if done.returncode != 0 or found is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise PeerKernelsError(f"pip download sglang=={version} failed: {last}")
    return found


def extract_all(releases, root, *, wheels=(), download=False, cache=None) -> dict[str, Path]:
    """Extract every release in ``releases``: its wheel is the one among ``wheels`` (files or folders)
    named ``sglang-<version>-*.whl``, else one already in ``cache`` (default ``default_cache()``), else
    (``download=True``) one fetched into ``cache``."""
    files = [Path(w) for w in wheels]
    cache = Path(cache or default_cache()).expanduser()
    folders = [w for w in files if w.is_dir()] + [cache]
    out = {}
    for release in releases:
        named = [w for w in files if w.is_file() and w.name.startswith(f"sglang-{release.version}-")]
        wheel = named[0] if named else find_wheel(release.version, folders)
        if wheel is None and download:
            wheel = download_wheel(release.version, cache)
        if wheel is None:
            given = f"among {', '.join(str(w) for w in files)} or " if files else "given, nor "
            raise PeerKernelsError(f"no sglang-{release.version}-*.whl {given}in the cache {cache}; "
                                   "pass its wheel or --download")  # fmt: skip
        out[release.version] = extract_release(wheel, root, release)
    return out


__all__ = ["PeerKernelsError", "PeerSourceError", "extract_all", "extract_release", "download_wheel"]
