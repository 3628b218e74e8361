"""Everything under tests/gpu needs a CUDA GPU: marked ``gpu`` here; tests/conftest.py runs it in the GPU suite's
run (``pytest -m gpu tests/gpu``) and skips it elsewhere or without a GPU."""

from pathlib import Path

import pytest

from tests.helpers.peers import sglang_root  # noqa: F401  (test_peer_graphs.py)

_HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if _HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.gpu)
