"""The picture, checked by its geometry: what a reader sees is what the graph holds.

Detection nets (gluoncv SSD and YOLO, built without weights) are the hard case: hundreds of
nodes, parallel heads, float32 decoding next to low precision convolutions. Each picture
is parsed back from its SVG: no edge may pass through a box it does not connect, every
edge must start on its source and end on its target, every float32 node next to a low
precision node must be named in the picture, and the width must stay bounded.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.convert import convert_graph
from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.options import make_options
from mxnet_amp.report.draw import graph_svg
from mxnet_amp.report.picture import fp32_islands, collapse, node_dtypes

SVG = "{http://www.w3.org/2000/svg}"
DETECTION = ("ssd_512_mobilenet1.0_voc", "yolo3_mobilenet1.0_voc")


def _symbol(name):
    gluoncv = pytest.importorskip("gluoncv")
    net = gluoncv.model_zoo.get_model(name, pretrained=False, pretrained_base=False)
    out = net(mx.sym.var("data"))
    return mx.sym.Group(list(out)) if isinstance(out, (list, tuple)) else out


@pytest.fixture(scope="module")
def detection():
    return {name: _symbol(name) for name in DETECTION}


def _convert(sym, target_dtype):
    return convert_graph(graph_from_symbol(sym), make_options(target_dtype), data_names=["data"])


# --- reading the SVG back -----------------------------------------------------------------

def _path_points(d: str, samples: int = 24) -> list[tuple[float, float]]:
    """Points along SVG path data made of M, L and C commands (curves sampled)."""
    tokens = re.findall(r"[MLC]|-?\d+(?:\.\d+)?", d)
    points, k, cur = [], 0, None
    while k < len(tokens):
        cmd = tokens[k]
        if cmd in ("M", "L"):
            nxt = (float(tokens[k + 1]), float(tokens[k + 2]))
            if cmd == "L":
                points += [(cur[0] + (nxt[0] - cur[0]) * t / samples, cur[1] + (nxt[1] - cur[1]) * t / samples)
                           for t in range(1, samples + 1)]
            else:
                points.append(nxt)
            cur, k = nxt, k + 3
        elif cmd == "C":
            c1, c2, end = [(float(tokens[k + 1 + 2 * j]), float(tokens[k + 2 + 2 * j])) for j in range(3)]
            for t in (i / samples for i in range(1, samples + 1)):
                a, b, c, e = (1 - t) ** 3, 3 * t * (1 - t) ** 2, 3 * t * t * (1 - t), t ** 3
                points.append((a * cur[0] + b * c1[0] + c * c2[0] + e * end[0],
                               a * cur[1] + b * c1[1] + c * c2[1] + e * end[1]))
            cur, k = end, k + 7
        else:
            raise AssertionError(f"unexpected path command {cmd!r} in {d!r}")
    return points


def _geometry(svg: str):
    root = ET.fromstring(svg)
    boxes = {int(r.get("data-box")): tuple(float(r.get(a)) for a in ("x", "y", "width", "height"))
             for r in root.iter(f"{SVG}rect") if r.get("data-box") is not None}
    edges = [(*map(int, p.get("data-edge").split()), p.get("d"))
             for p in root.iter(f"{SVG}path") if p.get("data-edge") is not None]
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    return boxes, edges, texts, float(root.get("width")), float(root.get("height"))


def geometry_problems(svg: str) -> list[str]:
    """Edges through boxes they do not connect, and edges not attached to their ends."""
    boxes, edges, _, _, _ = _geometry(svg)
    ids = np.array(sorted(boxes))
    rects = np.array([boxes[b] for b in ids])
    margin = 0.5      # touching a border is not passing through
    lo, hi = rects[:, :2] + margin, rects[:, :2] + rects[:, 2:] - margin
    problems = []
    for u, v, d in edges:
        points = _path_points(d)
        (ux, uy, uw, uh), (vx, vy, vw, vh) = boxes[u], boxes[v]
        start, end = points[0], points[-1]
        if not (abs(start[1] - (uy + uh)) < 0.2 and ux <= start[0] <= ux + uw):
            problems.append(f"edge {u}->{v} does not leave from the bottom of box {u}")
        if not (abs(end[1] - vy) < 0.2 and vx <= end[0] <= vx + vw):
            problems.append(f"edge {u}->{v} does not end on the top of box {v}")
        pts = np.array(points)
        hit = ((pts[:, None, 0] > lo[None, :, 0]) & (pts[:, None, 0] < hi[None, :, 0])
               & (pts[:, None, 1] > lo[None, :, 1]) & (pts[:, None, 1] < hi[None, :, 1])).any(axis=0)
        problems += [f"edge {u}->{v} passes through box {b}" for b in ids[hit] if b not in (u, v)]
    return problems


def _shown_names(texts, graph, nodes) -> set[int]:
    """The nodes whose name (less the prefix every op name shares) is a text of the picture."""
    shown = set(texts)
    out = set()
    for i in nodes:
        name = graph.nodes[i].name
        if any(name.endswith(t) and len(t) >= 4 and (t == name or name[-len(t) - 1] == "_")
               for t in shown):
            out.add(i)
    return out


# --- the checks ---------------------------------------------------------------------------

def test_geometry_check_finds_an_edge_through_a_box():
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" width="300" height="300">'
           '<rect data-box="0" x="0" y="0" width="100" height="20"/>'
           '<rect data-box="1" x="0" y="50" width="100" height="20"/>'
           '<rect data-box="2" x="0" y="100" width="100" height="20"/>'
           '<path data-edge="0 2" d="M50,20 L50,100"/></svg>')
    assert geometry_problems(svg) == ["edge 0->2 passes through box 1"]
    wrong_end = svg.replace('<path data-edge="0 2"', '<path data-edge="0 1"')
    assert "edge 0->1 does not end on the top of box 1" in geometry_problems(wrong_end)


@pytest.mark.parametrize("target_dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", DETECTION)
@pytest.mark.parametrize("detail", [False, True], ids=["collapsed", "detail"])
def test_detection_picture_shows_every_fp32_node_and_no_edge_crosses_a_box(detection, name,
                                                                           target_dtype, detail):
    conv = _convert(detection[name], target_dtype)
    svg = graph_svg(conv, name, detail_limit=None if detail else 80)
    boxes, edges, texts, width, height = _geometry(svg)
    pic = collapse(conv, None if detail else 80)
    assert pic.collapsed is not detail and len(boxes) == len(pic.boxes) and len(edges) == len(pic.edges)
    assert geometry_problems(svg) == []
    # float32 nodes in low precision surroundings: each named in the picture
    graph = conv.graph
    islands = fp32_islands(graph, node_dtypes(conv), target_dtype)
    assert islands, "the test model lost its float32 nodes next to low precision ones"
    missing = islands - _shown_names(texts, graph, islands)
    assert not missing, f"not named in the picture: {[graph.nodes[i].name for i in missing]}"
    # bounded width (the old detailed layout of the SSD was 9,092 px wide)
    assert width <= (3000 if detail else 2200), width
    if not detail:
        # no collapsed box mixes float32 with the low precision dtype
        assert not [b.title for b in pic.boxes if "float32" in b.dtypes and target_dtype in b.dtypes]
        assert len(pic.boxes) <= 60


def test_detection_picture_renders_to_png(detection, tmp_path):
    cairosvg = pytest.importorskip("cairosvg")
    from mxnet_amp.report.draw import write_graph
    conv = _convert(detection["yolo3_mobilenet1.0_voc"], "float16")
    out = tmp_path / "yolo.png"
    assert write_graph(conv, out, "yolo") == "png"
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    _, _, _, width, height = _geometry(graph_svg(conv, "yolo"))
    png_w, png_h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (png_w, png_h) == (round(width), round(height))
    del cairosvg


@pytest.mark.parametrize("detail", [False, True], ids=["collapsed", "detail"])
def test_resnet_edges_attach_to_their_own_boxes(detail):
    """resnet18's ``batchnorm2 -> plus0`` once ran under ``relu0`` and read as ``relu0 -> plus0``."""
    from mxnet.gluon.model_zoo import vision
    conv = convert_graph(graph_from_symbol(vision.resnet18_v1(pretrained=False)(mx.sym.var("data"))),
                         make_options("bfloat16"), data_names=["data"])
    svg = graph_svg(conv, "resnet18_v1", detail_limit=None if detail else 80)
    assert geometry_problems(svg) == []
    if detail:
        pic = collapse(conv, None)
        graph = conv.graph
        name = {b: graph.nodes[box.nodes[0]].name for b, box in enumerate(pic.boxes)}
        plus = next(b for b, n in name.items() if n.endswith("plus0"))
        feeds = [graph.nodes[e.node] for e in graph.nodes[pic.boxes[plus].nodes[0]].inputs]
        bn = next(b for b, n in name.items() if n in {f.name for f in feeds if f.op == "BatchNorm"})
        # drawn as its own edge, from batchnorm2's box to plus0's (geometry checked above)
        assert (bn, plus) in {(u, v) for u, v, _ in pic.edges}
