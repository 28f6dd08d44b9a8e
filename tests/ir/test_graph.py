"""mxnet_amp.ir.graph: the immutable Graph, its builder and the node constructors."""
from types import MappingProxyType

import pytest

from mxnet_amp.ir.graph import (Entry, Graph, GraphBuilder, Node, attr_ints, cast_node, graph_obj,
                                multicast_node, node_alone_obj)


def _chain() -> Graph:
    """data -> fc(data, w) -> relu; the relu is the head, fc's output read twice."""
    b = GraphBuilder()
    data = b.add(Node("null", "data", ()))
    w = b.add(Node("null", "w", ()))
    fc = b.add(Node("FullyConnected", "fc", (Entry(data), Entry(w)), MappingProxyType({"num_hidden": "4"})))
    relu = b.add(Node("relu", "relu", (Entry(fc),)))
    add = b.add(Node("elemwise_add", "add", (Entry(fc), Entry(relu))))
    return b.build([Entry(add)])


def test_consumers_list_each_reader_with_its_input_position():
    """consumers() maps every node to the (consumer, input position) pairs that read it."""
    g = _chain()
    users = g.consumers()
    assert users[g.index_of("fc")] == [(3, 0), (4, 0)]
    assert users[g.index_of("relu")] == [(4, 1)]
    assert users[g.index_of("add")] == []


def test_num_used_outputs_counts_the_highest_index_read_by_consumers_or_heads():
    """A node whose second output is a head uses two outputs; others use one."""
    b = GraphBuilder()
    x = b.add(Node("null", "x", ()))
    split = b.add(Node("SliceChannel", "split", (Entry(x),), MappingProxyType({"num_outputs": "3"})))
    g = b.build([Entry(split, 0), Entry(split, 1)])
    assert g.num_used_outputs() == [1, 2]


def test_ops_and_variables_and_index_of():
    """ops() lists op names (not variables), variables() the inputs in order, and
    index_of raises KeyError for a name the graph lacks."""
    g = _chain()
    assert g.ops() == {"FullyConnected", "relu", "elemwise_add"}
    assert [n.name for n in g.variables()] == ["data", "w"]
    with pytest.raises(KeyError):
        g.index_of("missing")


def test_builder_fresh_name_skips_names_already_taken():
    """fresh_name returns the base, then base_1, base_2 ... once those are in the graph."""
    b = GraphBuilder()
    assert b.fresh_name("cast") == "cast"
    b.add(Node("null", "cast", ()))
    assert b.fresh_name("cast") == "cast_1"
    b.add(Node("null", "cast_1", ()))
    assert b.fresh_name("cast") == "cast_2"


def test_attr_ints_reads_the_integers_of_an_attribute():
    """attr_ints parses '(3, 3)' and negative values; None gives ()."""
    assert attr_ints("(3, 3)") == (3, 3)
    assert attr_ints("(-1, 0, 2)") == (-1, 0, 2)
    assert attr_ints(None) == ()


def test_cast_and_multicast_nodes_carry_the_attributes_mxnet_reads():
    """cast_node sets dtype; multicast_node one output per input, never narrowing."""
    c = cast_node("c", Entry(0), "float16")
    assert (c.op, c.inputs, dict(c.attrs)) == ("amp_cast", (Entry(0),), {"dtype": "float16"})
    m = multicast_node("m", (Entry(0), Entry(1)))
    assert m.op == "amp_multicast"
    assert dict(m.attrs) == {"num_outputs": "2", "cast_narrow": "False"}


def test_graph_obj_is_the_json_object_mxnet_reads():
    """graph_obj lists arg_nodes (the variables) and heads as [node, index, version] lists,
    and adds MXNet's version attribute when the graph has none."""
    obj = graph_obj(_chain())
    assert obj["arg_nodes"] == [0, 1]
    assert obj["heads"] == [[4, 0, 0]]
    assert obj["attrs"] == {"mxnet_version": ["int", 10901]}
    assert obj["nodes"][2]["attrs"] == {"num_hidden": "4"}
    assert "attrs" not in obj["nodes"][0]


def test_node_alone_obj_feeds_the_node_from_fresh_variables():
    """node_alone_obj is the node called 'probe' reading in0, in1 ..., its first outputs heads."""
    node = Node("elemwise_add", "add", (Entry(5), Entry(7)))
    obj = node_alone_obj(node, inputs=2, outputs=1)
    assert [n["name"] for n in obj["nodes"]] == ["in0", "in1", "probe"]
    assert obj["nodes"][2]["inputs"] == [[0, 0, 0], [1, 0, 0]]
    assert obj["heads"] == [[2, 0, 0]]


def test_walk_visits_the_graph_then_each_body_breadth_first():
    """walk() yields every node of the graph in order, then the nodes of its bodies (a body
    nested in a body last), and ops() is read from it, variables left out."""
    inner = Graph((Node("null", "x"), Node("exp", "inner_exp", (Entry(0),))), (Entry(1),))
    body_a = Graph((Node("null", "a"), Node("_foreach", "nested", (Entry(0),), subgraphs=(inner,))),
                   (Entry(1),))
    body_b = Graph((Node("null", "b"), Node("sin", "b_sin", (Entry(0),))), (Entry(1),))
    top = Graph((Node("null", "data"),
                 Node("_foreach", "loop1", (Entry(0),), subgraphs=(body_a,)),
                 Node("_cond", "cond1", (Entry(1),), subgraphs=(body_b,))), (Entry(2),))
    assert [n.name for n in top.walk()] == ["data", "loop1", "cond1", "a", "nested", "b", "b_sin",
                                            "x", "inner_exp"]
    assert top.ops() == {"_foreach", "_cond", "sin", "exp"}
