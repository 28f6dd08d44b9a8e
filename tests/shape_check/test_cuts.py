"""mxnet_amp.shape_check.cuts (shape_check/cuts): cuts that let shape inference go past a node."""
import mxnet as mx

from mxnet_amp.ir.verify import verify_graph
from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.shape_check.cuts import cut_past, graph_with_cuts
from mxnet_amp.shape_check.guess import unknown_dim


def _pool_fc():
    """data -> conv -> 2x2 pool -> fc(3) (flattening)."""
    x = mx.sym.var("data")
    c = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), name="conv")
    p = mx.sym.Pooling(c, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    return mx.sym.FullyConnected(p, num_hidden=3, name="fc")


def test_cut_past_a_fully_connected_feeds_it_a_new_input_of_its_weights_size():
    """The flattening FC reads a new variable of shape (?, in_units); what it read becomes an output."""
    g = graph_from_symbol(_pool_fc())
    cut, shapes = cut_past(g, "fc", {"fc_weight": (3, 36)}, {})
    verify_graph(cut)
    assert shapes == {"fc__shape_check_cut": (unknown_dim(), 36)}
    fc = cut.nodes[cut.index_of("fc")]
    assert cut.nodes[fc.inputs[0].node].name == "fc__shape_check_cut"
    assert len(cut.heads) == len(g.heads) + 1


def test_cut_past_a_pooling_makes_it_an_input_with_batch_and_channels():
    """A pooling whose input size is unknown becomes an input (batch, channels, ?, ?)."""
    g = graph_from_symbol(_pool_fc())
    u = unknown_dim()
    cut, shapes = cut_past(g, "pool", {}, {"data": (2, 3, u, u)})
    verify_graph(cut)
    assert cut.nodes[cut.index_of("pool__shape_check_cut")].is_variable
    assert shapes == {"pool__shape_check_cut": (2, 4, u, u)}


def test_cut_past_an_unknown_name_or_a_variable_is_none():
    """Nothing to cut: a name the graph lacks, or a variable."""
    g = graph_from_symbol(_pool_fc())
    assert cut_past(g, "missing", {}, {}) is None
    assert cut_past(g, "data", {}, {}) is None


def test_graph_with_cuts_reads_windowed_pools_as_copies():
    """With pools=True no windowed Pooling is left; the graph still verifies."""
    g = graph_from_symbol(_pool_fc())
    cut, _ = graph_with_cuts(g, {"fc_weight": (3, 36)})
    verify_graph(cut)
    assert "Pooling" not in {n.op for n in cut.nodes}
