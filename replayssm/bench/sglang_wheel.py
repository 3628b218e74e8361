"""Load SGLang 0.5.16's GDN kernel files from its PyPI wheel at run time (nothing of SGLang lives in this repo).

``load_sglang_kernels`` opens the wheel, checks its version, extracts the few ``.py`` files that import
only torch and triton (refusing any other import), imports them under private module names and hands
back their functions. See ``sglang_peer`` for the peers built on them.
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
import os
import re
import sys
import tempfile
import types
import zipfile
from pathlib import Path

SGLANG_VERSION = "0.5.16"
WHEEL_ENV = "REPLAYSSM_SGLANG_WHEEL"
DEFAULT_WHEEL = "/tmp/sgl/sglang-0.5.16-cp311-cp311-manylinux_2_34_x86_64.whl"

_FLA = "sglang/kernels/ops/attention/fla/"
_SOURCES = {
    "spec": _FLA + "gdn_replayssm_spec_decode.py",
    "recurrent": _FLA + "fused_sigmoid_gating_recurrent.py",
    "ring_decode": _FLA + "fused_recurrent_linear_replayssm.py",
    "scatter": "sglang/kernels/ops/mamba/mamba_state_scatter_triton.py",
}
# (namespace attribute, source tag, attribute in that module)
_EXPORTS = (
    ("gdn_replayssm_spec_decode", "spec", "gdn_replayssm_spec_decode"),
    ("commit_gdn_replayssm_spec", "spec", "commit_gdn_replayssm_spec"),
    ("reset_gdn_replayssm_spec_cursors", "spec", "reset_gdn_replayssm_spec_cursors"),
    ("launch_gdn_exact_fold", "spec", "_launch_gdn_exact_fold"),
    ("fused_sigmoid_gating_delta_rule_update", "recurrent", "fused_sigmoid_gating_delta_rule_update"),
    ("fused_recurrent_gdn_replayssm_decode", "ring_decode", "fused_recurrent_linear_replayssm_decode"),
    ("fused_mamba_state_scatter_with_mask", "scatter", "fused_mamba_state_scatter_with_mask"),
    ("mamba_state_scatter_kernel", "scatter", "_fused_mamba_state_scatter_with_mask_kernel"),
)
_ALLOWED_IMPORTS = frozenset({"__future__", "typing", "torch", "triton"})
_SCATTER_BLOCK = 1024  # fused_mamba_state_scatter_with_mask's BLOCK_SIZE
_LOADED: dict[tuple, types.SimpleNamespace] = {}
_module_ids = itertools.count()


class SGLangWheelError(RuntimeError):
    """The SGLang wheel is missing, is not version 0.5.16, or lacks the expected kernel files."""


def default_wheel_path() -> str:
    """``$REPLAYSSM_SGLANG_WHEEL`` if set, else the default download location."""
    return os.environ.get(WHEEL_ENV) or DEFAULT_WHEEL


def _wheel_version(zf: zipfile.ZipFile, path: Path) -> str:
    metas = [n for n in zf.namelist() if re.fullmatch(r"sglang-[^/]+\.dist-info/METADATA", n)]
    if len(metas) != 1:
        raise SGLangWheelError(f"{path} is not an sglang wheel: no single sglang-*.dist-info/METADATA in it")
    for line in zf.read(metas[0]).decode("utf-8", "replace").splitlines():
        if not line.strip():  # the header block ends at the first blank line
            break
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    raise SGLangWheelError(f"{path}: {metas[0]} has no Version header")


def _check_imports(member: str, source: str) -> None:
    """Refuse a kernel file that would pull in anything beyond torch and triton (e.g. sglang itself)."""
    for node in ast.walk(ast.parse(source, filename=member)):
        if isinstance(node, ast.Import):
            roots = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            roots = [(node.module or "").split(".")[0]] if node.level == 0 else ["." * node.level]
        else:
            continue
        bad = [r for r in roots if r not in _ALLOWED_IMPORTS]
        if bad:
            raise SGLangWheelError(f"{member} imports {bad}; only files that import torch and triton alone are loaded")


def _import_file(path: Path, tag: str) -> types.ModuleType:
    name = f"_sglang_peer_{tag}_{next(_module_ids)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton and dataclass-like machinery look modules up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def load_sglang_kernels(wheel_path: str | os.PathLike | None = None) -> types.SimpleNamespace:
    """Import SGLang 0.5.16's GDN kernels from its wheel; returns a namespace of their functions.

    ``wheel_path`` defaults to ``default_wheel_path()``. Only the four kernel files are extracted
    (to a private temporary directory that lives as long as the process, since Triton reads kernel
    source from the files) and each is imported as ``_sglang_peer_<tag>_<n>``. Results are cached
    per wheel file and ``TRITON_INTERPRET`` setting. Raises ``SGLangWheelError`` if the wheel is
    missing, is another version, or lacks a file or function.

    Attributes: ``gdn_replayssm_spec_decode``, ``commit_gdn_replayssm_spec``,
    ``reset_gdn_replayssm_spec_cursors``, ``launch_gdn_exact_fold`` (SGLang's private launcher of the
    exact-fold kernel), ``fused_sigmoid_gating_delta_rule_update``,
    ``fused_recurrent_gdn_replayssm_decode``, ``fused_mamba_state_scatter_with_mask``,
    ``mamba_state_scatter_kernel`` (the raw Triton kernel behind it), plus ``version``,
    ``wheel_path``, ``source_dir`` and ``modules``.
    """
    path = Path(wheel_path if wheel_path is not None else default_wheel_path()).expanduser()
    if not path.is_file():
        raise SGLangWheelError(
            f"SGLang wheel not found at {path}; download sglang=={SGLANG_VERSION} "
            f"(pip download --no-deps sglang=={SGLANG_VERSION}) and point ${WHEEL_ENV} at it"
        )
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, os.environ.get("TRITON_INTERPRET", ""))
    if key in _LOADED:
        return _LOADED[key]
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as e:
        raise SGLangWheelError(f"{path} is not a wheel (zip) file: {e}") from None
    with zf:
        version = _wheel_version(zf, path)
        if version != SGLANG_VERSION:
            raise SGLangWheelError(f"{path} is sglang {version}; the peer needs sglang=={SGLANG_VERSION}")
        tmp = tempfile.TemporaryDirectory(prefix="replayssm_sglang_peer_")
        names = set(zf.namelist())
        files = {}
        for tag, member in _SOURCES.items():
            if member not in names:
                raise SGLangWheelError(f"{path} has no {member}")
            source = zf.read(member).decode("utf-8")
            _check_imports(member, source)
            files[tag] = Path(tmp.name) / Path(member).name
            files[tag].write_text(source, encoding="utf-8")
    modules = {tag: _import_file(f, tag) for tag, f in files.items()}
    ns = types.SimpleNamespace(
        version=version, wheel_path=str(path), source_dir=tmp.name, modules=types.SimpleNamespace(**modules)
    )
    for attr, tag, name in _EXPORTS:
        if not hasattr(modules[tag], name):
            raise SGLangWheelError(f"{_SOURCES[tag]} in {path} has no {name}")
        setattr(ns, attr, getattr(modules[tag], name))
    ns._tmpdir = tmp  # keeps the extracted sources alive with the namespace
    _LOADED[key] = ns
    return ns
