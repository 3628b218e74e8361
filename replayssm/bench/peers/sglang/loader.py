"""Import one release's extracted kernel files (see ``extract``) and hand back the functions the peers call.

Each file is checked again (manifest version, pinned sha256, imports), then executed as a private
module ``_sglang_<version>_<n>`` whose ``__import__`` serves only the allowed roots and the
release's bound names (``source.restricted_import``). Triton reads kernel source from the files, so
they stay where they are. Set ``TRITON_INTERPRET=1`` before the first load to run the kernels on the
CPU (the result is cached per folder and interpreter setting).
"""

from __future__ import annotations

import builtins
import importlib.util
import itertools
import json
import os
import sys
import types
from pathlib import Path

from ...._env import interpreter_requested
from . import host
from .extract import MANIFEST, PeerKernelsError, checked_source
from .releases import FILE, HOST, RELEASES, Release, module_of
from .source import restricted_import

PEERS_ENV = "REPLAYSSM_PEERS"
_REPO_ROOT = Path(__file__).resolve().parents[4]
_LOADED: dict[tuple, types.SimpleNamespace] = {}
_ids = itertools.count()


class PeerKernelsMissingError(PeerKernelsError):
    """A release's extracted folder is not there (run ``replayssm bench peers``)."""


def default_root() -> Path:
    """``$REPLAYSSM_PEERS`` if set, else ``.peers/`` in the repository root."""
    env = os.environ.get(PEERS_ENV)
    return Path(env).expanduser() if env else _REPO_ROOT / ".peers"


def _import_file(path: Path, version: str, importer) -> types.ModuleType:
    name = f"_sglang_{version.replace('.', '_')}_{next(_ids)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    module.__dict__["__builtins__"] = {**builtins.__dict__, "__import__": importer}
    sys.modules[name] = module  # triton and dataclass-like machinery look modules up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _load_order(release: Release) -> list[str]:
    """Members that other members import (FILE bindings) first."""
    deps = {m for (m, _), kind in release.bound.items() if kind == FILE}
    return sorted(release.files, key=lambda member: module_of(member) not in deps)


def load_release(version: str, root: str | os.PathLike | None = None, *, release: Release | None = None):
    """The functions of SGLang ``version``'s kernel files extracted under ``root`` (default
    ``default_root()``): attributes named as in ``Release.exports`` plus ``version``, ``folder``
    and ``modules`` {member: module}. ``release`` defaults to ``RELEASES[version]``. Raises
    ``PeerKernelsMissingError`` (folder absent) or ``PeerKernelsError`` (another version, a file
    missing or modified, a refused import)."""
    if release is None:
        if version not in RELEASES:
            raise PeerKernelsError(f"no SGLang peer for release {version!r}; known: {', '.join(RELEASES)}")
        release = RELEASES[version]
    folder = Path(root if root is not None else default_root()).expanduser() / release.folder
    if not (folder / MANIFEST).is_file():
        raise PeerKernelsMissingError(
            f"SGLang {version} kernel files not found in {folder}: run `replayssm bench peers --download` "
            f"(or --wheels FILE), or point --peers-dir / ${PEERS_ENV} at the folder holding {release.folder}/"
        )
    key = (str(folder.resolve()), interpreter_requested())
    if key in _LOADED:
        return _LOADED[key]
    manifest = json.loads((folder / MANIFEST).read_text())
    if manifest.get("version") != version:
        raise PeerKernelsError(f"{folder / MANIFEST} says sglang {manifest.get('version')}, expected {version}")
    bindings: dict[str, dict[str, object]] = {}
    for (module, name), kind in release.bound.items():
        if kind == HOST:
            bindings.setdefault(module, {})[name] = host.binding(name)
    modules = {}
    for member in _load_order(release):
        path = folder / member
        if not path.is_file():
            raise PeerKernelsError(f"{folder} lacks {member}; extract sglang {version} again")
        checked_source(release, member, path.read_bytes(), str(folder))
        modules[member] = _import_file(path, version, restricted_import(bindings))
        for (module, name), kind in release.bound.items():
            if kind == FILE and module == module_of(member):
                bindings.setdefault(module, {})[name] = getattr(modules[member], name)
    ns = types.SimpleNamespace(version=version, folder=str(folder), modules=modules)
    for attr, (member, name) in release.exports.items():
        if not hasattr(modules[member], name):
            raise PeerKernelsError(f"{member} of sglang {version} has no {name}")
        setattr(ns, attr, getattr(modules[member], name))
    _LOADED[key] = ns
    return ns
