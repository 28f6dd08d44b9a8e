"""mxnet_amp.shape_check.infer (shape_check/infer): partial shape inference going past stops."""
import mxnet as mx
import pytest

from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.shape_check.infer import CONTRADICTION, Checker, symbol_input_names


def _fc_chain():
    x = mx.sym.var("data")
    return mx.sym.FullyConnected(mx.sym.FullyConnected(x, num_hidden=4, name="fc1"),
                                 num_hidden=2, name="fc2")


def test_symbol_input_names_lists_arguments_then_aux_states():
    """Arguments first, then BatchNorm's moving statistics."""
    sym = mx.sym.BatchNorm(mx.sym.var("data"), name="bn")
    assert symbol_input_names(sym) == ["data", "bn_gamma", "bn_beta", "bn_moving_mean", "bn_moving_var"]


def test_infer_fills_in_the_weights_from_the_data_shape():
    """Given data (2, 5), the checker infers both weights' shapes."""
    sym = _fc_chain()
    shapes = Checker(graph_from_symbol(sym), sym, {}).infer({"data": (2, 5)})
    assert shapes["fc1_weight"] == (4, 5) and shapes["fc2_weight"] == (2, 4)


def test_a_contradiction_is_raised_and_consistent_says_false():
    """A weight of the wrong size contradicts the data: infer raises MXNet's error
    (a CONTRADICTION), consistent() answers False."""
    sym = _fc_chain()
    checker = Checker(graph_from_symbol(sym), sym, {})
    bad = {"data": (2, 5), "fc1_weight": (4, 6)}
    assert not checker.consistent(bad)
    with pytest.raises(mx.base.MXNetError) as err:
        checker.infer(bad)
    assert CONTRADICTION.search(str(err.value))


def test_first_breaking_finds_the_first_shape_that_contradicts():
    """Adding shapes in order, the one that first contradicts is found by binary search."""
    sym = _fc_chain()
    checker = Checker(graph_from_symbol(sym), None, {})
    shapes = {"fc1_weight": (4, 5), "fc1_bias": (4,), "fc2_weight": (2, 7), "fc2_bias": (2,)}
    order = list(shapes)
    assert checker.first_breaking({"data": (2, 5)}, order, shapes) == 2
