"""mxnet_amp.mx.params: the rounding cast, model inputs and the checks of params against a symbol
(recast_params has tests/mx/test_params.py)."""
import warnings

import mxnet as mx
import pytest

from mxnet_amp.errors import ParamError
from mxnet_amp.ir.dtypes import array_dtype
from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.mx.params import (cast_array, check_params, default_data_names, label_inputs,
                                 model_inputs, name_list)


def test_cast_array_rounds_to_nearest_even_for_bfloat16():
    """1 + 2**-8 + 2**-9 is above the halfway point of bf16's 7-bit mantissa: it rounds up
    (astype would truncate to 1.0)."""
    x = mx.nd.array([1 + 2 ** -8 + 2 ** -9], dtype="float32")
    y = cast_array(x, "bfloat16")
    assert array_dtype(y) == "bfloat16"
    assert float(y.astype("float32").asscalar()) == 1 + 2 ** -7


def test_name_list_takes_one_string_as_one_name():
    """'data' is one name, not four letters; None stays None; an iterable becomes a list."""
    assert name_list("data") == ["data"]
    assert name_list(None) is None
    assert name_list(("a", "b")) == ["a", "b"]


def test_default_data_names_refuses_a_missing_weight():
    """The arguments without a param are inputs, unless one is named like a weight."""
    assert default_data_names(["data", "w"], {"w": 1}) == ["data"]
    with pytest.raises(ParamError, match="fc1_bias"):
        default_data_names(["data", "fc1_bias"], {})


def test_model_inputs_add_the_label_of_a_loss_op():
    """A SoftmaxOutput's label variable is an input beside the named data."""
    sym = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc"),
                               name="softmax")
    labels = label_inputs(graph_from_symbol(sym))
    assert labels == ["softmax_label"]
    assert model_inputs(sym.list_arguments(), {"fc_weight": 0, "fc_bias": 0}, "data",
                        labels=labels) == ["data", "softmax_label"]


def test_check_params_names_missing_unused_and_float64_params():
    """A missing param is an error naming it; an unused one a warning (error with strict);
    a float64 param is refused."""
    names = ["data", "fc_weight", "fc_bias"]
    w, b = mx.nd.ones((2, 3)), mx.nd.zeros((2,))
    with pytest.raises(ParamError, match="fc_bias"):
        check_params(names, [], {"fc_weight": w}, {}, ["data"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_params(names, [], {"fc_weight": w, "fc_bias": b, "old": b}, {}, ["data"])
    assert any("old" in str(c.message) for c in caught)
    with pytest.raises(ParamError, match="strict_params"):
        check_params(names, [], {"fc_weight": w, "fc_bias": b, "old": b}, {}, ["data"], strict=True)
    with pytest.raises(ParamError, match="not float32"):
        check_params(names, [], {"fc_weight": w.astype("float64"), "fc_bias": b}, {}, ["data"])
