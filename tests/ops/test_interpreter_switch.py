"""``TRITON_INTERPRET`` is read the way Triton reads it (ops/_interpreter.py): "true" or "yes" turned the
interpreter on in Triton while one of replayssm's checks read only "1", and another took "false" for on."""

import pytest
from triton._C.libtriton import getenv_bool

from replayssm import _env
from replayssm.ops import _gluon, _interpreter

VALUES = ["1", "0", "", "true", "TRUE", "True", "false", "on", "OFF", "yes", "no", "y", "n", "2", " 1", "enable"]


@pytest.mark.parametrize("value", VALUES)
def test_the_switch_reads_as_triton_reads_it(value, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert _env.interpreter_requested() == getenv_bool("TRITON_INTERPRET", False)


def test_unset_is_off(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert not _env.interpreter_requested() and not getenv_bool("TRITON_INTERPRET", False)


def test_one_flag_for_the_kernels():
    """The kernels' modules share one reading, made when ops was imported, and it is what Triton's ``@triton.jit``
    saw when it defined them."""
    from triton import knobs

    from replayssm.ops import moe, paged_attention

    assert _interpreter.INTERPRET == bool(knobs.runtime.interpret)
    assert _gluon.INTERPRET == moe.INTERPRET == paged_attention.INTERPRET == _interpreter.INTERPRET
