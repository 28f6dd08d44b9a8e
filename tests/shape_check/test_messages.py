"""mxnet_amp.shape_check.messages (shape_check/messages): input shapes read, param errors worded."""
import mxnet as mx
import pytest

from mxnet_amp.errors import InputShapeError
from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.shape_check.guess import unknown_dim
from mxnet_amp.shape_check.messages import input_shapes, param_error


def test_input_shapes_take_a_mapping_or_module_bind_pairs():
    """{name: shape}, [(name, shape)] and DataDesc lists all give {name: tuple of ints}; None {}."""
    assert input_shapes({"data": [2, 3]}) == {"data": (2, 3)}
    assert input_shapes([("data", (2, 3))]) == {"data": (2, 3)}
    assert input_shapes([mx.io.DataDesc("data", (4, 1))]) == {"data": (4, 1)}
    assert input_shapes(None) == {}


def test_input_shapes_refuse_non_positive_dimensions_and_bad_items():
    """Zero or bool dimensions and an item that is no pair are InputShapeErrors naming the flag."""
    with pytest.raises(InputShapeError, match="--shape: the shape of 'data'"):
        input_shapes({"data": (2, 0)}, "--shape")
    with pytest.raises(InputShapeError):
        input_shapes({"data": (True, 3)})
    with pytest.raises(InputShapeError, match="expected"):
        input_shapes([5])


def test_param_error_names_the_shapes_and_the_readers():
    """The message shows the param's shape, the expected one (? for unknown) and who reads it."""
    g = graph_from_symbol(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc"))
    err = param_error(g, "fc_weight", (3, 5), (3, unknown_dim()), " with data (2, 4)")
    text = str(err)
    assert "param 'fc_weight' has shape (3, 5) but the symbol expects (3, ?) there with data (2, 4)" in text
    assert "'fc' (FullyConnected)" in text
    assert err.param == "fc_weight" and err.expected == (3, unknown_dim())
