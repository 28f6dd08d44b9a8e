"""mxnet_amp.report.precision_map (report/precision_map): the marks of the one-screen map of where a
converted model computes in which dtype, and where each goes."""
import sys
import time
from types import MappingProxyType

import mxnet as mx
import pytest

from mxnet_amp.convert import convert_graph
from mxnet_amp.ir.graph import Entry, GraphBuilder, Node
from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.options import make_options
from mxnet_amp.passes.insert_casts import CastResult
from mxnet_amp.policy_load import load_policy
from mxnet_amp.record import Conversion
from mxnet_amp.report.model import build_report
from mxnet_amp.report.op_costs import Costs
from mxnet_amp.report.picture import node_dtypes
from mxnet_amp.report.precision_map import MAP_MAX_HEIGHT, MAP_WIDTH, op_depths, precision_map


def _islands_model(target: str = "float16"):
    """data -> conv -> relu -> softmax (float32 by the shipped lists) -> conv -> relu, a
    shortcut convolution beside: a float32 island between low precision convolutions."""
    x = mx.sym.var("data")
    a = mx.sym.relu(mx.sym.Convolution(x, num_filter=8, kernel=(3, 3), pad=(1, 1), name="c1"), name="r1")
    s = mx.sym.softmax(a, axis=1, name="sm")
    b = mx.sym.Convolution(s, num_filter=8, kernel=(3, 3), pad=(1, 1), name="c2")
    side = mx.sym.Convolution(x, num_filter=8, kernel=(1, 1), name="short")
    return convert_graph(graph_from_symbol(mx.sym.relu(b + side, name="out")), make_options(target),
                         data_names=["data"])


def _ops(conv):
    return [i for i, n in enumerate(conv.graph.nodes)
            if not n.is_variable and n.op not in ("amp_cast", "amp_multicast")]


def test_depths_are_the_longest_path_of_ops_casts_adding_none():
    """c1 and the shortcut read the input (depth 0); the add waits for the longer branch
    c1 -> r1 -> sm -> c2 (depth 4); a cast sits at the depth of what it reads."""
    conv = _islands_model()
    depth = dict(zip((n.name for n in conv.graph.nodes), op_depths(conv.graph)))
    assert [depth[k] for k in ("data", "c1", "r1", "sm", "c2", "short", "out")] == [-1, 0, 1, 2, 3, 0, 5]
    g = conv.graph
    for i, node in enumerate(g.nodes):
        if node.op == "amp_cast":
            assert op_depths(g)[i] == max(op_depths(g)[e.node] for e in node.inputs)


def test_one_mark_per_op_in_its_dtype_and_column():
    """Every op node is one mark, coloured by the dtype the pass gave it, in its depth's
    column; the shares add up to the op count."""
    conv = _islands_model()
    pmap = precision_map(conv, {"data": (1, 3, 16, 16)})
    dtypes = node_dtypes(conv)
    marked = [i for m in pmap.marks for i in m.nodes]
    assert sorted(marked) == _ops(conv) and all(len(m.nodes) == 1 for m in pmap.marks)
    depth = op_depths(conv.graph)
    assert all(m.dtype == dtypes[m.nodes[0]] and m.column == depth[m.nodes[0]] for m in pmap.marks)
    assert {m.dtype for m in pmap.marks} == {"float16", "float32"}
    assert sum(n for n, _ in pmap.share.values()) == len(_ops(conv))


def test_marks_are_sized_by_estimated_flops():
    """A 3x3 convolution of 8 channels costs 2 * 8*16*16 * 3*3*8 FLOPs at a 16x16 input;
    the shortcut 1x1 over 3 channels far less; the heavier mark is taller."""
    conv = _islands_model()
    pmap = precision_map(conv, {"data": (1, 3, 16, 16)})
    by_name = {conv.graph.nodes[m.nodes[0]].name: (m, h) for m, h in zip(pmap.marks, pmap.heights())}
    assert by_name["c2"][0].cost == 2 * 8 * 16 * 16 * 3 * 3 * 8
    assert by_name["short"][0].cost == 2 * 8 * 16 * 16 * 3
    assert by_name["c2"][1] > by_name["short"][1] > 0
    assert pmap.costs.unit == "FLOPs" and "1x3x16x16" in pmap.costs.basis


def test_casts_are_marked_under_the_op_they_feed():
    """One tick per cast the conversion inserted (CastResult.inserted_casts), in the dtype
    it casts to, in the column of the first op reading it."""
    conv = _islands_model()
    pmap = precision_map(conv)
    inserted = conv.result.inserted_casts
    assert sorted(i for c in pmap.casts for i in c.nodes) == sorted(inserted) and len(inserted) >= 3
    dtypes = node_dtypes(conv)
    depth = op_depths(conv.graph)
    consumers = conv.graph.consumers()
    for c in pmap.casts:
        (i,) = c.nodes
        assert c.dtype == dtypes[i]
        readers = [depth[j] for j, _ in consumers[i] if conv.graph.nodes[j].op != "amp_cast"]
        if readers:
            assert c.column == min(readers)


