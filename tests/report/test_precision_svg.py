"""mxnet_amp.report.precision_svg (report/precision_svg): the precision map as SVG, read back: one
mark per op coloured by its dtype, casts and float32 islands marked with their hover text,
within one screen; the map above the graph in the SVG file and at the top of the HTML page."""
import xml.etree.ElementTree as ET

import mxnet as mx

from mxnet_amp.convert import convert_graph
from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.options import make_options
from mxnet_amp.report.draw import graph_svg, write_graph
from mxnet_amp.report.layout import DTYPE_COLOURS
from mxnet_amp.report.model import build_report
from mxnet_amp.report.pages import report_html
from mxnet_amp.report.picture import node_dtypes
from mxnet_amp.report.precision_map import MAP_MAX_HEIGHT, MAP_WIDTH
from mxnet_amp.report.precision_svg import precision_map_svg, stacked_svg

SVG = "{http://www.w3.org/2000/svg}"


def _conversion(target: str = "float16"):
    """data -> conv -> relu -> softmax (float32 by the shipped lists) -> conv -> relu."""
    x = mx.sym.var("data")
    h = mx.sym.relu(mx.sym.Convolution(x, num_filter=8, kernel=(3, 3), pad=(1, 1), name="c1"), name="r1")
    h = mx.sym.softmax(h, axis=1, name="sm")
    h = mx.sym.relu(mx.sym.Convolution(h, num_filter=8, kernel=(3, 3), pad=(1, 1), name="c2"), name="r2")
    return convert_graph(graph_from_symbol(h), make_options(target), data_names=["data"])


def _marked(root, attr):
    """(element, its <g>'s title) for every element carrying ``attr``."""
    out = []
    for g in root.iter(f"{SVG}g"):
        title = g.find(f"{SVG}title")
        for el in g:
            if attr in el.attrib:
                out.append((el, title.text if title is not None else ""))
    return out


def test_one_rect_per_op_filled_with_its_dtype_colour():
    conv = _conversion()
    root = ET.fromstring(precision_map_svg(conv, "tiny"))
    dtypes = node_dtypes(conv)
    ops = [i for i, n in enumerate(conv.graph.nodes) if not n.is_variable and n.op != "amp_cast"]
    marks = _marked(root, "data-node")
    assert sorted(int(el.get("data-node")) for el, _ in marks) == ops
    for el, title in marks:
        i = int(el.get("data-node"))
        assert el.get("data-dtype") == dtypes[i] and el.get("fill") == DTYPE_COLOURS[dtypes[i]][1]
        assert title.startswith(f"{conv.graph.nodes[i].name} ({conv.graph.nodes[i].op}): {dtypes[i]}")


def test_casts_and_islands_are_marked_with_their_reasons():
    """A tick per inserted cast; the softmax's mark outlined, a flag above its column, and
    both hover texts give the report's reason."""
    conv = _conversion()
    root = ET.fromstring(precision_map_svg(conv))
    casts = _marked(root, "data-cast")
    assert sorted(int(el.get("data-cast")) for el, _ in casts) == sorted(conv.result.inserted_casts)
    assert all("→" in title for _, title in casts)
    sm = conv.graph.index_of("sm")
    reason = {n.name: n.reason for n in build_report(conv).fp32_nodes}["sm"]
    (flag, flag_title), = _marked(root, "data-island")
    assert flag.get("data-island") == str(sm) and reason in flag_title
    (mark, title), = [(el, t) for el, t in _marked(root, "data-node") if el.get("data-node") == str(sm)]
    assert mark.get("stroke") == "#b00020" and reason in title
    others = [el for el, _ in _marked(root, "data-node") if el.get("data-node") != str(sm)]
    assert all(el.get("stroke") != "#b00020" for el in others)


def test_the_map_fits_its_box_and_says_each_dtypes_share():
    conv = _conversion()
    svg = precision_map_svg(conv, input_shapes={"data": (2, 3, 32, 32)})
    root = ET.fromstring(svg)
    assert float(root.get("width")) == MAP_WIDTH and float(root.get("height")) <= MAP_MAX_HEIGHT
    for el, _ in _marked(root, "data-node"):
        assert 0 <= float(el.get("x")) and float(el.get("x")) + float(el.get("width")) <= MAP_WIDTH
        assert 0 <= float(el.get("y")) and float(el.get("y")) + float(el.get("height")) <= float(root.get("height"))
    text = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert "data 2x3x32x32" in text and "% of FLOPs" in text and "float16: 4 ops" in text


def test_stacked_svg_keeps_both_documents_one_above_the_other():
    top = '<svg xmlns="http://www.w3.org/2000/svg" width="100" height="50"><rect id="a"/></svg>'
    bottom = ('<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="300" height="70">'
              '<rect id="b"/></svg>')
    root = ET.fromstring(stacked_svg(top, bottom, gap=10))
    assert (root.get("width"), root.get("height")) == ("300", "130")
    inner = root.findall(f"{SVG}svg")
    assert [s.find(f"{SVG}rect").get("id") for s in inner] == ["a", "b"] and inner[1].get("y") == "60"


def test_the_svg_file_has_the_map_above_the_graph(tmp_path):
    conv = _conversion()
    write_graph(conv, tmp_path / "g.svg", title="tiny")
    root = ET.parse(tmp_path / "g.svg").getroot()
    the_map, graph = root.findall(f"{SVG}svg")
    assert the_map.get("class") == "precision-map" and _marked(the_map, "data-node")
    assert graph.find(f".//{SVG}rect[@data-box]") is not None
    assert float(graph.get("y")) >= float(the_map.get("height"))


def test_the_html_page_opens_with_the_map_and_ends_with_the_graph():
    conv = _conversion()
    page = report_html(build_report(conv), graph_svg(conv), precision_map=precision_map_svg(conv))
    assert page.index("class=\"precision-map\"") < page.index("<h2>Summary") < page.index("<h2>Graph")
    assert "<?xml" not in page
