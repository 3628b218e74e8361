"""Graph captures run with the cycle collector paused (engine/graphs.py, ``gc_paused``): garbage is collected on
entry, none during the capture, and the collector is back on afterwards, also when the capture raises."""

import gc
import weakref

import pytest

from replayssm.engine.graphs import gc_paused


class _Node:
    pass


def _cycle():
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_gc_paused_collects_on_entry_then_holds_the_collector():
    gc.disable()  # so that only gc_paused can collect the cycle below
    try:
        ref = _cycle()
        assert ref() is not None
        with gc_paused():
            assert ref() is None  # collected on entry
            late = _cycle()
            assert late() is not None  # and nothing collects inside
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_gc_paused_restores_the_collector_when_the_block_raises():
    with pytest.raises(RuntimeError, match="capture failed"), gc_paused():
        raise RuntimeError("capture failed")
    assert gc.isenabled()