def test_float32_islands_carry_the_reports_reason():
    """The softmax between float16 ops is a float32 island: its mark says so and its hover
    text holds the report's reason; float16 ops are no islands."""
    conv = _islands_model()
    pmap = precision_map(conv)
    reasons = {n.name: n.reason for n in build_report(conv).fp32_nodes}
    sm = conv.graph.index_of("sm")
    assert pmap.islands == {sm: reasons["sm"]}
    (mark,) = [m for m in pmap.marks if m.nodes == (sm,)]
    assert mark.island and reasons["sm"] in mark.title and "float32 island" in mark.title
    assert not any(m.island for m in pmap.marks if m.nodes != (sm,))


def test_without_shapes_every_op_counts_the_same():
    """A model whose input shape nobody gives nor can guess is drawn with equal marks, and
    the map says so."""
    x = mx.sym.var("data")
    sym = mx.sym.FullyConnected(mx.sym.exp(x, name="e"), num_hidden=4, name="fc")
    conv = convert_graph(graph_from_symbol(sym), make_options("bfloat16"), data_names=["data"])
    pmap = precision_map(conv)
    assert pmap.costs.unit == "op" and "no shapes" in pmap.costs.basis
    assert {m.cost for m in pmap.marks} == {1.0}


def test_a_200_op_model_fits_one_screen():
    """gluoncv's mobilenetv3_large (266 op nodes, no weights needed): one mark per op, in
    at most MAP_WIDTH x MAP_MAX_HEIGHT px, every column inside the width."""
    gluoncv = pytest.importorskip("gluoncv")
    net = gluoncv.model_zoo.get_model("mobilenetv3_large", pretrained=False)
    conv = convert_graph(graph_from_symbol(net(mx.sym.var("data"))), make_options("bfloat16"), data_names=["data"])
    pmap = precision_map(conv)
    assert len(pmap.marks) == len(_ops(conv)) >= 200
    assert MAP_WIDTH <= 1400 - 48 - 20 and pmap.rows_end() + 4 * 16 <= MAP_MAX_HEIGHT <= 900 - 120
    right = max(x + w for x, _, w in (pmap.where(m.column) for m in pmap.marks))
    assert right <= MAP_WIDTH and min(h for h in pmap.heights()) >= 2
    assert pmap.islands and pmap.casts


def _chain(n: int) -> Conversion:
    """A hand-made conversion of ``n`` op nodes in a chain: relu in bfloat16, every 100th an
    exp kept float32 between two casts (built directly: the cast pass takes seconds)."""
    b = GraphBuilder()
    x = b.add(Node("null", "data"))
    dtypes, casts = {}, {}
    for k in range(n):
        if k % 100 == 50:
            x = b.add(Node("amp_cast", f"c{k}a", (Entry(x),), MappingProxyType({"dtype": "float32"})))
            casts[x] = "cast"
            x = b.add(Node("exp", f"e{k}", (Entry(x),)))
            dtypes[f"e{k}"] = "float32"
            x = b.add(Node("amp_cast", f"c{k}b", (Entry(x),), MappingProxyType({"dtype": "bfloat16"})))
            casts[x] = "cast"
        else:
            x = b.add(Node("relu", f"r{k}", (Entry(x),)))
            dtypes[f"r{k}"] = "bfloat16"
    g = b.build([Entry(x)])
    tensors = {Entry(i): ("float32" if g.nodes[i].attrs.get("dtype") == "float32" else "bfloat16") for i in casts}
    result = CastResult(graph=g, node_dtypes=dtypes, decisions={}, param_wants={}, tensor_dtypes=tensors,
                        inserted_casts=casts)
    return Conversion(graph=g, original=g, result=result, policy=load_policy("bfloat16"), data_names=("data",),
                      params={}, input_dtypes={"data": "float32"})


def test_a_100k_node_graph_is_binned_without_recursion():
    """100,000 op nodes: depths binned into at most four rows of columns, a crowded column
    drawn as one mark per dtype; every op counted once; quick, and no recursion (a low
    recursion limit holds)."""
    conv = _chain(100_000)
    costs = Costs(tuple(None if n.is_variable or n.op == "amp_cast" else 1.0 for n in conv.graph.nodes), "op", "")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(300)
    try:
        start = time.perf_counter()
        pmap = precision_map(conv, costs=costs)
        took = time.perf_counter() - start
    finally:
        sys.setrecursionlimit(limit)
    assert pmap.depths == 100_000 and pmap.depths_per_column > 1 and pmap.rows <= 4
    assert len(pmap.marks) < 3000 and sum(len(m.nodes) for m in pmap.marks) == 100_000
    assert sum(len(c.nodes) for c in pmap.casts) == 2000 and len(pmap.casts) < 2000
    assert len(pmap.islands) == 1000 and any(m.island and len(m.nodes) > 1 for m in pmap.marks)
    assert took < 30, took
