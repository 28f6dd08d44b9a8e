"""The precision map: where a converted model computes in which dtype, on one screen.

Every op node of the converted graph is one mark, placed left to right by its depth (the
longest path of op nodes from the model inputs; casts add none), stacked with the other
ops of its depth, coloured by the dtype it computes in and as tall as its estimated cost
(:mod:`mxnet_amp.report.op_costs`: FLOPs from the shapes). Under each column a tick marks
every cast the conversion inserted (``CastResult.inserted_casts``), in the colour of the
dtype it casts to; above it a triangle marks every float32 island
(:func:`mxnet_amp.report.picture.fp32_islands`: a float32 op reading or feeding a low
precision op). Every mark's ``<title>`` (shown on hover) names its node, op, dtype, cost
and, for float32, why (the report's reason). Long models wrap onto up to four rows; when
the depths exceed the pixel budget they are binned, and a column with more ops than fit is
drawn as one mark per dtype (so a 100k-node graph stays a few thousand marks). Everything
is a forward or backward sweep over the topological order: no recursion.

:func:`precision_map` computes the marks, :func:`precision_map_svg` draws them, and
:func:`stacked_svg` puts the map above the graph drawing in one SVG document.
"""
from __future__ import annotations

import html
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

from ..graph import CAST_OPS, Graph
from .layout import DTYPE_COLOURS, fit_text
from .model import build_report
from .op_costs import Costs, op_costs
from .picture import fp32_islands, node_dtypes

if TYPE_CHECKING:   # only annotations name it
    from ..record import Conversion

__all__ = ["Mark", "CastMark", "PrecisionMap", "op_depths", "precision_map", "precision_map_svg",
           "stacked_svg", "MAP_WIDTH", "MAP_MAX_HEIGHT"]

MAP_WIDTH = 1320          # fits a 1,400 px browser window with the page's margins and a scrollbar
MAP_MAX_HEIGHT = 640      # with the page title, fits a 900 px window
_MAX_ROWS = 4
_MIN_COL, _MAX_COL = 5.0, 30.0    # px per depth column
_LEFT, _RIGHT = 56.0, 34.0
_HEAD, _LINE = 62.0, 16.0
_ISLAND_LANE, _CAST_LANE, _ROW_GAP = 13.0, 12.0, 24.0
_MIN_H = 4.0              # px: the smallest mark, so a cheap op's dtype is still seen
_ISLAND = "#b00020"
_FOOT_LINES = 4
_CHAR = 6.6              # px per character of 12px text, for placing the legend


@dataclass(frozen=True)
class Mark:
    """One drawn op mark: an op node, or every op of one dtype in a crowded column."""

    nodes: tuple[int, ...]       # op node indices into ``Conversion.graph``
    dtype: str                   # the dtype they compute in
    cost: float                  # their summed cost (0 where unknown)
    column: int
    island: bool                 # a float32 island (a single node) or holding one (aggregated)
    title: str                   # the hover text


@dataclass(frozen=True)
class CastMark:
    """One drawn cast tick: a cast node, or every cast to one dtype in a crowded column."""

    nodes: tuple[int, ...]
    dtype: str                   # the dtype cast to
    column: int
    title: str


@dataclass(frozen=True)
class PrecisionMap:
    """What :func:`precision_map_svg` draws.

    Attributes
    ----------
    marks, casts : tuple
        The op marks and cast ticks, each with its column.
    columns : int
        Columns along depth; ``depths_per_column`` depths each (1 unless binned).
    islands : mapping of int to str
        Each float32 island node -> why it is float32.
    share : mapping of str to (int, float)
        Per dtype: op nodes and their summed cost.
    """

    marks: tuple[Mark, ...]
    casts: tuple[CastMark, ...]
    columns: int
    depths_per_column: int
    rows: int
    costs: Costs
    islands: Mapping[int, str]
    share: Mapping[str, tuple[int, float]]
    target: str
    title: str


