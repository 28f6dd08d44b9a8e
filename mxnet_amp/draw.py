"""The converted graph as a picture: each node coloured by the dtype it computes in.

No system binary needed: :func:`graph_svg` lays the graph out itself and writes SVG;
:func:`graph_dot` writes the same picture as graphviz DOT for users who have ``dot``.

Small graphs are drawn node by node. Large ones (a resnet50 has ~170 op nodes and ~90
casts) are collapsed so they stay readable: the node sequence is cut at *cut points*,
nodes no edge jumps over (in a resnet, the activation closing each residual block), so each
piece is a block; consecutive identical blocks become one box marked ``× N``, and runs of
single nodes become one box per name group (``stage1_…``). Each box lists its op counts
per dtype, is filled with the colour of its majority dtype and carries a bar showing the
dtype mix.
"""
from __future__ import annotations

import html
import os
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

from .dtypes import is_float, widest
from .errors import AMPError

__all__ = ["Box", "Picture", "DrawError", "collapse", "graph_svg", "graph_dot", "write_graph",
           "check_graph_path",
           "DTYPE_COLOURS"]

# dtype -> (fill, stroke); 'non-float' covers integer and boolean tensors
DTYPE_COLOURS = {
    "float32": ("#dbe9f6", "#3c7bb8"),
    "bfloat16": ("#fde0c5", "#e6550d"),
    "float16": ("#dcf0d6", "#2f9a4a"),
    "float64": ("#e8e4f3", "#6a51a3"),
    "non-float": ("#eeeeee", "#8a8a8a"),
}
_CAST_SUFFIXES = ("_amp_cast_", "_amp_multicast")
_CASTS = ("amp_cast", "amp_multicast")


class DrawError(AMPError, RuntimeError):
    """The picture cannot be written in the format asked for."""


@dataclass(frozen=True)
class Box:
    """One drawn box: a node, or a collapsed group of nodes."""

    title: str
    nodes: tuple[int, ...]          # indices into the converted graph (one block when repeat > 1)
    dtypes: Mapping[str, int]       # op nodes (casts not counted) per dtype, one block
    ops: Mapping[str, int]          # op nodes per op type, one block
    casts: int                      # amp_cast / amp_multicast nodes, one block
    repeat: int = 1                 # identical consecutive blocks this box stands for
    kind: str = "op"                # 'op', 'input', 'cast' or 'group'
    dtype: str = "float32"          # the colour: dtype of the node, or the majority of a group


@dataclass(frozen=True)
class Picture:
    """Boxes and the edges between them (``(src box, dst box, dtype)``), ready to lay out."""

    boxes: tuple[Box, ...]
    edges: tuple[tuple[int, int, str], ...]
    collapsed: bool
    title: str


def _dtype_key(dtype: str | None) -> str:
    return dtype if is_float(dtype) else "non-float"


def node_dtypes(conversion) -> list[str]:
    """The dtype each node of ``conversion.graph`` computes in (its first output)."""
    graph = conversion.graph
    var = {**conversion.arg_dtypes, **conversion.aux_dtypes}
    out: list[str] = []
    for node in graph.nodes:
        if node.is_variable:
            dt = var.get(node.name) or "float32"
        elif node.op == "amp_cast":
            dt = node.attrs.get("dtype", "float32")
        elif node.op == "amp_multicast":
            ins = [out[e.node] for e in node.inputs if is_float(out[e.node])]
            dt = widest(ins) if ins else "float32"
        else:
            dt = conversion.result.node_dtypes.get(node.name)
        out.append(_dtype_key(dt))
    return out


def _base_name(name: str) -> str:
    for suffix in _CAST_SUFFIXES:
        k = name.find(suffix)
        if k > 0:
            return name[:k]
    return name


def _common_prefix(names: Sequence[str]) -> str:
    """Longest common prefix ending at an underscore."""
    if len(names) < 2:
        return ""
    a, b = min(names), max(names)
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    cut = a[:k].rfind("_")
    return a[:cut + 1] if cut >= 0 else ""


