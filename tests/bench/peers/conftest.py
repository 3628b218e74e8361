"""The ``sglang_root`` fixture (``tests/helpers/peers.py`` says where the kernel files come from)."""

from tests.helpers.peers import sglang_root  # noqa: F401
