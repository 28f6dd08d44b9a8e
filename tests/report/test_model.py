"""The conversion report and the picture: numbers checked against independent counts."""
import json
import re
import xml.etree.ElementTree as ET
from collections import Counter

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.convert import convert_graph, convert_model_full
from mxnet_amp.errors import DrawError
from mxnet_amp.mx.io import graph_from_symbol, symbol_json
from mxnet_amp.options import OpLists, make_options
from mxnet_amp.report.draw import DTYPE_COLOURS, graph_dot, graph_svg, write_graph
from mxnet_amp.report.model import NON_FLOAT, ConversionReport, build_report
from mxnet_amp.report.pages import format_table, report_html
from mxnet_amp.report.picture import collapse, node_dtypes

from helpers import small_model


def mxnet_node_dtypes(sym, data_dtype="float32"):
    """name -> dtype of each op node's first output, from MXNet's own type inference."""
    internals = sym.get_internals()
    _, out_types, _ = internals.infer_type(data=data_dtype)
    names = internals.list_outputs()
    out = {}
    for name, t in zip(names, out_types):
        if name.endswith("_output"):
            out.setdefault(name[: -len("_output")], np.dtype(t))
    return out


def _dtype_str(t):
    from mxnet_amp.ir.dtypes import dtype_name
    return dtype_name(t)


@pytest.fixture(scope="module")
def converted():
    sym, args, auxs = small_model()
    new_sym, new_args, new_aux, conv = convert_model_full(
        sym, args, auxs, make_options("float16", OpLists(excluded_sym_names=["conv2"]), cast_optional_params=True, fold_batchnorm=False))
    return sym, args, auxs, new_sym, new_args, new_aux, conv


def test_node_counts_match_mxnet_type_inference(converted):
    sym, args, auxs, new_sym, new_args, new_aux, conv = converted
    report = build_report(conv, args, auxs, new_args, new_aux)
    # MXNet's inference on the converted symbol, fed the param dtypes actually stored
    internals = new_sym.get_internals()
    type_args = {k: v.dtype for k, v in new_args.items()}
    _, out_types, _ = internals.infer_type(data="float32", **type_args)
    by_name = {}
    for name, t in zip(internals.list_outputs(), out_types):
        if name.endswith("_output"):
            by_name.setdefault(name[: -len("_output")], _dtype_str(t))
    expected_by_op = {}
    for node in json.loads(symbol_json(sym))["nodes"]:
        if node["op"] == "null":
            continue
        dt = by_name[node["name"]]
        expected_by_op.setdefault(node["op"], Counter())[dt] += 1
    assert report.nodes_by_op == {op: dict(c) for op, c in expected_by_op.items()}
    assert report.total_nodes == sum(sum(c.values()) for c in expected_by_op.values()) == 9
    assert report.nodes_by_dtype["float16"] >= 3    # conv1, bn1/relu1, fc at least
    assert report.nodes_by_op["Convolution"] == {"float16": 1, "float32": 1}


def test_casts_and_params_match_the_written_graph(converted):
    sym, args, auxs, new_sym, new_args, new_aux, conv = converted
    report = build_report(conv, args, auxs, new_args, new_aux)
    nodes = json.loads(symbol_json(new_sym))["nodes"]
    casts = Counter(n["attrs"]["dtype"] for n in nodes if n["op"] == "amp_cast")
    assert report.casts == sum(casts.values()) > 0
    assert report.casts_by_dtype == dict(casts)
    assert report.multicasts == sum(1 for n in nodes if n["op"] == "amp_multicast") == 1

    def nbytes(d):
        return sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in d.values())
    assert report.params_before.bytes == nbytes(args) + nbytes(auxs)
    assert report.params_after.bytes == nbytes(new_args) + nbytes(new_aux)
    # cast_optional_params stored conv1/fc weights in float16: fewer bytes after
    assert report.params_after.bytes < report.params_before.bytes
    assert report.params_after.by_dtype["float16"]["count"] == sum(
        1 for v in new_args.values() if v.dtype == np.float16)


