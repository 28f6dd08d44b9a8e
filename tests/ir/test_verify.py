"""verify_graph: each rule it checks, broken on purpose, and a converted zoo-like net passing."""
from types import MappingProxyType

import mxnet as mx
import pytest

from mxnet_amp.errors import GraphCheckError, GraphError
from mxnet_amp.ir.graph import Entry, Graph, Node, cast_node, multicast_node
from mxnet_amp.ir.verify import verify_graph

from helpers import init_params

X = Node("null", "x")
W = Node("null", "w")


def fc(name, *inputs):
    return Node("FullyConnected", name, tuple(inputs), MappingProxyType({"num_hidden": "4"}))


def good():
    # x, w -> cast(x), cast(w) -> fc
    return Graph((X, W, cast_node("x16", Entry(0), "float16"), cast_node("w16", Entry(1), "float16"),
                  fc("fc", Entry(2), Entry(3))), (Entry(4),))


def test_a_well_formed_graph_passes_and_comes_back_unchanged():
    g = good()
    assert verify_graph(g) is g


def test_a_converted_symbol_passes(verified_passes):
    import mxnet_amp as amp
    x = mx.sym.var("data")
    y = mx.sym.Activation(mx.sym.FullyConnected(x, num_hidden=4, name="fc1"), act_type="relu") + x
    sym = mx.sym.FullyConnected(y, num_hidden=4, name="fc2")
    args, auxs = init_params(sym, {"data": (2, 4)})
    amp.convert_model(sym, args, auxs, target_dtype="float16")
    assert verified_passes.calls >= 2  # insert_casts and tag_param_dtypes were both checked


def expect(graph, *words, **kw):
    with pytest.raises(GraphCheckError) as info:
        verify_graph(graph, **kw)
    for w in words:
        assert w in str(info.value), str(info.value)
    assert isinstance(info.value, GraphError)
    return str(info.value)


def test_not_topological():
    g = Graph((X, fc("fc", Entry(2)), cast_node("c", Entry(0), "float16")), (Entry(1),))
    text = expect(g, "'fc'", "comes later")
    assert ">    1 fc = FullyConnected(2:0)" in text  # the window marks the offending node
    assert "     2 c = amp_cast(0:0)" in text


def test_duplicate_names():
    expect(Graph((X, W, fc("x", Entry(0), Entry(1))), (Entry(2),)), "duplicate node name", "'x'")


def test_input_out_of_range():
    expect(Graph((X, fc("fc", Entry(0), Entry(7))), (Entry(1),)), "'fc'", "does not exist")


def test_head_out_of_range():
    expect(Graph((X,), (Entry(3),)), "head 0 reads node 3")


def test_cast_of_a_cast_is_refused_unless_chains_are_allowed():
    g = Graph((X, cast_node("a", Entry(0), "float16"), cast_node("b", Entry(1), "float32")),
              (Entry(2),))
    expect(g, "'b'", "cast chain")
    assert verify_graph(g, cast_chains=True) is g
    # a cast of a multicast is no chain (gluoncv's SSD holds a multicast in float32)
    mc = Graph((X, W, multicast_node("m", (Entry(0), Entry(1))), cast_node("c", Entry(2, 1), "float16")),
               (Entry(3),))
    assert verify_graph(mc) is mc


def test_cast_to_an_unknown_dtype():
    expect(Graph((X, cast_node("c", Entry(0), "float8")), (Entry(1),)), "'c'", "'float8'")


def test_multicast_output_count_must_match_its_inputs():
    mc = multicast_node("m", (Entry(0), Entry(1)))
    assert verify_graph(Graph((X, W, mc), (Entry(2, 1),)))
    bad = mc.replace(attrs=MappingProxyType({**mc.attrs, "num_outputs": "3"}))
    expect(Graph((X, W, bad), (Entry(2),)), "'m'", "num_outputs='3'", "2 inputs")


def test_subgraphs_are_checked_too():
    body = Graph((X, X), (Entry(1),))
    outer = Node("_foreach", "loop", (Entry(0),), subgraphs=(body,))
    expect(Graph((X, outer), (Entry(1),)), "duplicate node name")
