"""What an SGLang kernel file may import, checked before it is extracted and again before it runs.

A peer file may import torch, triton and a few standard modules (``ALLOWED_ROOTS``) freely; an
import from SGLang itself must be one of its release's bound names (``Release.bound``), and is
served at run time by ``restricted_import`` from replayssm's host queries or another extracted file.
Everything else (``import sglang``, relative or star imports, any other package) is refused.
"""

from __future__ import annotations

import ast
import builtins
import types
from collections.abc import Iterable

ALLOWED_ROOTS = frozenset({"__future__", "typing", "functools", "torch", "triton"})


class PeerSourceError(RuntimeError):
    """A kernel file imports something the peer loader does not allow."""


def sglang_imports(member: str, source: str) -> list[tuple[str, str]]:
    """The ``(module, name)`` pairs a file imports from SGLang; raises on any import that is neither
    from ``ALLOWED_ROOTS`` nor a plain ``from sglang.<module> import <names>``."""
    pairs = []
    for node in ast.walk(ast.parse(source, filename=member)):
        if isinstance(node, ast.Import):
            bad = [a.name for a in node.names if a.name.split(".")[0] not in ALLOWED_ROOTS]
            if bad:
                raise PeerSourceError(f"{member} imports {bad}; kernel files may import {sorted(ALLOWED_ROOTS)}")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            root = module.split(".")[0]
            if node.level == 0 and root in ALLOWED_ROOTS:
                continue
            if node.level or root != "sglang" or any(a.name == "*" for a in node.names):
                line = ast.get_source_segment(source, node) or module
                raise PeerSourceError(f"{member}: refused import {line!r}")
            pairs += [(module, a.name) for a in node.names]
    return pairs


def check_source(member: str, source: str, bound: Iterable[tuple[str, str]]) -> None:
    """Raise ``PeerSourceError`` unless every SGLang import of the file is a bound name."""
    allowed = set(bound)
    unbound = [f"{m}.{n}" for m, n in sglang_imports(member, source) if (m, n) not in allowed]
    if unbound:
        raise PeerSourceError(f"{member} imports {unbound} from SGLang, which the peer loader does not provide")


def restricted_import(bindings: dict[str, dict[str, object]]):
    """An ``__import__`` for a kernel module's builtins: ``ALLOWED_ROOTS`` import normally, ``from
    <module> import <name>`` returns ``bindings[module][name]``, everything else raises ImportError."""
    real = builtins.__import__

    def _import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name.split(".")[0] in ALLOWED_ROOTS:
            return real(name, globals, locals, fromlist, level)
        provided = bindings.get(name) if level == 0 else None
        if provided is None or not fromlist or any(n not in provided for n in fromlist):
            raise ImportError(f"SGLang kernel file import of {name} {list(fromlist or ())} is not provided here")
        stand_in = types.ModuleType(name)
        for n in fromlist:
            setattr(stand_in, n, provided[n])
        return stand_in

    return _import