def test_fp32_nodes_have_reasons(converted):
    sym, args, auxs, new_sym, new_args, new_aux, conv = converted
    report = build_report(conv, args, auxs, new_args, new_aux)
    reasons = {n.name: n.reason for n in report.fp32_nodes}
    assert reasons["conv2"].startswith("excluded by name")
    assert reasons["prob"].startswith("fp32 list: softmax")
    assert "add" in reasons and "widest" in reasons["add"]
    assert report.excluded == ("conv2",)
    # float32 nodes listed are exactly those the counts call float32
    assert len(report.fp32_nodes) == report.nodes_by_dtype["float32"]
    # the reason is the one the cast pass was given, as it is
    assert reasons["conv2"] == conv.fp32_nodes["conv2"] == conv.result.decisions["conv2"].reason


def test_json_and_table(converted):
    sym, args, auxs, new_sym, new_args, new_aux, conv = converted
    report = build_report(conv, args, auxs, new_args, new_aux, model="small")
    assert isinstance(report, ConversionReport)
    data = json.loads(report.to_json())
    assert data == report.to_dict()
    assert data["casts"] == report.casts and data["target_dtype"] == "float16"
    assert data["params_after"]["bytes"] == report.params_after.bytes
    table = format_table(report)
    assert "mxnet-amp conversion to float16: small" in table
    row = next(line for line in table.splitlines() if line.strip().startswith("Convolution"))
    assert row.split()[1:] == ["1", "1", "2"]     # float16, float32, total
    assert f"{report.casts} amp_cast" in table and "excluded by name" in table
    with pytest.raises(Exception):
        report.casts = 0        # frozen


@pytest.mark.filterwarnings("ignore:type inference leaves")
def test_report_without_params_counts_dtypes_only():
    sym, args, auxs = small_model()
    conv = convert_graph(graph_from_symbol(sym), make_options("bfloat16"), data_names=["data"])
    report = build_report(conv)
    assert report.params_before.bytes is None
    assert report.params_before.count == len(args) + len(auxs)
    assert report.target_dtype == "bfloat16"
    assert report.nodes_by_dtype.get(NON_FLOAT, 0) == 0


def test_html_is_self_contained(converted):
    sym, args, auxs, new_sym, new_args, new_aux, conv = converted
    report = build_report(conv, args, auxs, new_args, new_aux, model="small")
    page = report_html(report, graph_svg(conv, "small"))
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "</html>" in page
    assert "<table>" in page and "Convolution" in page
    # no external assets: no scripts, stylesheets or images fetched from anywhere
    assert not re.search(r"<(script|link|img)\b", page)
    assert not re.search(r"(src|href)\s*=\s*[\"']?https?:", page)


def test_small_graph_drawn_node_by_node(converted):
    conv = converted[-1]
    pic = collapse(conv)
    assert not pic.collapsed
    graph = conv.graph
    drawn = [n for n in graph.nodes if not n.is_variable or n.name in conv.data_names]
    assert len(pic.boxes) == len(drawn)
    dtypes = node_dtypes(conv)
    by_name = {graph.nodes[b.nodes[0]].name: b for b in pic.boxes}
    assert by_name["conv1"].dtype == "float16" and by_name["conv2"].dtype == "float32"
    assert by_name["prob"].dtype == "float32"
    svg = graph_svg(conv)
    root = ET.fromstring(svg)      # well-formed XML
    assert root.tag.endswith("svg")
    fills = re.findall(r'fill="(#[0-9a-f]{6})"', svg)
    assert DTYPE_COLOURS["float16"][0] in fills and DTYPE_COLOURS["float32"][0] in fills
    # each edge of the drawing is an edge of the converted graph
    for u, v, dt in pic.edges:
        src, dst = pic.boxes[u].nodes[0], pic.boxes[v].nodes[0]
        assert any(e.node == src for e in graph.nodes[dst].inputs)
        assert dt == dtypes[src]