def _group_key(short: str) -> str:
    """The name group of a node: its name less the layer part, two levels at most
    (``stage1_conv0_fwd`` -> ``stage1``, ``stage1_unit2_bn1`` -> ``stage1_unit2``,
    ``conv0_fwd`` -> ``''``)."""
    parts = short.split("_")
    while len(parts) > 1 and (parts[-1] in ("fwd", "output", "") or parts[-1].isdigit()):
        parts.pop()
    # two levels at most: 'features_linearbottleneck0_relu60_relu6' belongs with
    # 'features_linearbottleneck0_conv0_fwd', not in a group of its own
    return "_".join(p for p in parts[:-1][:2] if p)


def _make_box(graph, idx: Sequence[int], dtypes: list[str], title: str, repeat: int = 1,
              kind: str = "group") -> Box:
    ops = Counter()
    per = Counter()
    casts = 0
    for i in idx:
        node = graph.nodes[i]
        if node.op in ("amp_cast", "amp_multicast"):
            casts += 1
        elif not node.is_variable:
            ops[node.op] += 1
            per[dtypes[i]] += 1
    if per:
        majority = max(per.items(), key=lambda kv: (kv[1], kv[0] != "float32"))[0]
    else:
        majority = dtypes[idx[0]]
    return Box(title, tuple(idx), dict(per), dict(ops), casts, repeat, kind, majority)