def op_depths(graph: Graph) -> list[int]:
    """Each node's depth: an op node one more than the deepest op it reads (0 reading only
    variables), a cast that of what it reads, a variable -1. One forward sweep."""
    depth: list[int] = []
    for node in graph.nodes:
        before = max((depth[e.node] for e in node.inputs), default=-1)
        if node.is_variable:
            depth.append(-1)
        elif node.op in CAST_OPS:
            depth.append(before)
        else:
            depth.append(before + 1)
    return depth


def _cast_depths(graph: Graph, depth: Sequence[int]) -> dict[int, int]:
    """Each cast's depth on the map: that of the first op reading it (through casts), so a
    weight's cast sits under the op it feeds; one backward sweep."""
    consumers = graph.consumers()
    out: dict[int, int] = {}
    for i in range(len(graph.nodes) - 1, -1, -1):
        if graph.nodes[i].op not in CAST_OPS:
            continue
        readers = [out.get(j, depth[j]) if graph.nodes[j].op in CAST_OPS else depth[j] for j, _ in consumers[i]]
        out[i] = min(readers, default=max(depth[i], 0))
    return out


def _amount(x: float, unit: str) -> str:
    if unit != "FLOPs":
        return f"{x:.0f} {unit}{'s' if x != 1 else ''}"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}FLOPs"
    return f"{x:.0f} FLOPs"


def _op_title(conv: Conversion, i: int, dtype: str, cost: float | None, unit: str, reason: str | None,
              island: bool) -> str:
    node = conv.graph.nodes[i]
    text = f"{node.name} ({node.op}): {dtype}, " + ("cost unknown" if cost is None else _amount(cost, unit))
    if reason is not None:
        text += f"\n{'float32 island' if island else 'float32'}: {reason}"
    return text


def _cast_title(conv: Conversion, i: int, dtype: str, dtypes: Sequence[str]) -> str:
    graph = conv.graph
    node = graph.nodes[i]
    src = graph.nodes[node.inputs[0].node] if node.inputs else None
    kind = conv.result.inserted_casts.get(i, "cast")
    what = f"{dtypes[node.inputs[0].node]} → {dtype}" if src is not None else dtype
    return f"{node.name} ({kind}): {what}" + (f", reads {src.name}" if src is not None else "")


def _crowded(column_nodes: Mapping[int, list[int]], cap: int) -> set[int]:
    return {c for c, nodes in column_nodes.items() if len(nodes) > cap}


def _op_marks(conv: Conversion, col_of: Mapping[int, int], dtypes: Sequence[str], costs: Costs,
              reasons: Mapping[str, str], islands: set[int], cap: int) -> list[Mark]:
    """One mark per op node; one per dtype in a column holding more than ``cap`` ops."""
    by_column: dict[int, list[int]] = {}
    for i in sorted(col_of):
        by_column.setdefault(col_of[i], []).append(i)
    crowded = _crowded(by_column, cap)
    marks: list[Mark] = []
    for column in sorted(by_column):
        nodes = by_column[column]
        if column not in crowded:
            for i in nodes:
                name = conv.graph.nodes[i].name
                reason = reasons.get(name) if dtypes[i] == "float32" else None
                marks.append(Mark((i,), dtypes[i], costs.values[i] or 0.0, column, i in islands,
                                  _op_title(conv, i, dtypes[i], costs.values[i], costs.unit, reason, i in islands)))
            continue
        for dtype in sorted({dtypes[i] for i in nodes}):
            group = tuple(i for i in nodes if dtypes[i] == dtype)
            held = [i for i in group if i in islands]
            cost = sum(costs.values[i] or 0.0 for i in group)
            names = ", ".join(conv.graph.nodes[i].name for i in group[:6]) + (" …" if len(group) > 6 else "")
            title = f"{len(group)} ops in {dtype}, {_amount(cost, costs.unit)}: {names}" + (
                f"\n{len(held)} float32 island(s)" if held else "")
            marks.append(Mark(group, dtype, cost, column, bool(held), title))
    return marks


