"""mxnet_amp.tune.tuning: what ``tune=`` asks for, the kernel case a timer times, and the default
timing cache path."""
import json

import pytest

from mxnet_amp.errors import TuneError
from mxnet_amp.tune.tuning import KernelCase, Tuning, default_cache_path, make_tuning


def test_default_cache_path_prefers_the_variable_then_xdg(monkeypatch, tmp_path):
    """$MXNET_AMP_TUNE_CACHE wins; without it the file lies under $XDG_CACHE_HOME/mxnet_amp."""
    monkeypatch.setenv("MXNET_AMP_TUNE_CACHE", str(tmp_path / "mine.json"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_path() == str(tmp_path / "mine.json")
    monkeypatch.delenv("MXNET_AMP_TUNE_CACHE")
    assert default_cache_path() == str(tmp_path / "xdg" / "mxnet_amp" / "tune.json")


def test_make_tuning_reads_each_accepted_value(monkeypatch, tmp_path):
    """None/False turn tuning off, True uses the default cache, a path names it, a Tuning passes."""
    monkeypatch.setenv("MXNET_AMP_TUNE_CACHE", str(tmp_path / "t.json"))
    assert make_tuning(None, "bfloat16") is None and make_tuning(False, "bfloat16") is None
    assert make_tuning(True, "bfloat16") == Tuning(cache=str(tmp_path / "t.json"))
    assert make_tuning(tmp_path / "p.json", "bfloat16") == Tuning(cache=str(tmp_path / "p.json"))
    given = Tuning(cache=None, rounds=2)
    assert make_tuning(given, "bfloat16") is given


def test_make_tuning_refuses_float16_and_other_types():
    """float16 has no CPU kernels to time, and a number is no tune= value: both a TuneError."""
    with pytest.raises(TuneError, match="float16"):
        make_tuning(True, "float16")
    with pytest.raises(TuneError, match="expected True"):
        make_tuning(3, "bfloat16")
    # off is off whatever the dtype: nothing is timed
    assert make_tuning(None, "float16") is None


def test_kernel_case_key_is_compact_json_and_tells_cases_apart():
    """The cache key holds op, attributes and input shapes, so two shapes get two keys."""
    case = KernelCase("Convolution", (("kernel", "(3,3)"),), (("data", (8, 64, 56, 56)), ("param", (64, 64, 3, 3))))
    assert json.loads(case.key()) == ["Convolution", [["kernel", "(3,3)"]],
                                      [["data", [8, 64, 56, 56]], ["param", [64, 64, 3, 3]]]]
    assert " " not in case.key()
    other = KernelCase("Convolution", case.attrs, (("data", (1, 64, 56, 56)), ("param", (64, 64, 3, 3))))
    assert other.key() != case.key()


def test_kernel_case_describe_names_op_and_shapes():
    """describe() is the op with each input's shape joined by 'x', as reports print it."""
    case = KernelCase("FullyConnected", (), (("data", (2, 16)), ("param", (4, 16)), ("param", (4,))))
    assert case.describe() == "FullyConnected(2x16, 4x16, 4)"
