"""mxnet_amp.passes.fold_param_casts: an emulation's weight roundings done ahead of time."""
import mxnet as mx

from mxnet_amp.graph import Entry, Graph, GraphBuilder, Node, cast_node
from mxnet_amp.passes.fold_param_casts import fold_param_casts, prune
from mxnet_amp.verify import verify_graph


def _round_trip_graph() -> Graph:
    """w -> amp_cast bf16 -> amp_cast f32 -> fc(data, .)  (the emulation's weight rounding)."""
    b = GraphBuilder()
    data = b.add(Node("null", "data", ()))
    w = b.add(Node("null", "w", ()))
    low = b.add(cast_node("w_low", Entry(w), "bfloat16"))
    back = b.add(cast_node("w_back", Entry(low), "float32"))
    fc = b.add(Node("FullyConnected", "fc", (Entry(data), Entry(back)),
                    {"num_hidden": "2", "no_bias": "True"}))
    return b.build([Entry(fc)])


def test_a_weight_round_trip_becomes_one_variable_to_hold_the_rounded_weight():
    """The two casts go; fc reads a new float32 variable named after the outer cast, which
    is to hold w rounded to bfloat16."""
    folded, sources = fold_param_casts(_round_trip_graph(), {"w": mx.nd.ones((2, 3))})
    verify_graph(folded)
    assert sources == {"w_back": ("w", "bfloat16")}
    fc = folded.nodes[folded.index_of("fc")]
    assert folded.nodes[fc.inputs[1].node].name == "w_back"
    assert folded.nodes[fc.inputs[1].node].is_variable
    assert {"w_low", "w"} .isdisjoint(n.name for n in folded.nodes)


def test_a_cast_of_something_not_a_param_is_kept():
    """When w is not in params (a model input) its round trip stays in the graph."""
    folded, sources = fold_param_casts(_round_trip_graph(), {})
    assert sources == {}
    assert {"w_low", "w_back"} <= {n.name for n in folded.nodes}


def test_prune_drops_what_no_head_depends_on():
    """A relu nothing reads is removed; a graph with nothing to prune is returned as is."""
    b = GraphBuilder()
    x = b.add(Node("null", "x", ()))
    b.add(Node("relu", "unused", (Entry(x),)))
    keep = b.add(Node("sigmoid", "kept", (Entry(x),)))
    g = b.build([Entry(keep)])
    pruned = prune(g)
    assert [n.name for n in pruned.nodes] == ["x", "kept"]
    assert prune(pruned) is pruned