@pytest.fixture(scope="module")
def resnet18():
    from mxnet.gluon.model_zoo import vision
    net = vision.resnet18_v1(pretrained=False)
    graph = graph_from_symbol(net(mx.sym.var("data")))
    # gluon numbers its prefixes per process (resnetv10_, resnetv11_…): find the dense layer
    dense = next(n.name for n in graph.nodes if n.op == "FullyConnected")
    # weights cast in the graph (as mx.contrib.amp's default): the picture shows those casts
    return convert_graph(graph, make_options("bfloat16", OpLists(excluded_sym_names=[dense]), cast_optional_params=False),
                         data_names=["data"])


def test_resnet_collapses_into_blocks(resnet18):
    conv = resnet18
    pic = collapse(conv, max_boxes=48)
    assert pic.collapsed and 4 <= len(pic.boxes) <= 48
    graph = conv.graph
    drawn = [i for i, n in enumerate(graph.nodes) if not n.is_variable or n.name in conv.data_names]
    # the boxes stand for every drawn node exactly once (repeated blocks counted n times)
    assert sum(len(b.nodes) * b.repeat for b in pic.boxes) == len(drawn)
    assert any(b.repeat > 1 for b in pic.boxes)        # identical residual blocks folded
    report = build_report(conv)
    totals = Counter()
    for b in pic.boxes:
        for dt, n in b.dtypes.items():
            totals[dt] += n * b.repeat
    assert dict(totals) == dict(report.nodes_by_dtype)
    assert "float32" in totals and "bfloat16" in totals     # the excluded dense layer shows
    # a chain of boxes in graph order
    assert all(u < v for u, v, _ in pic.edges)
    svg = graph_svg(conv, "resnet18_v1")
    ET.fromstring(svg)
    assert "× 2" in svg        # stage1's two identical blocks


def test_write_graph_formats(tmp_path, resnet18):
    svg = tmp_path / "g.svg"
    assert write_graph(resnet18, svg) == "svg"
    ET.parse(svg)
    dot = tmp_path / "g.dot"
    write_graph(resnet18, dot)
    text = dot.read_text()
    assert text.startswith("digraph") and text.rstrip().endswith("}")
    pic = collapse(resnet18)
    assert len(re.findall(r"^  b\d+ \[label", text, re.M)) == len(pic.boxes)
    assert len(re.findall(r"^  b\d+ -> b\d+", text, re.M)) == len(pic.edges)
    with pytest.raises(DrawError, match=r"\.svg, \.png"):
        write_graph(resnet18, tmp_path / "g.jpg")
    assert not (tmp_path / "g.jpg").exists()
    png = tmp_path / "g.png"
    try:
        write_graph(resnet18, png)
    except DrawError as err:
        assert "cairosvg" in str(err) and "dot" in str(err)
        assert not png.exists()
    else:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_dot_text_matches_svg_boxes(converted):
    conv = converted[-1]
    text = graph_dot(conv)
    assert text.count("fillcolor") == len(collapse(conv).boxes)
    assert DTYPE_COLOURS["float16"][0] in text


def test_png_without_a_renderer_is_a_clear_error(tmp_path, monkeypatch, converted):
    import mxnet_amp.report.draw as draw
    monkeypatch.setattr(draw, "_cairosvg", lambda: None)
    monkeypatch.setattr(draw.shutil, "which", lambda name: None)
    with pytest.raises(DrawError, match="cairosvg.*dot"):
        write_graph(converted[-1], tmp_path / "g.png")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.filterwarnings("ignore:type inference leaves")
def test_weight_casts_counted(converted):
    sym, args, auxs, new_sym, new_args, new_aux, conv = converted
    plain = convert_model_full(sym, args, auxs, make_options("float16", cast_optional_params=False))
    report = build_report(plain[3], args, auxs, plain[1], plain[2])
    nodes = json.loads(symbol_json(plain[0]))["nodes"]
    expected = sum(1 for n in nodes if n["op"] == "amp_cast"
                   and nodes[n["inputs"][0][0]]["op"] == "null"
                   and nodes[n["inputs"][0][0]]["name"] in args)
    assert report.weight_casts == expected > 0
    assert f"{expected} of the amp_casts convert weights" in format_table(report)
    # storing the weights converted removes those casts (conv2 is excluded, so its stay)
    optional = build_report(conv, args, auxs, new_args, new_aux)
    assert optional.weight_casts < report.weight_casts
