"""mxnet_amp.auto.inputs: automatic mode's sample inputs, checked and made NDArrays."""
import warnings

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.auto.inputs import loss_labels, sample_inputs
from mxnet_amp.errors import GraphError, InputShapeError, InputValueError
from mxnet_amp.mx.io import graph_from_symbol


def _softmax_model():
    fc = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc")
    return mx.sym.SoftmaxOutput(fc, name="softmax")


def test_loss_labels_are_the_variables_only_a_loss_op_reads_as_label():
    """SoftmaxOutput's label is a loss label; data and the weights are not."""
    assert loss_labels(graph_from_symbol(_softmax_model())) == frozenset({"softmax_label"})


def test_a_sample_is_made_float32_and_the_label_zeros_of_the_implied_shape():
    """One float64 array for the one input: a float32 NDArray (with a warning), and zeros
    for the label shaped as the batch implies."""
    sym = _softmax_model()
    x = np.ones((4, 5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = sample_inputs(x, ["data", "softmax_label"], mx.cpu(), sym, graph_from_symbol(sym))
    assert any("cast to float32" in str(c.message) for c in caught)
    assert out["data"].dtype == np.float32 and out["data"].shape == (4, 5)
    assert out["softmax_label"].shape == (4,) and out["softmax_label"].asnumpy().sum() == 0


def test_missing_extra_and_misplaced_samples_are_refused():
    """A missing input or an unknown name is a GraphError; a dtype string given in the
    samples' place an InputValueError saying to pass target_dtype by keyword."""
    sym = _softmax_model()
    g = graph_from_symbol(sym)
    with pytest.raises(GraphError, match="not inputs of the model"):
        sample_inputs({"data": np.ones((1, 5)), "other": np.ones(1)}, ["data"], mx.cpu(), sym, g)
    with pytest.raises(InputValueError, match="target_dtype='bfloat16'"):
        sample_inputs("bfloat16", ["data"], mx.cpu(), sym, g)


def test_empty_non_numeric_and_non_finite_samples_are_refused():
    """An empty batch, strings and an all-nan sample are each a typed error."""
    sym = _softmax_model()
    g = graph_from_symbol(sym)
    with pytest.raises(InputShapeError, match="empty batch"):
        sample_inputs(np.ones((0, 5)), ["data"], mx.cpu(), sym, g)
    with pytest.raises(InputValueError, match="takes numbers"):
        sample_inputs(np.array([["a"] * 5]), ["data"], mx.cpu(), sym, g)
    with pytest.raises(InputValueError, match="no finite value"):
        sample_inputs(np.full((1, 5), np.nan, dtype=np.float32), ["data"], mx.cpu(), sym, g)
