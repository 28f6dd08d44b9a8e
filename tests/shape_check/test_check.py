"""mxnet_amp.shape_check.check (shape_check/check): params' shapes checked against the symbol."""
import mxnet as mx
import pytest

from mxnet_amp.errors import InputShapeError, ParamError
from mxnet_amp.shape_check.check import check_param_shapes


def _conv_fc():
    """data -> conv(4 filters, 3x3) -> global pool -> flatten -> fc(3)."""
    x = mx.sym.var("data")
    c = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), name="conv")
    p = mx.sym.Pooling(c, global_pool=True, kernel=(1, 1), pool_type="avg", name="pool")
    return mx.sym.FullyConnected(mx.sym.flatten(p), num_hidden=3, name="fc")


def _params(**override):
    shapes = {"conv_weight": (4, 3, 3, 3), "conv_bias": (4,), "fc_weight": (3, 4), "fc_bias": (3,)}
    shapes.update(override)
    return {k: mx.nd.zeros(s) for k, s in shapes.items()}


def test_consistent_params_pass_without_data_shapes():
    """Params that agree with each other pass, with or without the input's shape."""
    check_param_shapes(_conv_fc(), _params(), {})
    check_param_shapes(_conv_fc(), _params(), {}, {"data": (2, 3, 8, 8)})


def test_a_weight_contradicting_another_is_named_with_both_shapes():
    """fc2_weight reading 5 features after fc1's 4 units: ParamError naming the param, its
    shape and the expected one (the params alone prove it, no data shapes needed)."""
    x = mx.sym.var("data")
    sym = mx.sym.FullyConnected(mx.sym.FullyConnected(x, num_hidden=4, name="fc1"), num_hidden=2, name="fc2")
    params = {"fc1_weight": mx.nd.zeros((4, 6)), "fc1_bias": mx.nd.zeros((4,)),
              "fc2_weight": mx.nd.zeros((2, 5)), "fc2_bias": mx.nd.zeros((2,))}
    with pytest.raises(ParamError) as err:
        check_param_shapes(sym, params, {})
    assert err.value.param == "fc2_weight" and err.value.found == (2, 5)
    assert "'fc2' (FullyConnected)" in str(err.value)


def test_a_weight_contradicting_the_data_shape():
    """conv_weight for 1 input channel is fine alone but contradicts 3-channel data."""
    params = _params(conv_weight=(4, 1, 3, 3))
    check_param_shapes(_conv_fc(), params, {})
    with pytest.raises(ParamError, match="conv_weight"):
        check_param_shapes(_conv_fc(), params, {}, {"data": (2, 3, 8, 8)})


def test_bad_data_shapes_are_an_input_shape_error():
    """A shape that is not positive integers is an InputShapeError naming shapes_from."""
    with pytest.raises(InputShapeError, match="sample_inputs"):
        check_param_shapes(_conv_fc(), _params(), {}, {"data": (2, -3, 8, 8)},
                           shapes_from="sample_inputs")
