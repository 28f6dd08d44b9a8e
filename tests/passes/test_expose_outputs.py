"""mxnet_amp.passes.expose_outputs: every used op output made a graph output."""
import mxnet as mx

from mxnet_amp.graph import Entry
from mxnet_amp.io import graph_from_symbol
from mxnet_amp.passes.expose_outputs import expose_outputs
from mxnet_amp.verify import verify_graph


def test_every_op_output_becomes_a_head_in_graph_order():
    """data -> fc -> relu: the heads are fc and relu (variables are not exposed)."""
    g = graph_from_symbol(mx.sym.relu(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc"),
                                      name="r"))
    exposed, keys = expose_outputs(g)
    verify_graph(exposed)
    assert [g.nodes[i].name for i, _ in keys] == ["fc", "r"]
    assert exposed.heads == (Entry(keys[0][0], 0), Entry(keys[1][0], 0))
    assert exposed.nodes == g.nodes


def test_each_used_output_of_a_multi_output_op_is_exposed():
    """A split whose two outputs are read exposes both (key (node, 0) and (node, 1))."""
    parts = mx.sym.split(mx.sym.var("data"), num_outputs=2, name="split")
    g = graph_from_symbol(mx.sym.elemwise_add(parts[0], parts[1], name="add"))
    _, keys = expose_outputs(g)
    split = g.index_of("split")
    assert (split, 0) in keys and (split, 1) in keys


def test_a_graph_of_one_op_keeps_its_heads():
    """The one op already is the only head: the exposed heads are the same."""
    g = graph_from_symbol(mx.sym.relu(mx.sym.var("data"), name="r"))
    exposed, keys = expose_outputs(g)
    assert exposed.heads == g.heads and keys == [(1, 0)]
