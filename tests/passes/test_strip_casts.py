"""strip_casts: a converted graph without its AMP casts computes what the float32 model does."""
from types import MappingProxyType

import mxnet as mx
import numpy as np

import mxnet_amp as amp
from mxnet_amp.ir.graph import CAST_OPS, Entry, Graph, Node, cast_node, multicast_node
from mxnet_amp.ir.verify import verify_graph
from mxnet_amp.mx.io import graph_from_symbol, graph_to_symbol
from mxnet_amp.passes.strip_casts import strip_casts

from helpers import init_params, run


def _model():
    x = mx.sym.var("data")
    a = mx.sym.Activation(mx.sym.FullyConnected(x, num_hidden=6, name="fc1"), act_type="relu", name="r")
    b = mx.sym.softmax(mx.sym.FullyConnected(a, num_hidden=6, name="fc2"), name="sm")
    # a float32-list op next to a low precision one makes the conversion insert a multicast
    return mx.sym.Group([mx.sym.broadcast_add(a, b, name="add"), mx.sym.exp(b, name="e")])


def test_stripped_converted_graph_is_the_fp32_graph_and_reproduces_it():
    sym = _model()
    args, auxs = init_params(sym, {"data": (3, 5)})
    csym, cargs, cauxs = amp.convert_model(sym, args, auxs, target_dtype="float16",
                                           cast_optional_params=False)
    converted = graph_from_symbol(csym)
    assert {n.op for n in converted.nodes} & CAST_OPS == CAST_OPS  # casts and a multicast
    stripped = verify_graph(strip_casts(converted))
    original = graph_from_symbol(sym)
    assert [(n.op, n.name) for n in stripped.nodes] == [(n.op, n.name) for n in original.nodes]
    assert stripped.heads == original.heads
    assert all(n.inputs == o.inputs for n, o in zip(stripped.nodes, original.nodes))
    x = np.random.RandomState(0).randn(3, 5)
    for want, got in zip(run(sym, args, auxs, {"data": x}),
                         run(graph_to_symbol(stripped), cargs, cauxs, {"data": x})):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_multicast_outputs_and_cast_heads_are_rewired_to_their_inputs():
    x, y = Node("null", "x"), Node("null", "y")
    nodes = (x, y, cast_node("x16", Entry(0), "float16"), multicast_node("m", (Entry(2), Entry(1))),
             Node("elemwise_add", "add", (Entry(3, 1), Entry(3, 0))), cast_node("out32", Entry(4), "float32"))
    g = Graph(nodes, (Entry(5), Entry(3, 1)))
    out = strip_casts(g)
    assert [n.name for n in out.nodes] == ["x", "y", "add"]
    assert out.nodes[2].inputs == (Entry(1), Entry(0))  # m's output 1 is y, output 0 is x
    assert out.heads == (Entry(2), Entry(1))
    assert len(g.nodes) == 6 and g.nodes[4].inputs == (Entry(3, 1), Entry(3, 0))  # input untouched


def test_graph_without_amp_casts_comes_back_equal_and_mxnet_cast_is_kept():
    x = Node("null", "x")
    cast = Node("Cast", "c", (Entry(0),), MappingProxyType({"dtype": "float16"}))
    g = Graph((x, cast, Node("relu", "r", (Entry(1),))), (Entry(2),))
    assert strip_casts(g) == g


def test_casts_inside_subgraphs_go_too():
    body = Graph((Node("null", "v"), cast_node("v16", Entry(0), "float16"), Node("relu", "r", (Entry(1),))),
                 (Entry(2),))
    outer = Graph((Node("null", "x"), Node("_foreach", "loop", (Entry(0),), subgraphs=(body,))), (Entry(1),))
    (inner,) = strip_casts(outer).nodes[1].subgraphs
    assert [n.name for n in inner.nodes] == ["v", "r"] and inner.nodes[1].inputs == (Entry(0),)


def test_golden_every_amp_cast_goes_and_its_readers_read_its_input():
    """Rule: each amp_cast / amp_multicast is removed; a reader of a cast (a head too) reads
    the cast's input, output k of a multicast its input k; MXNet's own Cast stays.

        x -> amp_cast(f16) -> fc(w) -> amp_multicast(fc, y) -> add -> Cast(f32) -> head
    """
    from golden import assert_graph, cast, graph, op, var
    given = graph(var("x"), var("w"), var("y"), cast("x16", "x", "float16"),
                  op("fc", "FullyConnected", "x16", "w", num_hidden="4"),
                  op("mc", "amp_multicast", "fc", "y", num_outputs="2", cast_narrow="False"),
                  op("add", "elemwise_add", ("mc", 0), ("mc", 1)),
                  op("out", "Cast", "add", dtype="float32"), cast("head32", "out", "float32"),
                  heads=["head32", ("mc", 1)])
    expected = graph(var("x"), var("w"), var("y"), op("fc", "FullyConnected", "x", "w", num_hidden="4"),
                     op("add", "elemwise_add", "fc", "y"), op("out", "Cast", "add", dtype="float32"),
                     heads=["out", "y"])
    assert_graph(strip_casts(given), expected)
    assert strip_casts(expected) is expected   # nothing to strip: the same object
