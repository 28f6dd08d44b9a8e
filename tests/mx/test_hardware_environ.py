"""mxnet_amp.mx.hardware.environ_set: an environment variable set for a block, then restored."""
import os

import pytest

from mxnet_amp.mx.hardware import environ_set

NAME = "MXNET_AMP_TEST_ENVIRON_SET"


def test_a_value_is_set_inside_and_the_old_one_back_after(monkeypatch):
    """A variable that had a value gets the new one in the block and its own after."""
    monkeypatch.setenv(NAME, "before")
    with environ_set(NAME, "inside"):
        assert os.environ[NAME] == "inside"
    assert os.environ[NAME] == "before"


def test_a_variable_that_was_unset_is_unset_again(monkeypatch):
    """A variable absent before the block is absent after it, even when the block raises."""
    monkeypatch.delenv(NAME, raising=False)
    with pytest.raises(RuntimeError):
        with environ_set(NAME, "1"):
            assert os.environ[NAME] == "1"
            raise RuntimeError("boom")
    assert NAME not in os.environ


def test_none_removes_the_variable_inside_the_block(monkeypatch):
    """value=None unsets it in the block; the old value comes back after."""
    monkeypatch.setenv(NAME, "kept")
    with environ_set(NAME, None):
        assert NAME not in os.environ
    assert os.environ[NAME] == "kept"
