"""mxnet_amp.report.op_costs (report/op_costs): each op's estimated FLOPs from MXNet's shape
inference, the precision map's sizes."""
from types import MappingProxyType

import mxnet as mx

from mxnet_amp.convert import convert_graph
from mxnet_amp.ir.graph import Node
from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.options import make_options
from mxnet_amp.report.op_costs import ASSUMED_DIM, op_costs, node_flops


def _costs_by_name(conv, costs):
    return {n.name: c for n, c in zip(conv.graph.nodes, costs.values)}


def test_node_flops_per_kind_of_op():
    """Two FLOPs per multiply-accumulate for convolutions, dense layers and matrix
    products; one per element read or written for the rest; None without the shapes."""
    conv = Node("Convolution", "c", attrs=MappingProxyType({"kernel": "(3, 3)"}))
    assert node_flops(conv, (1, 16, 8, 8), [(1, 4, 10, 10), (16, 4, 3, 3)]) == 2 * 16 * 64 * 36
    fc = Node("FullyConnected", "f")
    assert node_flops(fc, (2, 10), [(2, 30), (10, 30)]) == 2 * 20 * 30
    bdot = Node("batch_dot", "b", attrs=MappingProxyType({"transpose_a": "True"}))
    assert node_flops(bdot, (4, 5, 6), [(4, 7, 5), (4, 7, 6)]) == 2 * 120 * 7
    qk = Node("_contrib_interleaved_matmul_selfatt_qk", "qk", attrs=MappingProxyType({"heads": "2"}))
    assert node_flops(qk, (6, 5, 5), [(5, 3, 2 * 3 * 4)]) == 2 * 150 * 4   # seq 5, batch 3, 2 heads of 4
    valatt = Node("_contrib_interleaved_matmul_selfatt_valatt", "va", attrs=MappingProxyType({"heads": "2"}))
    assert node_flops(valatt, (5, 3, 8), [(5, 3, 24), (6, 5, 5)]) == 2 * 120 * 5
    add = Node("broadcast_add", "a")
    assert node_flops(add, (2, 3), [(2, 3), (1, 3)]) == 6
    pool = Node("Pooling", "p")
    assert node_flops(pool, (1, 3, 1, 1), [(1, 3, 8, 8)]) == 192
    assert node_flops(fc, None, [(2, 30), (10, 30)]) is None
    assert node_flops(fc, (0, 10), [(0, 30), (10, 30)]) is None


def _cnn():
    x = mx.sym.var("data")
    h = mx.sym.relu(mx.sym.Convolution(x, num_filter=8, kernel=(3, 3), pad=(1, 1), name="c1"), name="r1")
    h = mx.sym.FullyConnected(h, num_hidden=5, name="fc")
    return convert_graph(graph_from_symbol(h), make_options("bfloat16"), data_names=["data"])


def test_costs_at_the_given_input_shape():
    conv = _cnn()
    costs = op_costs(conv, {"data": (2, 3, 10, 10)})
    by = _costs_by_name(conv, costs)
    assert by["c1"] == 2 * (2 * 8 * 100) * 27 and by["r1"] == 2 * 8 * 100
    assert by["fc"] == 2 * (2 * 5) * 800
    assert by["data"] is None and all(by[conv.graph.nodes[i].name] is None for i in conv.result.inserted_casts)
    assert costs.unit == "FLOPs" and "data 2x3x10x10" in costs.basis and "assumed" not in costs.basis


def test_an_image_input_read_by_a_convolution_is_assumed():
    """No shape given, the weight's shape unknown: a convolution reading the input (through
    its cast) makes it an RGB image, batch 1, ASSUMED_DIM a side, and the basis says so."""
    conv = _cnn()
    costs = op_costs(conv)
    side = ASSUMED_DIM * ASSUMED_DIM
    assert _costs_by_name(conv, costs)["c1"] == 2 * 8 * side * 27
    assert f"data 1x3x{ASSUMED_DIM}x{ASSUMED_DIM} (assumed)" in costs.basis


def test_unknown_shapes_give_equal_costs():
    """Token ids read by an Embedding: nothing proves their shape, so every op costs one."""
    x = mx.sym.var("data")
    h = mx.sym.Embedding(x, input_dim=10, output_dim=4, name="emb")
    conv = convert_graph(graph_from_symbol(mx.sym.FullyConnected(h, num_hidden=3, name="fc")),
                         make_options("float16"), data_names=["data"])
    costs = op_costs(conv)
    assert costs.unit == "op" and "no shapes" in costs.basis
    assert [c for c in costs.values if c is not None] == [1.0, 1.0]
    given = op_costs(conv, {"data": (2, 7)})
    assert given.unit == "FLOPs" and _costs_by_name(conv, given)["fc"] == 2 * (2 * 3) * 28


def test_shapes_mxnet_refuses_give_equal_costs_and_say_so():
    """An input shape contradicting a weight's: MXNet's inference fails, every op costs one."""
    w = mx.sym.var("w", shape=(3, 4))
    sym = mx.sym.FullyConnected(mx.sym.var("data"), w, num_hidden=3, no_bias=True, name="fc")
    conv = convert_graph(graph_from_symbol(sym), make_options("float16"), data_names=["data"])
    costs = op_costs(conv, {"data": (2, 7)})
    assert costs.unit == "op" and "shape inference failed at input data 2x7" in costs.basis
    assert op_costs(conv, {"data": (2, 4)}).unit == "FLOPs"