def _cast_marks(conv: Conversion, col_of: Mapping[int, int], dtypes: Sequence[str], cap: int) -> list[CastMark]:
    """One tick per inserted cast; one per dtype cast to in a column holding more than ``cap``."""
    by_column: dict[int, list[int]] = {}
    for i in sorted(col_of):
        by_column.setdefault(col_of[i], []).append(i)
    crowded = _crowded(by_column, cap)
    out: list[CastMark] = []
    for column in sorted(by_column):
        nodes = by_column[column]
        if column not in crowded:
            out += [CastMark((i,), dtypes[i], column, _cast_title(conv, i, dtypes[i], dtypes)) for i in nodes]
            continue
        for dtype in sorted({dtypes[i] for i in nodes}):
            group = tuple(i for i in nodes if dtypes[i] == dtype)
            out.append(CastMark(group, dtype, column, f"{len(group)} casts to {dtype}"))
    return out


def _grid(n_depths: int) -> tuple[int, int, int]:
    """``(columns, depths per column, rows)`` for ``n_depths`` depths within the width."""
    per_row = int((MAP_WIDTH - _LEFT - _RIGHT) / _MIN_COL)
    per = max(1, math.ceil(n_depths / (per_row * _MAX_ROWS)))
    columns = max(1, math.ceil(n_depths / per))
    return columns, per, min(_MAX_ROWS, math.ceil(columns / per_row))


