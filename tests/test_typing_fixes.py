"""The real bugs mypy found, each shown by what it broke."""
from __future__ import annotations

import mxnet as mx
import pytest

from mxnet_amp.errors import ParamError
from mxnet_amp.graph import Entry
from mxnet_amp.params import check_params
from mxnet_amp.policy import Category, load_policy


def test_entry_is_a_full_tuple():
    # Entry's field named 'index' hid tuple.index (an int where a method belongs)
    e = Entry(5, 2, 0)
    assert e.output == 2 and e.node == 5
    assert e.index(2) == 1 and e.count(0) == 1


def test_every_param_error_has_the_declared_attributes():
    # only the shape check set .param/.found/.expected/.input_shapes on a ParamError; reading
    # them from any other ParamError raised AttributeError
    with pytest.raises(ParamError) as info:
        check_params(["data", "fc_weight"], [], {}, {}, ["data"])
    err = info.value
    assert err.param is None and err.found is None and err.expected is None
    assert err.input_shapes is False


def test_category_of_names_the_category_of_each_list():
    policy = load_policy("bfloat16")
    for category, ops in ((Category.TARGET, policy.target), (Category.FP32, policy.fp32),
                          (Category.WIDEST, policy.widest), (Category.FOLLOW, policy.follow)):
        op = sorted(ops)[0]
        assert policy.category_of(op) is category
