"""Which nodes are the conversion's casts, and what each reads, come from the conversion's
record (``CastResult.inserted_casts``) and the graph's edges, never from node names: a cast
named against the convention (a fusion barrier is ``<conv>_fusion_barrier``, not
``..._amp_cast_...``) is drawn, grouped and counted as any other."""
from dataclasses import replace

import mxnet as mx

from mxnet_amp.convert import convert_graph
from mxnet_amp.ir.graph import CAST_OPS, Graph
from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.options import make_options
from mxnet_amp.report.model import build_report
from mxnet_amp.report.picture import collapse


def _renamed_casts(conv):
    """``conv`` with every inserted cast renamed ``q<index>`` (found without the record: the
    cast nodes whose names the original lacks), so no name says what a cast reads."""
    names = {n.name for n in conv.original.nodes}
    nodes = [n.replace(name=f"q{i}") if n.op in CAST_OPS and n.name not in names else n
             for i, n in enumerate(conv.graph.nodes)]
    graph = Graph(tuple(nodes), conv.graph.heads, conv.graph.attrs)
    return replace(conv, graph=graph, result=replace(conv.result, graph=graph))


def test_fusion_barriers_are_recorded_drawn_and_counted_as_casts():
    """A bfloat16 conversion puts a fusion barrier (an identity amp_cast named
    '<conv>_fusion_barrier') between a shared convolution output and its fusable readers."""
    data = mx.sym.var("data")
    c = mx.sym.Convolution(data, kernel=(3, 3), num_filter=4, name="conv")
    sym = mx.sym.Activation(c, act_type="relu", name="relu") + c
    conv = convert_graph(graph_from_symbol(sym), make_options("bfloat16"), data_names=["data"])
    graph, record = conv.graph, conv.result.inserted_casts
    barriers = [i for i, kind in record.items() if kind == "fusion barrier"]
    assert [graph.nodes[i].name for i in barriers] == ["conv_fusion_barrier"]
    assert graph.nodes[graph.nodes[barriers[0]].inputs[0].node].name == "conv"   # what it reads
    # the record holds every cast node of the graph (this model has none of its own)
    assert sorted(record) == [i for i, n in enumerate(graph.nodes) if n.op in CAST_OPS]
    picture = collapse(conv, detail_limit=None)
    assert {b.nodes[0] for b in picture.boxes if b.kind == "cast"} == set(record)
    assert f"{len(record)} casts inserted" in picture.title
    report = build_report(_renamed_casts(conv))
    assert report.casts == len(record) - conv.result.multicasts
    assert report.multicasts == conv.result.multicasts
    assert report.fusion_barriers == ("conv",)


def test_a_models_own_multicast_is_not_counted_as_inserted():
    """gluoncv's SSD box decoder holds an amp_multicast in its float32 graph: the report
    and the picture count the casts the conversion put in, not that one."""
    x, y = mx.sym.var("data"), mx.sym.var("y")
    a, b = mx.sym.amp_multicast(x, y, num_outputs=2, name="own_multicast")
    sym = mx.sym.FullyConnected(a + b, num_hidden=4, name="fc")
    conv = convert_graph(graph_from_symbol(sym), make_options("float16"), data_names=["data", "y"])
    own = conv.graph.index_of("own_multicast")
    assert own not in conv.result.inserted_casts
    report = build_report(conv)
    assert report.multicasts == conv.result.multicasts == 0
    assert report.casts == conv.result.casts == len(conv.result.inserted_casts) > 0
    assert f"{len(conv.result.inserted_casts)} casts inserted" in collapse(conv).title