def collapse(conversion, detail_limit: int = 80, max_boxes: int = 48, title: str = "") -> Picture:
    """The boxes and edges to draw for ``conversion`` (see the module doc).

    Graphs with at most ``detail_limit`` drawn nodes (op nodes and model inputs) are drawn
    node by node; larger ones are collapsed to at most about ``max_boxes`` boxes.
    """
    graph = conversion.graph
    dtypes = node_dtypes(conversion)
    data = set(conversion.data_names)
    drawn = [i for i, n in enumerate(graph.nodes) if not n.is_variable or n.name in data]
    drawn_set = set(drawn)
    prefix = _common_prefix([graph.nodes[i].name for i in drawn if not graph.nodes[i].is_variable
                             and graph.nodes[i].op not in _CASTS])
    short = {i: graph.nodes[i].name[len(prefix):] if graph.nodes[i].name.startswith(prefix)
             else graph.nodes[i].name for i in drawn}
    node_edges = sorted({(e.node, i) for i in drawn if not graph.nodes[i].is_variable
                         for e in graph.nodes[i].inputs if e.node in drawn_set})
    n_ops = sum(1 for n in conversion.original.nodes if not n.is_variable)
    n_casts = sum(1 for n in graph.nodes if n.op in _CASTS)
    summary = (f"{n_ops} op nodes in {conversion.policy.target_dtype} mixed precision, "
               f"{n_casts} casts inserted")
    title = f"{title}: {summary}" if title else summary

    if len(drawn) <= detail_limit:
        boxes = []
        where = {}
        for i in drawn:
            node = graph.nodes[i]
            kind = ("input" if node.is_variable else
                    "cast" if node.op in ("amp_cast", "amp_multicast") else "op")
            where[i] = len(boxes)
            if kind == "cast" and graph.nodes[node.inputs[0].node].is_variable:
                var = graph.nodes[node.inputs[0].node].name
                label = f"cast {var[len(prefix):] if var.startswith(prefix) else var}"
            else:
                label = node.op if kind == "cast" else short[i]
            boxes.append(Box(label, (i,), {dtypes[i]: 1} if kind == "op" else {},
                             {node.op: 1} if kind == "op" else {}, int(kind == "cast"), 1, kind,
                             dtypes[i]))
        edges = tuple((where[u], where[v], dtypes[u]) for u, v in node_edges)
        return Picture(tuple(boxes), edges, False, title)

    # cut points: positions no edge jumps over
    pos = {i: p for p, i in enumerate(drawn)}
    jumped = [0] * (len(drawn) + 1)
    for u, v in node_edges:
        if pos[v] - pos[u] > 1:
            jumped[pos[u] + 1] += 1
            jumped[pos[v]] -= 1
    segments: list[list[int]] = []
    current: list[int] = []
    depth = 0
    for p, i in enumerate(drawn):
        depth += jumped[p]
        current.append(i)
        if depth == 0:
            segments.append(current)
            current = []
    if current:
        segments.append(current)

    def signature(seg):
        local = {i: k for k, i in enumerate(seg)}
        return tuple((graph.nodes[i].op, dtypes[i],
                      tuple(local.get(e.node, -1) for e in graph.nodes[i].inputs if e.node in drawn_set))
                     for i in seg)

    def key(i):
        return _group_key(_base_name(short[i]))

    def core(seg):
        return [i for i in seg if graph.nodes[i].op not in _CASTS]

    # units: a multi-node block with the single nodes of its name group that follow it (the
    # activation after a residual add), or a run of single nodes of one name group
    units: list[tuple[list[int], bool]] = []   # (nodes, is a block)
    for seg in segments:
        ops = core(seg)
        if len(ops) > 1:
            units.append((list(seg), True))
        elif units and (key(units[-1][0][-1]) == key(seg[-1]) or not ops):
            units[-1][0].extend(seg)
        else:
            units.append((list(seg), False))
    # groups: (nodes of one block, repeat count, every node the group stands for)
    groups: list[tuple[list[int], int, list[int]]] = []
    last_sig = None
    for nodes, is_block in units:
        sig = signature(nodes) if is_block else None
        if sig is not None and sig == last_sig:
            block, n, every = groups[-1]
            groups[-1] = (block, n + 1, every + nodes)
        else:
            groups.append((nodes, 1, list(nodes)))
        last_sig = sig
    while len(groups) > max_boxes:
        # merge neighbours pairwise (keeps the chain order) until it fits
        groups = [(sum((g[2] for g in groups[k:k + 2]), []), 1, sum((g[2] for g in groups[k:k + 2]), []))
                  if k + 1 < len(groups) else groups[k] for k in range(0, len(groups), 2)]

    boxes = []
    box_of = {}
    for block, n, every in groups:
        names = [short[i] for i in core(every)] or [short[i] for i in every]
        kind = "group"
        if len(block) == 1:
            node = graph.nodes[block[0]]
            kind = ("input" if node.is_variable else
                    "cast" if node.op in ("amp_cast", "amp_multicast") else "op")
            label = node.op if kind == "cast" else names[0]
        else:
            label = _range_label(names)
        if n > 1:
            ops = core(every) or every
            first, last = key(ops[0]), key(ops[-1])
            if first and last and first != last:
                label = _range_label([first, last])   # 'stage3: unit2 … unit6'
            label = f"{label}   × {n}"
        for i in every:
            box_of[i] = len(boxes)
        boxes.append(_make_box(graph, block, dtypes, label, n, kind))
    edges = sorted({(box_of[u], box_of[v], dtypes[u]) for u, v in node_edges
                    if box_of.get(u) is not None and box_of.get(v) is not None
                    and box_of[u] != box_of[v]})
    return Picture(tuple(boxes), tuple(edges), True, title)


def _range_label(names: Sequence[str]) -> str:
    pre = _common_prefix(names)
    first, last = names[0][len(pre):], names[-1][len(pre):]
    head = f"{pre.rstrip('_')}: " if pre else ""
    return f"{head}{first} … {last}" if first != last else f"{head}{first}"


# --- layout -----------------------------------------------------------------------------

_FONT = 12
_CHAR_W = 6.9   # average glyph width of 12px sans-serif, for fitting text
_LINE_H = 16
_BOX_TEXT_CHARS = (440 - 14) / _CHAR_W   # characters that fit on a line of a collapsed box


def _fit(text: str, width: float) -> str:
    n = int(width / _CHAR_W)
    return text if len(text) <= n else text[:max(1, n - 1)] + "…"


