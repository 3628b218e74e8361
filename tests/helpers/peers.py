"""SGLang's kernel files for the peer tests (tests/bench/peers, and the CUDA-graph ones in tests/gpu), on any machine
that can reach PyPI.

Decision (issue 13): the peer tests run in CI. CI installs through the README's test command on a
clean CPU machine, so nothing of SGLang is there; the ``sglang_root`` fixture therefore uses
``$REPLAYSSM_PEERS`` or ``.peers/`` when they hold both releases' extracted files, and otherwise
``pip download``s the two wheels (15 + 39 MB, once, into ``$REPLAYSSM_WHEEL_CACHE`` or
``~/.cache/replayssm/wheels``) and extracts their kernel files into a temporary folder, exactly as
``replayssm bench peers --download`` does. The tests are skipped only when the download fails and
PyPI cannot be reached (no network); any other failure (a wheel that changed, a refused import) fails.
"""

import socket

import pytest

# replayssm is imported inside the fixture, not here: the conftest files that import this module may load before
# tests/conftest.py has chosen the run's TRITON_INTERPRET, which must be set before replayssm.ops is imported.


def _extracted(root) -> bool:
    from replayssm.bench.peers.sglang import RELEASES
    from replayssm.bench.peers.sglang.extract import MANIFEST

    return all((root / r.folder / MANIFEST).is_file() for r in RELEASES.values())


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def sglang_root(tmp_path_factory):
    from replayssm.bench.peers.sglang import RELEASES, PeerKernelsError, default_root
    from replayssm.bench.peers.sglang.extract import default_cache, extract_all

    root = default_root()
    if _extracted(root):
        return root
    root = tmp_path_factory.mktemp("peers")
    cache = default_cache()
    try:
        extract_all(RELEASES.values(), root, wheels=[cache] if cache.is_dir() else [], download=True, cache=cache)
    except PeerKernelsError as e:
        if "pip download" in str(e) and not _pypi_reachable():
            pytest.skip(f"network unavailable, cannot fetch the sglang wheels ({e})")
        raise
    return root
