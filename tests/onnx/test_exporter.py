"""mxnet_amp.onnx.exporter: the inputs MXNet's exporter is shown, the graph it converts and
the output names it writes."""
from __future__ import annotations

import mxnet as mx
import pytest

from helpers import small_model

onnx = pytest.importorskip("onnx", reason="the onnx extra: pip install -e '.[onnx]'")

import mxnet_amp as amp  # noqa: E402
from mxnet_amp.errors import InputShapeError  # noqa: E402
from mxnet_amp.mx.io import graph_from_symbol  # noqa: E402
from mxnet_amp.onnx.exporter import (ExportInputs, exporter_graphs, mxnet_output_name,  # noqa: E402
                                     onnx_output_names)

FLOAT, FLOAT16 = 1, 10


def converted(dtype="float16"):
    """small_model converted to ``dtype`` (BatchNorm kept, so aux states are weights too)."""
    sym, args, auxs = small_model()
    new_sym, new_args, new_aux = amp.convert_model(sym, args, auxs, target_dtype=dtype,
                                                   fold_batchnorm=False)
    return new_sym, {**new_args, **new_aux}


def test_export_inputs_orders_data_then_weights_with_their_dtypes():
    """Data inputs take the given shape (float32); weights their stored shape and dtype."""
    sym, params = converted()
    inputs = ExportInputs(sym, graph_from_symbol(sym), params, {"data": (2, 3, 8, 8)}, {})
    assert inputs.data == ["data"] and set(inputs.weights) == set(params)
    assert inputs.names == [n for n in sym.list_inputs()]
    assert inputs.shapes["data"] == (2, 3, 8, 8) and inputs.dtypes["data"] == "float32"
    assert inputs.shapes["conv1_weight"] == tuple(params["conv1_weight"].shape)
    assert inputs.dtypes["conv1_weight"] == "float16"


def test_export_inputs_names_missing_and_unknown_shapes():
    """A data input without a shape and a shape for no input are both named in one InputShapeError."""
    sym, params = converted()
    with pytest.raises(InputShapeError, match="missing data; not a model input: image"):
        ExportInputs(sym, graph_from_symbol(sym), params, {"image": (1, 3, 8, 8)}, {})


def test_exporter_graph_types_the_inputs_as_stored():
    """A float16 conversion exports its data input float32 and its float16 weights float16."""
    sym, params = converted()
    graph = graph_from_symbol(sym)
    inputs = ExportInputs(sym, graph, params, {"data": (2, 3, 8, 8)}, {})
    proto, _ = exporter_graphs(inputs, graph, "float16", 13, dynamic_batch=False)
    types = {i.name: i.type.tensor_type.elem_type for i in proto.input}
    assert types["data"] == FLOAT and types["conv1_weight"] == FLOAT16
    assert any(n.op_type == "Cast" for n in proto.node)


def test_a_bfloat16_graph_is_shown_to_the_exporter_as_float16():
    """MXNet's exporter knows no bfloat16: the bfloat16 weights are typed float16 in its graph."""
    sym, params = converted("bfloat16")
    graph = graph_from_symbol(sym)
    inputs = ExportInputs(sym, graph, params, {"data": (2, 3, 8, 8)}, {})
    assert inputs.dtypes["conv1_weight"] == "bfloat16"
    proto, _ = exporter_graphs(inputs, graph, "bfloat16", 13, dynamic_batch=True)
    types = {i.name: i.type.tensor_type for i in proto.input}
    assert types["conv1_weight"].elem_type == FLOAT16
    # dynamic batch: the data input's first dimension is left free
    assert not types["data"].shape.dim[0].HasField("dim_value")


def test_output_names_follow_mxnet_exporter_rules():
    """'_output' is dropped, state outputs get 1/2, numbered outputs keep their number; heads skip casts."""
    assert mxnet_output_name("fc_output") == "fc"
    assert mxnet_output_name("rnn_state_output") == "rnn1"
    assert mxnet_output_name("rnn_statecell_output") == "rnn2"
    assert mxnet_output_name("split_output3") == "split3"
    assert mxnet_output_name("plain") == "plain"
    sym, _ = converted()
    cast_head = amp.convert_symbol(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc"),
                                   target_dtype="float16", cast_optional_params=False)
    assert onnx_output_names(graph_from_symbol(sym)) == ["prob"]
    assert onnx_output_names(graph_from_symbol(cast_head)) == ["fc"]


def test_output_order_follows_the_nodes_that_make_the_heads_through_casts():
    """``Group([b, a])`` with ``b = FC(a)``: MXNet's exporter writes a (made first) then b; in
    a float16 conversion each head is followed through its cast to the node that makes it."""
    from mxnet_amp.onnx.exporter import mxnet_output_order
    d = mx.sym.var("data")
    a = mx.sym.FullyConnected(d, num_hidden=4, name="a")
    b = mx.sym.FullyConnected(a, num_hidden=3, name="b")
    group = mx.sym.Group([b, a])
    assert mxnet_output_order(graph_from_symbol(group)) == [1, 0]
    shapes, _, _ = group.infer_shape(data=(2, 5))
    args = {n: mx.nd.ones(s) for n, s in zip(group.list_arguments(), shapes) if n != "data"}
    converted, _, _ = amp.convert_model(group, args, {}, target_dtype="float16")
    graph = graph_from_symbol(converted)
    assert any(graph.nodes[h.node].op == "amp_cast" for h in graph.heads)     # heads are casts
    assert mxnet_output_order(graph) == [1, 0]
    assert mxnet_output_order(graph_from_symbol(mx.sym.Group([a, b]))) == [0, 1]
