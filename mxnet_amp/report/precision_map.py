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

:func:`precision_map` computes the marks and where they go;
:mod:`mxnet_amp.report.precision_svg` draws them.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, NamedTuple, Sequence

from ..ir.graph import CAST_OPS, Graph
from .model import build_report
from .op_costs import Costs, op_costs
from .picture import fp32_islands, node_dtypes

if TYPE_CHECKING:   # only annotations name it
    from ..record import Conversion

__all__ = ["Slot", "Mark", "CastMark", "PrecisionMap", "op_depths", "precision_map", "MAP_WIDTH", "MAP_MAX_HEIGHT",
           "FOOT_LINES", "LINE"]

MAP_WIDTH = 1320          # fits a 1,400 px browser window with the page's margins and a scrollbar
MAP_MAX_HEIGHT = 640      # with the page title, fits a 900 px window
_MAX_ROWS = 4
_MIN_COL, _MAX_COL = 5.0, 30.0    # px per depth column
_LEFT, _RIGHT = 56.0, 34.0
_HEAD = 62.0              # px: the title and the legend
_ISLAND_LANE, _CAST_LANE, _ROW_GAP = 13.0, 12.0, 24.0
_MIN_H = 4.0              # px: the smallest mark, so a cheap op's dtype is still seen
FOOT_LINES, LINE = 4, 16.0   # lines of text under the rows (the islands' reasons), px each


class Slot(NamedTuple):
    """Where a column's marks stand, in px (unpacks as ``(x, base, width)``)."""

    x: float
    base: float   # the baseline y the marks rise from
    width: float


class _Grid(NamedTuple):
    """How the map's depths are laid out within its width."""

    columns: int
    per_column: int   # depths per column
    rows: int


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
        Columns along depth; ``depths_per_column`` depths each (1 unless binned) of the
        model's ``depths``.
    islands : mapping of int to str
        Each float32 island node -> why it is float32.
    share : mapping of str to (int, float)
        Per dtype: op nodes and their summed cost.
    """

    marks: tuple[Mark, ...]
    casts: tuple[CastMark, ...]
    columns: int
    depths_per_column: int
    depths: int
    rows: int
    costs: Costs
    islands: Mapping[int, str]
    share: Mapping[str, tuple[int, float]]
    target: str
    title: str

    def column_width(self) -> float:
        """px of one column."""
        return _col_width(self.columns, self.rows)

    def bar_height(self) -> float:
        """px the fullest column's marks fill."""
        return _bar_height(self.rows)

    def rows_end(self) -> float:
        """y (px) under the last row, where the text under the map starts."""
        return _HEAD + self.rows * _row_height(self.rows)

    def where(self, column: int) -> Slot:
        """Where ``column`` stands (rows wrap left to right)."""
        width = self.column_width()
        row, k = divmod(column, self.per_row())
        base = _HEAD + row * _row_height(self.rows) + _ISLAND_LANE + _bar_height(self.rows)
        return Slot(_LEFT + k * width, base, width)

    def per_row(self) -> int:
        """Columns in a row."""
        return math.ceil(self.columns / self.rows)

    def heights(self) -> list[float]:
        """Each mark's height: its cost times one scale for the whole map (the fullest
        column fills :meth:`bar_height`), at least the smallest mark's."""
        total: dict[int, float] = {}
        count: Counter[int] = Counter()
        for m in self.marks:
            total[m.column] = total.get(m.column, 0.0) + m.cost
            count[m.column] += 1
        bar = self.bar_height()
        room = [(bar - _MIN_H * count[c]) / total[c] for c in total if total[c] > 0]
        scale = max(0.0, min(room, default=0.0))
        return [max(_MIN_H, m.cost * scale) for m in self.marks]


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


def _grid(n_depths: int) -> _Grid:
    """The layout of ``n_depths`` depths within the width."""
    per_row = int((MAP_WIDTH - _LEFT - _RIGHT) / _MIN_COL)
    per = max(1, math.ceil(n_depths / (per_row * _MAX_ROWS)))
    columns = max(1, math.ceil(n_depths / per))
    return _Grid(columns, per, min(_MAX_ROWS, math.ceil(columns / per_row)))


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
    n_depths = max((depth[i] for i in ops), default=0) + 1
    columns, per, rows = _grid(n_depths)
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
    return PrecisionMap(tuple(marks), tuple(casts), columns, per, n_depths, rows, costs, island_reasons, share,
                        target, title)


# --- geometry ---------------------------------------------------------------------------------

def _col_width(columns: int, rows: int) -> float:
    return min(_MAX_COL, (MAP_WIDTH - _LEFT - _RIGHT) / max(1, math.ceil(columns / rows)))


def _row_height(rows: int) -> float:
    return min(220.0, (MAP_MAX_HEIGHT - _HEAD - LINE * (FOOT_LINES + 1)) / rows)


def _bar_height(rows: int) -> float:
    return _row_height(rows) - _ISLAND_LANE - _CAST_LANE - _ROW_GAP
