"""The precision map (:mod:`mxnet_amp.report.precision_map`) drawn as SVG, and one SVG
document showing it above the graph drawing (:func:`stacked_svg`).

Each op mark is a ``rect`` with ``data-node`` (its node index; ``data-nodes``, a count, where a
crowded column is drawn per dtype) and ``data-dtype``, a float32 island's outlined in red;
each cast tick a ``rect`` with ``data-cast``; each flag above a column holding islands a
``path`` with ``data-island`` (their node indices); each inside a ``<g>`` whose ``<title>`` is
its hover text. Over the rows: the title (the cost basis) and a legend with each dtype's
share of the ops and of the cost; under them the islands' reasons, grouped.
"""
from __future__ import annotations

import html
import math
import re
from collections import Counter
from typing import TYPE_CHECKING, Mapping

from ..ir.graph import Graph
from .layout import DTYPE_COLOURS, fit_text
from .precision_map import FOOT_LINES, LINE, MAP_WIDTH, PrecisionMap, precision_map

if TYPE_CHECKING:   # only annotations name it
    from ..record import Conversion

__all__ = ["precision_map_svg", "stacked_svg"]

_ISLAND = "#b00020"
_FLAG = 11.0              # px above a column's marks to its island flag
_LABEL_Y = 24.0           # px under a row's baseline to its name-group labels
_CHAR = 6.6               # px per character of 12px text, for placing the legend


def _head(pmap: PrecisionMap) -> list[str]:
    """The title line and the legend line: each dtype with its ops and share of the cost."""
    n_ops = sum(n for n, _ in pmap.share.values())
    total = sum(c for _, c in pmap.share.values()) or 1.0
    unit = pmap.costs.unit
    along = "depth" if pmap.depths_per_column == 1 else f"depth, {pmap.depths_per_column} depths a column"
    head = (f"Precision map{': ' + pmap.title if pmap.title else ''}: {n_ops} ops left to right by "
            f"{along}; height: {pmap.costs.basis}")
    out = [f'<text x="12" y="20" font-size="14" font-weight="bold">'
           f'{html.escape(fit_text(head, MAP_WIDTH / 1.1))}</text>']
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
    per_row = pmap.per_row()
    width = pmap.column_width()
    groups = _groups(graph, pmap)
    free, last = 0.0, ""
    for column in sorted(groups):   # a label where the name group changes (or soon after, for room)
        x, base, _ = pmap.where(column)
        if column % per_row == 0:
            free = 0.0
        fits = x >= free and x + 6 * len(groups[column]) < MAP_WIDTH
        if groups[column] != last and groups[column] and fits:
            out.append(f'<line x1="{x + 0.5:.1f}" y1="{base + 1:.1f}" x2="{x + 0.5:.1f}" '
                       f'y2="{base + _LABEL_Y - 8:.1f}" '
                       f'stroke="#bbb"/><text x="{x + 2:.1f}" y="{base + _LABEL_Y:.1f}" fill="#666" '
                       f'font-size="10">{html.escape(groups[column])}</text>')
            free = x + 6 * len(groups[column]) + 10
            last = groups[column]
    for row in range(pmap.rows):
        first = row * per_row
        end = min(pmap.columns, first + per_row)
        x, base, _ = pmap.where(first)
        d1 = min(pmap.depths, end * pmap.depths_per_column) - 1
        out.append(f'<line x1="{x:.1f}" y1="{base + 0.5:.1f}" x2="{x + (end - first) * width:.1f}" '
                   f'y2="{base + 0.5:.1f}" stroke="#999"/>')
        start = f'{"depth " if row == 0 else ""}{first * pmap.depths_per_column}'
        out.append(f'<text x="{x - 4:.0f}" y="{base + 4:.0f}" text-anchor="end" fill="#666" font-size="10">'
                   f'{start}</text><text x="{x + (end - first) * width + 4:.0f}" '
                   f'y="{base + 4:.0f}" fill="#666" font-size="10">{d1}</text>')
    return out


def _marks_svg(pmap: PrecisionMap, graph: Graph) -> list[str]:
    """The op marks stacked up from each column's baseline, islands outlined and flagged."""
    out: list[str] = []
    top: dict[int, float] = {}
    for m, h in zip(pmap.marks, pmap.heights()):
        x, base, w = pmap.where(m.column)
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
        x, base, w = pmap.where(column)
        tip = "\n".join(f"float32 island {graph.nodes[i].name} ({graph.nodes[i].op}): {pmap.islands[i]}"
                        for i in nodes[:8]) + (f"\n… {len(nodes) - 8} more" if len(nodes) > 8 else "")
        out.append(f'<g><title>{html.escape(tip)}</title><path data-island="{" ".join(map(str, nodes))}" '
                   f'd="M{x + w / 2 - 5:.1f},{top[column] - _FLAG:.1f} l10,0 l-5,9 z" '
                   f'fill="{_ISLAND}"/></g>')
    return out


def _casts_svg(pmap: PrecisionMap) -> list[str]:
    """A tick per cast under its column, side by side (two rows of them at most)."""
    out: list[str] = []
    seen: Counter[int] = Counter()
    for c in pmap.casts:
        x, base, w = pmap.where(c.column)
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
    for k, (why, names) in enumerate(groups[:FOOT_LINES]):
        more = len(groups) - FOOT_LINES
        text = (f"{len(names)} float32 island{'s' if len(names) > 1 else ''}: {why} — " + ", ".join(names[:4])
                + (f" (+{len(names) - 4})" if len(names) > 4 else ""))
        if k == FOOT_LINES - 1 and more > 0:
            text = f"… and {more + 1} more reasons (hover the ▼ marks)"
        out.append(f'<text x="12" y="{y + LINE * (k + 1):.0f}" fill="#333">'
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
    rows_end = pmap.rows_end()
    foot = _foot(pmap, rows_end, conversion.graph)
    height = math.ceil(rows_end + LINE * len(foot) + 8)
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
