"""mxnet_amp.ir.gcpause: the garbage collector paused around big graph work, then restored."""
import gc

import pytest

from mxnet_amp.ir.gcpause import gc_paused


def test_collector_is_off_inside_and_back_on_after():
    """An enabled collector is disabled in the block and enabled again on exit."""
    gc.enable()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    """When the caller had disabled collection, leaving the block does not turn it on."""
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_state_is_restored_when_the_block_raises():
    """An exception inside the block still re-enables the collector."""
    gc.enable()
    with pytest.raises(RuntimeError):
        with gc_paused():
            raise RuntimeError("boom")
    assert gc.isenabled()