def _box_lines(box: Box, target: str) -> list[str]:
    if box.kind == "input":
        return [box.title, f"input · {box.dtype}"]
    if box.kind == "cast":
        return [f"{box.title} → {box.dtype}"]
    if box.kind == "op":
        return [box.title, f"{next(iter(box.ops))} · {box.dtype}"]
    total = sum(box.dtypes.values())
    mix = " · ".join(f"{n} {d}" for d, n in sorted(box.dtypes.items(), key=lambda kv: -kv[1]))
    line2 = (f"{total} ops: {mix}" if total else "no op nodes") + (f" · {box.casts} casts" if box.casts else "")
    ops = [f"{op} {n}" for op, n in sorted(box.ops.items(), key=lambda kv: (-kv[1], kv[0]))]
    lines = [box.title, line2]
    # op counts wrap onto a second line rather than being cut
    width = int(_BOX_TEXT_CHARS)
    row = ""
    for item in ops:
        if row and len(row) + 3 + len(item) > width and len(lines) < 3:
            lines.append(row)
            row = item
        else:
            row = f"{row} · {item}" if row else item
    if row:
        lines.append(row)
    if box.repeat > 1:
        lines.append(f"per block; {box.repeat} identical blocks in a row")
    return lines


def _layout(pic: Picture, target: str):
    """Layer boxes by longest path, wrap long columns; returns (geometry, width, height)."""
    n = len(pic.boxes)
    layer = [0] * n
    for u, v, _ in sorted(pic.edges, key=lambda e: e[1]):
        layer[v] = max(layer[v], layer[u] + 1)
    # a cast of a weight (no drawn predecessor) sits just above the node that reads it
    has_pred = {v for _, v, _ in pic.edges}
    for b in range(n):
        if b not in has_pred and pic.boxes[b].kind == "cast":
            uses = [layer[v] for u, v, _ in pic.edges if u == b]
            if uses:
                layer[b] = max(0, min(uses) - 1)
    layers: dict[int, list[int]] = {}
    for b in range(n):
        layers.setdefault(layer[b], []).append(b)
    box_w = 440 if pic.collapsed else 210
    gap_x, gap_y = 24, 30
    heights = []
    lines = []
    for box in pic.boxes:
        ls = _box_lines(box, target)
        lines.append(ls)
        heights.append(10 + _LINE_H * len(ls) + (10 if box.kind == "group" else 0))
    n_layers = max(layers) + 1 if layers else 0
    per_col = 12 if pic.collapsed else 28
    n_cols = max(1, -(-n_layers // per_col))
    layer_w = {l: len(bs) * box_w + (len(bs) - 1) * gap_x for l, bs in layers.items()}
    layer_h = {l: max(heights[b] for b in bs) for l, bs in layers.items()}
    col_w = [0.0] * n_cols
    for l in layers:
        c = l // per_col
        col_w[c] = max(col_w[c], layer_w[l])
    top = 70
    geom = {}
    x0 = 20.0
    col_x = []
    for c in range(n_cols):
        col_x.append(x0)
        x0 += col_w[c] + 70
    height = 0.0
    y_by_layer = {}
    for c in range(n_cols):
        y = top
        for l in range(c * per_col, min(n_layers, (c + 1) * per_col)):
            y_by_layer[l] = y
            y += layer_h.get(l, 0) + gap_y
        height = max(height, y)
    for l, bs in layers.items():
        c = l // per_col
        x = col_x[c] + (col_w[c] - layer_w[l]) / 2
        for b in bs:
            geom[b] = (x, y_by_layer[l], box_w, heights[b])
            x += box_w + gap_x
    width = max(x0 - 50, 20 + _CHAR_W * 1.25 * len(pic.title) + 20, 760 if pic.collapsed else 520)
    return geom, lines, width, height + 10, col_x, layer


def graph_svg(conversion, title: str = "", detail_limit: int = 80, max_boxes: int = 48) -> str:
    """The picture of ``conversion`` as a standalone SVG document (text)."""
    pic = collapse(conversion, detail_limit, max_boxes, title)
    target = conversion.policy.target_dtype
    geom, lines, width, height, col_x, layer = _layout(pic, target)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="DejaVu Sans, Arial, sans-serif" '
           f'font-size="{_FONT}">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
           'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="20" y="24" font-size="15" font-weight="bold">{html.escape(pic.title)}</text>']
    # legend
    x = 20
    used = sorted({b.dtype for b in pic.boxes} | {d for b in pic.boxes for d in b.dtypes})
    for d in used:
        fill, stroke = DTYPE_COLOURS.get(d, DTYPE_COLOURS["non-float"])
        out.append(f'<rect x="{x}" y="36" width="14" height="14" fill="{fill}" stroke="{stroke}"/>')
        out.append(f'<text x="{x + 19}" y="48">{html.escape(d)}</text>')
        x += 30 + int(_CHAR_W * len(d)) + 10
    if pic.collapsed:
        out.append(f'<text x="{x}" y="48" fill="#555">boxes: blocks of nodes (fill: majority dtype; '
                   'bar: dtype mix; × N: N identical blocks in a row)</text>')
    for u, v, dt in pic.edges:
        x1, y1, w1, h1 = geom[u]
        x2, y2, w2, h2 = geom[v]
        stroke = DTYPE_COLOURS.get(dt, DTYPE_COLOURS["non-float"])[1]
        sx, sy, tx, ty = x1 + w1 / 2, y1 + h1, x2 + w2 / 2, y2
        if ty <= sy:
            # the target heads a column to the right: run down, along the gap, up, across
            gx = max(c for c in col_x if c <= x2 + 1e-6) - 35
            low = sy + 12
            d = (f"M{sx:.1f},{sy:.1f} L{sx:.1f},{low:.1f} L{gx:.1f},{low:.1f} "
                 f"L{gx:.1f},{ty - 14:.1f} L{tx:.1f},{ty - 14:.1f} L{tx:.1f},{ty:.1f}")
        elif layer[v] - layer[u] > 1 and abs(sx - tx) < w1:
            # a long edge past boxes in between: bow out to the right of them
            off = 0.75 * w1
            sx, tx = x1 + w1 - 12, x2 + w2 - 12
            dy = (ty - sy) / 3
            d = (f"M{sx:.1f},{sy:.1f} C{sx + off:.1f},{sy + dy:.1f} {tx + off:.1f},{ty - dy:.1f} "
                 f"{tx:.1f},{ty:.1f}")
        else:
            dy = (ty - sy) / 2
            d = f"M{sx:.1f},{sy:.1f} C{sx:.1f},{sy + dy:.1f} {tx:.1f},{ty - dy:.1f} {tx:.1f},{ty:.1f}"
        out.append(f'<path d="{d}" fill="none" stroke="{stroke}" stroke-width="1.6" '
                   'marker-end="url(#arrow)"/>')
    for b, box in enumerate(pic.boxes):
        x, y, w, h = geom[b]
        fill, stroke = DTYPE_COLOURS.get(box.dtype, DTYPE_COLOURS["non-float"])
        rx = 12 if box.kind in ("input", "cast") else 4
        tip = html.escape(", ".join(conversion.graph.nodes[i].name for i in box.nodes[:40]))
        out.append(f'<g><title>{tip}</title>')
        if box.repeat > 1:  # a stacked look for repeated blocks
            out.append(f'<rect x="{x + 5:.1f}" y="{y + 5:.1f}" width="{w}" height="{h}" rx="{rx}" '
                       f'fill="{fill}" stroke="{stroke}"/>')
        out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w}" height="{h}" rx="{rx}" fill="{fill}" '
                   f'stroke="{stroke}" stroke-width="1.4"/>')
        for k, text in enumerate(lines[b]):
            weight = ' font-weight="bold"' if k == 0 else ""
            out.append(f'<text x="{x + 8:.1f}" y="{y + 8 + _LINE_H * (k + 1) - 4:.1f}"{weight}>'
                       f'{html.escape(_fit(text, w - 14))}</text>')
        if box.kind == "group" and box.dtypes:
            total = sum(box.dtypes.values())
            bx = x + 8
            for d, cnt in sorted(box.dtypes.items(), key=lambda kv: -kv[1]):
                bw = (w - 16) * cnt / total
                bf, bs = DTYPE_COLOURS.get(d, DTYPE_COLOURS["non-float"])
                out.append(f'<rect x="{bx:.1f}" y="{y + h - 12:.1f}" width="{bw:.1f}" height="6" '
                           f'fill="{bs}"/>')
                bx += bw
        out.append('</g>')
    out.append('</svg>')
    return "\n".join(out) + "\n"


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def graph_dot(conversion, title: str = "", detail_limit: int = 80, max_boxes: int = 48) -> str:
    """The same picture as graphviz DOT text (render with ``dot -Tsvg`` / ``-Tpng``)."""
    pic = collapse(conversion, detail_limit, max_boxes, title)
    target = conversion.policy.target_dtype
    out = ["digraph mxnet_amp {", f"  label={_dot_quote(pic.title)}; labelloc=t; rankdir=TB;",
           '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=11];']
    for b, box in enumerate(pic.boxes):
        fill, stroke = DTYPE_COLOURS.get(box.dtype, DTYPE_COLOURS["non-float"])
        label = "\\n".join(_dot_quote(t)[1:-1] for t in _box_lines(box, target))
        peri = ", peripheries=2" if box.repeat > 1 else ""
        out.append(f'  b{b} [label="{label}", fillcolor="{fill}", color="{stroke}"{peri}];')
    for u, v, dt in pic.edges:
        out.append(f'  b{u} -> b{v} [color="{DTYPE_COLOURS.get(dt, DTYPE_COLOURS["non-float"])[1]}"];')
    out.append("}")
    return "\n".join(out) + "\n"


