"""The real bugs mypy found, each shown by what it broke."""
from __future__ import annotations

import mxnet as mx
import pytest

from mxnet_amp.errors import ParamError
from mxnet_amp.ir.graph import Entry
from mxnet_amp.mx.params import check_params
from mxnet_amp.policy import Category
from mxnet_amp.policy_load import load_policy


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


def _fc_without_bias_param():
    data = mx.sym.var("data")
    sym = mx.sym.FullyConnected(data, num_hidden=4, name="fc1")
    args = {"fc1_weight": mx.nd.ones((4, 3))}   # fc1_bias is missing
    return sym, args


@pytest.mark.parametrize("entry", ["convert_model", "auto_convert_model"])
def test_a_missing_bias_is_a_param_error_in_every_entry_point(entry):
    # one rule decides which inputs are data: auto's own lacked the weight-suffix guard, so
    # there a missing fc1_bias was a "missing sample input" (GraphError)
    import mxnet_amp as amp
    sym, args = _fc_without_bias_param()
    with pytest.raises(ParamError, match="fc1_bias"):
        if entry == "convert_model":
            amp.convert_model(sym, args, {}, target_dtype="bfloat16")
        else:
            amp.auto_convert_model(sym, args, {}, {"data": mx.nd.ones((2, 3))},
                                   target_dtype="bfloat16", execution="emulated")
