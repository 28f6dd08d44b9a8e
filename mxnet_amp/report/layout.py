"""Where each box of a :class:`~mxnet_amp.report.picture.Picture` sits, and the path of each edge.

:func:`layout` puts boxes in layers and routes every edge through the gaps between layers
and through lanes reserved in the layers it crosses, so no edge runs under a box it does
not connect. Text sizes are estimated (no font metrics): :func:`box_lines` gives each box's
text, :func:`fit_text` cuts a line to a width.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from .picture import Box, Picture

__all__ = ["Layout", "layout", "box_lines", "fit_text", "FONT_SIZE", "CHAR_WIDTH", "LINE_HEIGHT", "DTYPE_COLOURS"]

# dtype -> (fill, stroke) in every picture of a conversion (the graph, the precision map);
# 'non-float' covers integer and boolean tensors
DTYPE_COLOURS = {
    "float32": ("#dbe9f6", "#3c7bb8"),
    "bfloat16": ("#fde0c5", "#e6550d"),
    "float16": ("#dcf0d6", "#2f9a4a"),
    "float64": ("#e8e4f3", "#6a51a3"),
    "non-float": ("#eeeeee", "#8a8a8a"),
}

FONT_SIZE = 12
CHAR_WIDTH = 6.9   # average glyph width of 12px sans-serif, for fitting text
LINE_HEIGHT = 16
_BOX_TEXT_CHARS = (440 - 14) / CHAR_WIDTH   # characters that fit on a line of a collapsed box


def fit_text(text: str, width: float) -> str:
    """``text`` cut (ending in an ellipsis) to what fits ``width`` pixels."""
    n = int(width / CHAR_WIDTH)
    return text if len(text) <= n else text[:max(1, n - 1)] + "…"


def box_lines(box: Box, target: str) -> list[str]:
    """The text lines of ``box``: its title, then what it holds (dtype, op counts)."""
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


_BOX_MAX_W = 600.0
_MAX_WIDTH = 1800    # a layer holds boxes up to about this width; more go to later layers
_GAP_X, _GAP_Y, _LANE = 24, 44, 14
_TOP = 70


@dataclass
class Layout:
    """Where each box sits and the path of each edge (see :func:`layout`)."""

    geom: dict             # box -> (x, y, w, h)
    lines: list            # box -> its text lines
    paths: list            # per edge of the picture: SVG path data
    width: float
    height: float


def _layers(pic: Picture, widths: list[float]) -> list[int]:
    """A layer per box: below every predecessor, and a later layer when the natural one is
    already ``_MAX_WIDTH`` wide. Boxes with no drawn predecessor (weight casts) sit right
    above their first reader instead of at the top."""
    n = len(pic.boxes)
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for u, v, _ in pic.edges:
        preds[v].append(u)
        succs[u].append(v)
    floating = {b for b in range(n) if not preds[b] and succs[b] and pic.boxes[b].kind == "cast"}
    layer = [0] * n
    used: dict[int, float] = {}
    for b in range(n):    # boxes are in topological order
        if b in floating:
            continue
        fixed = [layer[p] + 1 for p in preds[b] if p not in floating]
        lay = max(fixed + [1 if any(p in floating for p in preds[b]) else 0])
        while used.get(lay, 0) and used[lay] + widths[b] > _MAX_WIDTH:
            lay += 1
        layer[b] = lay
        used[lay] = used.get(lay, 0) + widths[b] + _GAP_X
    for b in floating:
        layer[b] = min(layer[v] for v in succs[b]) - 1
    return layer


def layout(pic: Picture, target: str) -> Layout:
    """Layered layout with edges routed between boxes, never across one.

    Each box gets a layer (:func:`_layers`); an edge spanning several layers gets a lane in
    each layer it passes, reserved like a narrow box. An edge runs down from its source to
    the bottom of the source's layer band, crosses each gap between bands as a curve that
    stays inside the gap, runs down its lane through each band it passes, and enters its
    target from the top. Bands hold one row of boxes and gaps hold none, so no edge passes
    through a box it does not connect.
    """
    n = len(pic.boxes)
    lines = [box_lines(box, target) for box in pic.boxes]
    # wide enough for the name (bold, so wider glyphs) up to a limit: a cut name names nothing
    widths = [min(_BOX_MAX_W, max(440.0 if box.kind == "group" else 210.0,
                                  20 + CHAR_WIDTH * max(1.12 * len(ls[0]), len(ls[1]) if len(ls) > 1 else 0)))
              for box, ls in zip(pic.boxes, lines)]
    heights = [10 + LINE_HEIGHT * len(ls) + (10 if box.kind == "group" else 0)
               for box, ls in zip(pic.boxes, lines)]
    layer = _layers(pic, widths)
    # slots: boxes and edge lanes, per layer; a lane is ('lane', edge index, layer)
    slots: dict[int, list] = {}
    for b in range(n):
        slots.setdefault(layer[b], []).append(("box", b))
    for k, (u, v, _) in enumerate(pic.edges):
        for lay in range(layer[u] + 1, layer[v]):
            slots.setdefault(lay, []).append(("lane", k, lay))
    n_layers = max(slots) + 1 if slots else 0
    width_of = {("box", b): widths[b] for b in range(n)}
    x_mid = _place_rows(pic, layer, slots, n_layers, width_of)
    band_h = {lay: max([heights[sl[1]] for sl in slots.get(lay, []) if sl[0] == "box"] + [0])
              for lay in range(n_layers)}
    y_top, y = {}, float(_TOP)
    for lay in range(n_layers):
        y_top[lay] = y
        y += band_h[lay] + _GAP_Y
    geom = {b: (x_mid[("box", b)] - widths[b] / 2, y_top[layer[b]], widths[b], heights[b]) for b in range(n)}
    # where edges leave and enter a box: spread along its bottom / top, in the order of
    # the other end, so that neighbouring edges do not cross at the box
    outs: dict[int, list[int]] = {}
    ins: dict[int, list[int]] = {}
    for k, (u, v, _) in enumerate(pic.edges):
        outs.setdefault(u, []).append(k)
        ins.setdefault(v, []).append(k)
    out_x = _spread(outs, geom, lambda k: x_mid[_next_slot(pic.edges[k], k, layer)])
    in_x = _spread(ins, geom, lambda k: x_mid[_prev_slot(pic.edges[k], k, layer)])
    paths = [_edge_path(k, u, v, layer, geom, x_mid, y_top, band_h, out_x, in_x)
             for k, (u, v, _) in enumerate(pic.edges)]
    width = max([x_mid[sl] + width_of.get(sl, _LANE) / 2 for sl in x_mid] + [0.0]) + 20
    width = max(width, 20 + CHAR_WIDTH * 1.25 * len(pic.title) + 20, 760 if pic.collapsed else 520)
    return Layout(geom, lines, paths, width, y + 10 - _GAP_Y + 10)


def _place_rows(pic: Picture, layer: list[int], slots: dict, n_layers: int, width_of: dict) -> dict:
    """The x centre of each slot (box or edge lane), row by row."""
    x_mid: dict = {}
    preds_of: dict = {}
    for k, (u, v, _) in enumerate(pic.edges):
        chain = [("box", u)] + [("lane", k, lay) for lay in range(layer[u] + 1, layer[v])] + [("box", v)]
        for a, b in zip(chain, chain[1:]):
            preds_of.setdefault(b, []).append(a)
    for lay in range(n_layers):
        row = slots.get(lay, [])
        # order by the mean position of what feeds each slot (barycentre), ties by index
        want = {}
        for k, slot in enumerate(row):
            xs = [x_mid[p] for p in preds_of.get(slot, ()) if p in x_mid]
            want[slot] = sum(xs) / len(xs) if xs else k * (_GAP_X + 200)
        row.sort(key=lambda sl: (want[sl], sl[1]))
        # place at the wanted centres, pushed apart so nothing overlaps, then pushed back
        # left into [0, limit] so that no row is wider than it must be
        gaps = [_GAP_X if a[0] == b[0] == "box" else 8 for a, b in zip(row, row[1:])]
        limit = max(_MAX_WIDTH, sum(width_of.get(sl, _LANE) for sl in row) + sum(gaps))
        right = None
        for k, slot in enumerate(row):
            w = width_of.get(slot, _LANE)
            left = max(want[slot] - w / 2, 0.0 if right is None else right + gaps[k - 1])
            x_mid[slot] = left + w / 2
            right = left + w
        for k in range(len(row) - 1, -1, -1):
            w = width_of.get(row[k], _LANE)
            x_mid[row[k]] = min(x_mid[row[k]] + w / 2, limit) - w / 2
            limit = x_mid[row[k]] - w / 2 - (gaps[k - 1] if k else 0)
    for sl in x_mid:
        x_mid[sl] += 20
    return x_mid


def _edge_path(k: int, u: int, v: int, layer: list[int], geom: dict, x_mid: dict, y_top: Mapping[int, float],
               band_h: Mapping[int, float], out_x: dict, in_x: dict) -> str:
    """SVG path of edge ``k`` from box ``u`` to box ``v`` (see :func:`layout`)."""
    x, yu, w, h = geom[u]
    px, py = out_x[k], yu + h
    bottom = y_top[layer[u]] + band_h[layer[u]]
    d = [f"M{px:.1f},{py:.1f}"]
    if bottom > py:
        d.append(f"L{px:.1f},{bottom:.1f}")
    py = bottom
    for lay in range(layer[u] + 1, layer[v] + 1):
        nx = in_x[k] if lay == layer[v] else x_mid[("lane", k, lay)]
        top = y_top[lay]
        mid = (py + top) / 2
        d.append(f"C{px:.1f},{mid:.1f} {nx:.1f},{mid:.1f} {nx:.1f},{top:.1f}")
        px, py = nx, top
        if lay != layer[v]:
            py = top + band_h[lay]
            d.append(f"L{px:.1f},{py:.1f}")
    return " ".join(d)


def _spread(edges_at: dict, geom: dict, other_end: Callable[[int], float]) -> dict:
    """x of each edge along its box's border, spread evenly in the order of ``other_end``."""
    out = {}
    for b, ks in edges_at.items():
        x, _, w, _ = geom[b]
        for m, k in enumerate(sorted(ks, key=other_end)):
            out[k] = x + w * (m + 1) / (len(ks) + 1)
    return out


def _next_slot(edge: tuple[int, int, str], k: int, layer: list[int]) -> tuple:
    u, v, _ = edge
    return ("lane", k, layer[u] + 1) if layer[v] - layer[u] > 1 else ("box", v)


def _prev_slot(edge: tuple[int, int, str], k: int, layer: list[int]) -> tuple:
    u, v, _ = edge
    return ("lane", k, layer[v] - 1) if layer[v] - layer[u] > 1 else ("box", u)