def check_graph_path(path: str | os.PathLike) -> str:
    """The format :func:`write_graph` would write ``path`` in; :class:`DrawError` when it
    cannot (unknown extension, or PNG with no renderer), so callers can check first."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    fmt = {".svg": "svg", ".dot": "dot", ".gv": "dot", ".png": "png"}.get(ext)
    if fmt is None:
        raise DrawError(f"cannot write a picture to {path}: use a .svg, .png, .dot or .gv file name")
    if fmt == "png" and _cairosvg() is None and shutil.which("dot") is None:
        raise DrawError(_NO_PNG)
    return fmt


def _cairosvg():
    try:
        import cairosvg
    except (ImportError, OSError):   # OSError: the package is there but libcairo is not
        return None
    return cairosvg


_NO_PNG = ("PNG output needs the cairosvg package (pip install cairosvg) or graphviz's dot "
           "program (apt-get install graphviz); write a .svg or .dot file instead")


def write_graph(conversion, path: str | os.PathLike, title: str = "") -> str:
    """Write the picture to ``path``; the format follows the extension.

    ``.svg`` and ``.dot``/``.gv`` need nothing beyond Python; ``.png`` needs the ``cairosvg``
    package or graphviz's ``dot`` program. Returns the format written.

    Raises
    ------
    DrawError
        Unknown extension, or PNG asked for with neither renderer available.
    """
    from .io import atomic_write
    path = os.fspath(path)
    fmt = check_graph_path(path)
    if fmt == "svg":
        data = graph_svg(conversion, title).encode()
    elif fmt == "dot":
        data = graph_dot(conversion, title).encode()
    else:
        data = _png(conversion, title)

    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(data)
    atomic_write(path, write)
    return fmt


def _png(conversion, title: str) -> bytes:
    cairosvg = _cairosvg()
    if cairosvg is not None:
        return cairosvg.svg2png(bytestring=graph_svg(conversion, title).encode())
    dot = shutil.which("dot")
    if dot is not None:
        done = subprocess.run([dot, "-Tpng"], input=graph_dot(conversion, title).encode(),
                              capture_output=True, check=False)
        if done.returncode == 0:
            return done.stdout
        raise DrawError(f"dot failed to render the PNG: {done.stderr.decode(errors='replace')[:200]}")
    raise DrawError(_NO_PNG)
