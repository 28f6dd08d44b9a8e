"""mxnet_amp.passes.emulate: a converted graph as a float32 graph that rounds its low
precision tensors."""
import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.errors import ArgumentError
from mxnet_amp.ir.graph import CAST_OPS, Entry, GraphBuilder, Node, cast_node
from mxnet_amp.mx.io import graph_to_symbol
from mxnet_amp.mx.params import cast_array
from mxnet_amp.passes.emulate import check_rounding, emulate_graph
from mxnet_amp.passes.infer_dtypes import infer_dtypes


def _converted_graph():
    """data -> amp_cast bf16 -> sin -> amp_cast f32 (a tiny converted graph)."""
    b = GraphBuilder()
    data = b.add(Node("null", "data", ()))
    low = b.add(cast_node("c", Entry(data), "bfloat16"))
    s = b.add(Node("sin", "s", (Entry(low),)))
    return b.build([Entry(b.add(cast_node("back", Entry(s), "float32")))])


def test_every_op_of_the_emulated_graph_computes_in_float32():
    """Each op other than a cast gives float32; a bfloat16 tensor is only the middle of a
    rounding round trip (an amp_cast read by a cast back to float32)."""
    g = emulate_graph(_converted_graph(), {"data": "float32"})
    dtypes = infer_dtypes(g, {"data": "float32"})
    users = g.consumers()
    for i, node in enumerate(g.nodes):
        if node.op not in CAST_OPS:
            assert dtypes[i] == ("float32",), node.name
        elif dtypes[i] == ("bfloat16",):
            assert all(g.nodes[j].op == "amp_cast" and g.nodes[j].attrs["dtype"] == "float32"
                       for j, _ in users[i])
    assert dtypes[g.heads[0].node] == ("float32",)


def test_outputs_are_rounded_as_bfloat16_would_be():
    """The emulated sin equals sin of the bf16-rounded input, rounded to bf16 again."""
    g = emulate_graph(_converted_graph(), {"data": "float32"})
    x = np.array([[0.1234567, 1.7654321, -2.5]], dtype=np.float32)
    ex = graph_to_symbol(g).bind(mx.cpu(), {"data": mx.nd.array(x)})
    out = ex.forward()[0].asnumpy()

    def bf16(v):
        return cast_array(mx.nd.array(v), "bfloat16").astype("float32").asnumpy()
    np.testing.assert_array_equal(out, bf16(np.sin(bf16(x))))


def test_rounding_choices_are_checked():
    """An unknown rounding or bias rounding is an ArgumentError listing the choices."""
    check_rounding("mxnet-cpu", "fused")
    with pytest.raises(ArgumentError, match="rounding must be one of"):
        check_rounding("stochastic")
    with pytest.raises(ArgumentError, match="bias_rounding"):
        check_rounding("nearest", "never")
    with pytest.raises(ArgumentError):
        emulate_graph(_converted_graph(), {"data": "float32"}, rounding="up")


def test_the_input_graph_keeps_its_casts():
    """The pass builds a new graph: the converted graph's casts are still there."""
    g = _converted_graph()
    before = [n.op for n in g.nodes]
    emulate_graph(g, {"data": "float32"})
    assert [n.op for n in g.nodes] == before and CAST_OPS & set(before)


def test_golden_a_bfloat16_layer_rounds_its_input_weight_and_output():
    """Rule (rounding 'nearest'): a cast to bfloat16 becomes a round trip (``<cast>_to_
    bfloat16`` then float32 under the cast's own name); a bfloat16 weight becomes a float32
    variable (``__dtype__`` 0) holding rounded values; a bfloat16 op output is rounded
    (``<op>_round_bfloat16``, ``<op>_round_float32``); a cast to float32 stays as it is.

        amp_cast(fc(amp_cast(x, bf16), w:bf16), f32)
    """
    from golden import assert_graph, cast, graph, op, var
    from mxnet_amp.passes.emulate import EmulateGraph
    given = graph(var("x"), var("w", __dtype__="12"), cast("x16", "x", "bfloat16"),
                  op("fc", "FullyConnected", "x16", "w", num_hidden="2", no_bias="True"),
                  cast("out", "fc", "float32"), heads=["out"])
    expected = graph(var("x"), var("w", __dtype__="0"), cast("x16_to_bfloat16", "x", "bfloat16"),
                     cast("x16", "x16_to_bfloat16", "float32"),
                     op("fc", "FullyConnected", "x16", "w", num_hidden="2", no_bias="True"),
                     cast("fc_round_bfloat16", "fc", "bfloat16"), cast("fc_round_float32", "fc_round_bfloat16", "float32"),
                     cast("out", "fc_round_float32", "float32"), heads=["out"])
    dtypes = [("float32",), ("bfloat16",), ("bfloat16",), ("bfloat16",), ("float32",)]
    pass_ = EmulateGraph({"x": "float32", "w": "bfloat16"}, node_dtypes=dtypes)
    assert_graph(pass_(given).graph, expected)