def precision_map(conversion: Conversion, input_shapes: Mapping[str, tuple] | None = None,
                  costs: Costs | None = None, title: str = "") -> PrecisionMap:
    """The marks of ``conversion``'s precision map (see the module doc).

    Parameters
    ----------
    conversion : mxnet_amp.record.Conversion
    input_shapes : mapping of str to tuple of int, optional
        The model inputs' shapes, for the costs (:func:`mxnet_amp.report.op_costs.op_costs`).
    costs : Costs, optional
        The costs to size the marks by, instead of estimating them.
    title : str
        A label for the model.

    Returns
    -------
    PrecisionMap
    """
    graph = conversion.graph
    target = conversion.policy.target_dtype
    dtypes = node_dtypes(conversion)
    costs = costs if costs is not None else op_costs(conversion, input_shapes)
    depth = op_depths(graph)
    ops = [i for i, n in enumerate(graph.nodes) if not n.is_variable and n.op not in CAST_OPS]
    columns, per, rows = _grid(max((depth[i] for i in ops), default=0) + 1)
    reasons = {n.name: n.reason for n in build_report(conversion).fp32_nodes}
    islands = fp32_islands(graph, dtypes, target)
    cap = int(_bar_height(rows) / _MIN_H) // 2
    marks = _op_marks(conversion, {i: depth[i] // per for i in ops}, dtypes, costs, reasons, islands, cap)
    cast_cols = {i: d // per for i, d in _cast_depths(graph, depth).items() if i in conversion.result.inserted_casts}
    casts = _cast_marks(conversion, cast_cols, dtypes, max(2, int(_col_width(columns, rows) / 3)))
    share: dict[str, tuple[int, float]] = {}
    for i in ops:
        n, c = share.get(dtypes[i], (0, 0.0))
        share[dtypes[i]] = (n + 1, c + (costs.values[i] or 0.0))
    island_reasons = {i: reasons.get(graph.nodes[i].name, "float32") for i in sorted(islands)}
    return PrecisionMap(tuple(marks), tuple(casts), columns, per, rows, costs, island_reasons, share, target, title)


# --- drawing --------------------------------------------------------------------------------

def _col_width(columns: int, rows: int) -> float:
    return min(_MAX_COL, (MAP_WIDTH - _LEFT - _RIGHT) / max(1, math.ceil(columns / rows)))


def _row_height(rows: int) -> float:
    return min(220.0, (MAP_MAX_HEIGHT - _HEAD - _LINE * (_FOOT_LINES + 1)) / rows)


def _bar_height(rows: int) -> float:
    return _row_height(rows) - _ISLAND_LANE - _CAST_LANE - _ROW_GAP


def _heights(pmap: PrecisionMap, bar: float) -> list[float]:
    """Each mark's height: cost times one scale for the whole map (the fullest column fills
    the bar), at least ``_MIN_H``."""
    total: Counter[int] = Counter()
    count: Counter[int] = Counter()
    for m in pmap.marks:
        total[m.column] += m.cost
        count[m.column] += 1
    room = [(bar - _MIN_H * count[c]) / total[c] for c in total if total[c] > 0]
    scale = max(0.0, min(room, default=0.0))
    return [max(_MIN_H, m.cost * scale) for m in pmap.marks]


def _where(pmap: PrecisionMap, column: int) -> tuple[float, float, float]:
    """``(x, baseline y, width)`` of ``column``."""
    width = _col_width(pmap.columns, pmap.rows)
    per_row = math.ceil(pmap.columns / pmap.rows)
    row, k = divmod(column, per_row)
    base = _HEAD + row * _row_height(pmap.rows) + _ISLAND_LANE + _bar_height(pmap.rows)
    return _LEFT + k * width, base, width


def _head(pmap: PrecisionMap) -> list[str]:
    """The title line and the legend line: each dtype with its ops and share of the cost."""
    n_ops = sum(n for n, _ in pmap.share.values())
    total = sum(c for _, c in pmap.share.values()) or 1.0
    unit = pmap.costs.unit
    along = "depth" if pmap.depths_per_column == 1 else f"depth, {pmap.depths_per_column} depths a column"
    head = (f"Precision map{': ' + pmap.title if pmap.title else ''}: {n_ops} ops left to right by "
            f"{along}; height: {pmap.costs.basis}")
    out = [f'<text x="12" y="20" font-size="14" font-weight="bold">{html.escape(fit_text(head, MAP_WIDTH / 1.1))}</text>']
    x = 12.0
    order = sorted(pmap.share, key=lambda d: (d != pmap.target, d != "float32", d))
    for d in order:
        n, c = pmap.share[d]
        stroke = DTYPE_COLOURS.get(d, DTYPE_COLOURS["non-float"])[1]
        text = f"{d}: {n} ops" + (f", {100 * c / total:.1f}% of {unit}" if unit == "FLOPs" else "")
        out.append(f'<rect x="{x:.0f}" y="32" width="13" height="13" fill="{stroke}"/>'
                   f'<text x="{x + 18:.0f}" y="43">{html.escape(text)}</text>')
        x += 18 + _CHAR * len(text) + 22
    text = f"float32 island ({len(pmap.islands)}; hover for why)"
    out.append(f'<path d="M{x:.0f},33 l10,0 l-5,9 z" fill="{_ISLAND}"/><text x="{x + 15:.0f}" y="43">'
               f'{html.escape(text)}</text>')
    x += 15 + _CHAR * len(text) + 22
    out.append(f'<rect x="{x:.0f}" y="31" width="3" height="13" fill="#555"/><text x="{x + 9:.0f}" y="43">'
               f'cast ({sum(len(c.nodes) for c in pmap.casts)}; colour: dtype cast to)</text>')
    return out


def _groups(graph: Graph, pmap: PrecisionMap) -> dict[int, str]:
    """Each column's name group, to find one's way along depth: a word of its first op's
    name after the prefix all share, the first word that takes at least four values along
    the model (``stage2`` in a resnet, ``transformer3`` in BERT)."""
    first: dict[int, int] = {}
    for m in pmap.marks:
        first.setdefault(m.column, m.nodes[0])
    names = [graph.nodes[i].name for i in first.values()]
    prefix = min(names, default="")
    for name in names:
        while not name.startswith(prefix):
            prefix = prefix[:-1]
    cut = prefix.rfind("_") + 1
    words = {c: [w for w in graph.nodes[i].name[cut:].split("_") if w] for c, i in first.items()}
    level = 0
    while level < 2 and len({w[level] for w in words.values() if len(w) > level + 1}) < 4:
        level += 1
    return {c: w[level] if len(w) > level + 1 else "" for c, w in words.items()}


def _rows(pmap: PrecisionMap, graph: Graph) -> list[str]:
    """Each row's baseline, the depths at its ends and the name groups along it."""
    out = []
    per_row = math.ceil(pmap.columns / pmap.rows)
    width = _col_width(pmap.columns, pmap.rows)
    groups = _groups(graph, pmap)
    free, last = 0.0, ""
    for column in sorted(groups):   # a label where the name group changes and there is room
        x, base, _ = _where(pmap, column)
        if column % per_row == 0:
            free = 0.0
        fits = x + 6 * len(groups[column]) < MAP_WIDTH
        if groups[column] != last and x >= free and groups[column] and fits:
            out.append(f'<line x1="{x + 0.5:.1f}" y1="{base + 1:.1f}" x2="{x + 0.5:.1f}" y2="{base + _CAST_LANE + 4:.1f}" '
                       f'stroke="#bbb"/><text x="{x + 2:.1f}" y="{base + _CAST_LANE + 12:.1f}" fill="#666" '
                       f'font-size="10">{html.escape(groups[column])}</text>')
            free = x + 6 * len(groups[column]) + 10
        last = groups[column]
    for row in range(pmap.rows):
        first = row * per_row
        end = min(pmap.columns, first + per_row)
        x, base, _ = _where(pmap, first)
        d1 = end * pmap.depths_per_column - 1
        out.append(f'<line x1="{x:.1f}" y1="{base + 0.5:.1f}" x2="{x + (end - first) * width:.1f}" '
                   f'y2="{base + 0.5:.1f}" stroke="#999"/>')
        out.append(f'<text x="{x - 4:.0f}" y="{base + 4:.0f}" text-anchor="end" fill="#666" font-size="10">'
                   f'depth {first * pmap.depths_per_column}</text><text x="{x + (end - first) * width + 4:.0f}" '
                   f'y="{base + 4:.0f}" fill="#666" font-size="10">{d1}</text>')
    return out


def _marks_svg(pmap: PrecisionMap, graph: Graph) -> list[str]:
    """The op marks stacked up from each column's baseline, islands outlined and flagged."""
    out: list[str] = []
    top: dict[int, float] = {}
    for m, h in zip(pmap.marks, _heights(pmap, _bar_height(pmap.rows))):
        x, base, w = _where(pmap, m.column)
        y = top.get(m.column, base) - h
        top[m.column] = y
        fill = DTYPE_COLOURS.get(m.dtype, DTYPE_COLOURS["non-float"])[1]
        line = f' stroke="{_ISLAND}" stroke-width="1.5"' if m.island else ' stroke="white" stroke-width="0.5"'
        attrs = f'data-node="{m.nodes[0]}"' if len(m.nodes) == 1 else f'data-nodes="{len(m.nodes)}"'
        out.append(f'<g><title>{html.escape(m.title)}</title><rect {attrs} data-dtype="{m.dtype}" '
                   f'x="{x + 0.5:.1f}" y="{y:.1f}" width="{max(1.0, w - 1):.1f}" height="{h:.1f}" '
                   f'fill="{fill}"{line}/></g>')
    held: dict[int, list[int]] = {}
    for m in pmap.marks:
        if m.island:
            held.setdefault(m.column, []).extend(i for i in m.nodes if i in pmap.islands)
    for column, nodes in held.items():   # one flag above each column holding islands
        x, base, w = _where(pmap, column)
        tip = "\n".join(f"float32 island {graph.nodes[i].name} ({graph.nodes[i].op}): {pmap.islands[i]}"
                        for i in nodes[:8]) + (f"\n… {len(nodes) - 8} more" if len(nodes) > 8 else "")
        out.append(f'<g><title>{html.escape(tip)}</title><path data-island="{" ".join(map(str, nodes))}" '
                   f'd="M{x + w / 2 - 5:.1f},{top[column] - _ISLAND_LANE + 2:.1f} l10,0 l-5,9 z" '
                   f'fill="{_ISLAND}"/></g>')
    return out


def _casts_svg(pmap: PrecisionMap) -> list[str]:
    """A tick per cast under its column, side by side (two rows of them at most)."""
    out: list[str] = []
    seen: Counter[int] = Counter()
    for c in pmap.casts:
        x, base, w = _where(pmap, c.column)
        per_line = max(1, int(w / 3))
        line, k = divmod(seen[c.column], per_line)
        seen[c.column] += 1
        fill = DTYPE_COLOURS.get(c.dtype, DTYPE_COLOURS["non-float"])[1]
        attrs = f'data-cast="{c.nodes[0]}"' if len(c.nodes) == 1 else f'data-casts="{len(c.nodes)}"'
        out.append(f'<g><title>{html.escape(c.title)}</title><rect {attrs} data-dtype="{c.dtype}" '
                   f'x="{x + 0.5 + 3 * k:.1f}" y="{base + 3 + 5 * min(line, 1):.1f}" width="2" height="4" '
                   f'fill="{fill}"/></g>')
    return out


def _foot(pmap: PrecisionMap, y: float, graph: Graph) -> list[str]:
    """The islands' reasons in words, grouped (for a reader who does not hover)."""
    by_reason: dict[str, list[str]] = {}
    for i, why in pmap.islands.items():
        by_reason.setdefault(why, []).append(graph.nodes[i].name)
    out = []
    groups = sorted(by_reason.items(), key=lambda kv: -len(kv[1]))
    for k, (why, names) in enumerate(groups[:_FOOT_LINES]):
        more = len(groups) - _FOOT_LINES
        text = (f"{len(names)} float32 island{'s' if len(names) > 1 else ''}: {why} — " + ", ".join(names[:4])
                + (f" (+{len(names) - 4})" if len(names) > 4 else ""))
        if k == _FOOT_LINES - 1 and more > 0:
            text = f"… and {more + 1} more reasons (hover the ▼ marks)"
        out.append(f'<text x="12" y="{y + _LINE * (k + 1):.0f}" fill="#333">'
                   f'{html.escape(fit_text(text, MAP_WIDTH - 24))}</text>')
    return out


def precision_map_svg(conversion: Conversion, title: str = "", input_shapes: Mapping[str, tuple] | None = None,
                      pmap: PrecisionMap | None = None) -> str:
    """The precision map of ``conversion`` as a standalone SVG document, at most
    :data:`MAP_WIDTH` x :data:`MAP_MAX_HEIGHT` px.

    Each op mark is a ``rect`` with ``data-node`` (its node index; ``data-nodes``, a count,
    where a crowded column is drawn per dtype) and ``data-dtype``; each cast tick a ``rect``
    with ``data-cast``; each island flag a ``path`` with ``data-island``; each inside a
    ``<g>`` whose ``<title>`` is its hover text.
    """
    pmap = pmap if pmap is not None else precision_map(conversion, input_shapes, title=title)
    body = _head(pmap) + _rows(pmap, conversion.graph) + _marks_svg(pmap, conversion.graph) + _casts_svg(pmap)
    rows_end = _HEAD + pmap.rows * _row_height(pmap.rows)
    foot = _foot(pmap, rows_end, conversion.graph)
    height = math.ceil(rows_end + _LINE * len(foot) + 8)
    return "\n".join([f'<svg xmlns="http://www.w3.org/2000/svg" class="precision-map" width="{MAP_WIDTH}" '
                      f'height="{height}" viewBox="0 0 {MAP_WIDTH} {height}" '
                      'font-family="DejaVu Sans, Arial, sans-serif" font-size="12">',
                      '<rect width="100%" height="100%" fill="white"/>', *body, *foot, "</svg>"]) + "\n"


_ROOT = re.compile(r"<svg\b[^>]*>")


def _size(svg: str) -> tuple[float, float]:
    root = _ROOT.search(svg)
    found = dict(re.findall(r'\b(width|height)="([\d.]+)"', root.group(0) if root else ""))
    return float(found.get("width", 0)), float(found.get("height", 0))


def stacked_svg(top: str, bottom: str, gap: float = 16.0) -> str:
    """One SVG document showing ``top`` above ``bottom`` (each a standalone SVG document,
    kept whole as a nested ``<svg>``)."""
    (w1, h1), (w2, h2) = _size(top), _size(bottom)
    width, height = max(w1, w2), h1 + gap + h2
    inner = [doc[doc.index("<svg"):] for doc in (top, bottom)]
    lower = _ROOT.sub(lambda m: m.group(0)[:-1] + f' x="0" y="{h1 + gap:.0f}">', inner[1], count=1)
    return "\n".join([f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
                      f'viewBox="0 0 {width:.0f} {height:.0f}">', '<rect width="100%" height="100%" fill="white"/>',
                      inner[0].rstrip(), lower.rstrip(), "</svg>"]) + "\n"
