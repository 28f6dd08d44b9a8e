"""The converted graph as a picture: each node coloured by the dtype it computes in.

No system binary needed: :func:`graph_svg` lays the graph out itself and writes SVG;
:func:`graph_dot` writes the same picture as graphviz DOT for users who have ``dot``.

Small graphs are drawn node by node (any graph with ``detail_limit=None``). Large ones (a
resnet50 has ~170 op nodes and ~90 casts) are collapsed so they stay readable: the node
sequence is cut at *cut points*, nodes no edge jumps over (in a resnet, the activation
closing each residual block), so each piece is a block; consecutive identical blocks become
one box marked ``× N``, and runs of single nodes become one box per name group
(``stage1_…``). A block mixing float32 and low precision is split into runs of one dtype,
and a float32 node next to a low precision one is a box of its own, so the picture names
every such node. Each box lists its op counts per dtype, is filled with the colour of its
majority dtype and carries a bar showing the dtype mix.

The layout (:func:`_layout`) puts boxes in layers and routes every edge through the gaps
between layers and through lanes reserved in the layers it crosses, so no edge runs under
a box it does not connect.
"""
from __future__ import annotations

import html
import os
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from .dtypes import is_float
from .errors import DrawError
from .graph import CAST_OPS, Entry, Graph, Node
from .passes.insert_casts import MULTICAST

if TYPE_CHECKING:   # only annotations name it
    from .convert import Conversion

__all__ = ["Box", "Picture", "DrawError", "collapse", "graph_svg", "graph_dot", "write_graph",
           "check_graph_path", "node_dtypes", "fp32_islands",
           "DTYPE_COLOURS"]

# dtype -> (fill, stroke); 'non-float' covers integer and boolean tensors
DTYPE_COLOURS = {
    "float32": ("#dbe9f6", "#3c7bb8"),
    "bfloat16": ("#fde0c5", "#e6550d"),
    "float16": ("#dcf0d6", "#2f9a4a"),
    "float64": ("#e8e4f3", "#6a51a3"),
    "non-float": ("#eeeeee", "#8a8a8a"),
}


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
    return dtype if dtype is not None and is_float(dtype) else "non-float"


def node_dtypes(conversion: Conversion) -> list[str]:
    """The dtype each node of ``conversion.graph`` computes in (its first float output), as
    the pass decided it (``'non-float'`` for the others)."""
    result = conversion.result
    out: list[str] = []
    for i, node in enumerate(conversion.graph.nodes):
        if node.name in result.node_dtypes:
            dt = result.node_dtypes[node.name]
        else:
            # a variable (undecided: float32 until bound) or a cast the pass inserted
            dt = result.tensor_dtypes.get(Entry(i)) or ("float32" if node.is_variable else None)
        out.append(_dtype_key(dt))
    return out


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


def _unprefixed(name: str, prefix: str) -> str:
    return name[len(prefix):] if name.startswith(prefix) else name


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


def _make_box(graph: Graph, idx: Sequence[int], dtypes: list[str], title: str, repeat: int = 1,
              kind: str = "group") -> Box:
    ops: Counter[str] = Counter()
    per: Counter[str] = Counter()
    casts = 0
    for i in idx:
        node = graph.nodes[i]
        if node.op in CAST_OPS:
            casts += 1
        elif not node.is_variable:
            ops[node.op] += 1
            per[dtypes[i]] += 1
    if per:
        majority = max(per.items(), key=lambda kv: (kv[1], kv[0] != "float32"))[0]
    else:
        majority = dtypes[idx[0]]
    return Box(title, tuple(idx), dict(per), dict(ops), casts, repeat, kind, majority)


def _folded_title(title: str, conversion: Conversion) -> str:
    """``title`` saying how many BatchNorms were folded and the input's op node count (the
    picture shows the folded graph)."""
    folded, figures = conversion.folded_batchnorms, conversion.input_figures
    if not folded or figures is None:
        return title
    note = f"{len(folded)} BatchNorms folded (input: {figures['op_nodes']} op nodes)"
    return f"{title}, {note}" if title else note


def collapse(conversion: Conversion, detail_limit: int | None = 80, max_boxes: int = 48, title: str = "") -> Picture:
    """The boxes and edges to draw for ``conversion`` (see the module doc).

    Graphs with at most ``detail_limit`` drawn nodes (op nodes, casts and model inputs) are
    drawn node by node (``None``: always); larger ones are collapsed to about ``max_boxes``
    boxes. A collapsed box never mixes float32 and low precision op nodes, and a float32
    node next to a low precision one (through casts) is always a box of its own, named.
    """
    title = _folded_title(title, conversion)
    graph = conversion.graph
    dtypes = node_dtypes(conversion)
    data = set(conversion.data_names)
    drawn = [i for i, n in enumerate(graph.nodes) if not n.is_variable or n.name in data]
    drawn_set = set(drawn)
    prefix = _common_prefix([graph.nodes[i].name for i in drawn if not graph.nodes[i].is_variable
                             and graph.nodes[i].op not in CAST_OPS])
    short = {i: _unprefixed(graph.nodes[i].name, prefix) for i in drawn}
    node_edges = sorted({(e.node, i) for i in drawn if not graph.nodes[i].is_variable
                         for e in graph.nodes[i].inputs if e.node in drawn_set})
    casts = conversion.result.inserted_casts
    title = _title(title, graph, dtypes, conversion.policy.target_dtype, len(casts))
    if detail_limit is None or len(drawn) <= detail_limit:
        return _detailed(graph, drawn, dtypes, prefix, short, node_edges, title)
    keys = {i: _group_key(_unprefixed(_owner_name(graph, casts, i), prefix)) for i in drawn}
    groups = _repeat_groups(graph, _segments(drawn, node_edges), dtypes, keys, drawn_set)
    target = conversion.policy.target_dtype
    islands = fp32_islands(graph, dtypes, target)
    split: list[tuple[list[int], int, list[int]]] = []
    for block, n, every in groups:
        if _mixed(graph, every, dtypes, target):
            split += [(run, 1, run) for run in _dtype_runs(graph, every, dtypes, islands)]
        else:
            split.append((block, n, every))
    groups = _merge_to(split, max_boxes, lambda g: _run_class(graph, g[2], dtypes, islands))
    return _collapsed(graph, groups, dtypes, short, keys, node_edges, title)


def _owner_name(graph: Graph, casts: Mapping[int, str], i: int) -> str:
    """The name of the node that node ``i`` is grouped with: itself, or for a cast the
    conversion inserted (``casts``: ``CastResult.inserted_casts``) the node whose output it
    casts (an amp_cast, a fusion barrier) or that it was put in for (an amp_multicast
    unifies one op's inputs: that op, its reader)."""
    kind = casts.get(i)
    if kind is None:
        return graph.nodes[i].name
    if kind == MULTICAST:
        readers = graph.consumers()[i]
        return graph.nodes[readers[0][0]].name if readers else graph.nodes[i].name
    return graph.nodes[graph.nodes[i].inputs[0].node].name


def _title(name: str, graph: Graph, dtypes: list[str], target: str, n_casts: int) -> str:
    """``name: 348 op nodes: 208 bfloat16, 140 float32; 35 casts inserted`` (how many
    compute in which dtype: "in bfloat16 mixed precision" read as all of them)."""
    per = Counter(dtypes[i] for i, n in enumerate(graph.nodes)
                  if not n.is_variable and n.op not in CAST_OPS)
    order = sorted(per, key=lambda d: (d != target, d != "float32", d))
    summary = (f"{sum(per.values())} op nodes: " + ", ".join(f"{per[d]} {d}" for d in order)
               + f"; {n_casts} casts inserted")
    return f"{name}: {summary}" if name else summary


def _box_kind(node: Node) -> str:
    return "input" if node.is_variable else "cast" if node.op in CAST_OPS else "op"


def _detailed(graph: Graph, drawn: Sequence[int], dtypes: list[str], prefix: str, short: Mapping[int, str],
              node_edges: Sequence[tuple[int, int]], title: str) -> Picture:
    """One box per drawn node."""
    boxes: list[Box] = []
    where: dict[int, int] = {}
    for i in drawn:
        node = graph.nodes[i]
        kind = _box_kind(node)
        where[i] = len(boxes)
        if kind == "cast" and graph.nodes[node.inputs[0].node].is_variable:
            var = graph.nodes[node.inputs[0].node].name
            label = f"cast {_unprefixed(var, prefix)}"
        else:
            label = node.op if kind == "cast" else short[i]
        boxes.append(Box(label, (i,), {dtypes[i]: 1} if kind == "op" else {},
                         {node.op: 1} if kind == "op" else {}, int(kind == "cast"), 1, kind,
                         dtypes[i]))
    edges = tuple((where[u], where[v], dtypes[u]) for u, v in node_edges)
    return Picture(tuple(boxes), edges, False, title)


def _segments(drawn: list[int], node_edges: Sequence[tuple[int, int]]) -> list[list[int]]:
    """``drawn`` cut at the positions no edge jumps over."""
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
    return segments


def _core(graph: Graph, seg: Sequence[int]) -> list[int]:
    return [i for i in seg if graph.nodes[i].op not in CAST_OPS]


def _repeat_groups(graph: Graph, segments: list[list[int]], dtypes: list[str], keys: Mapping[int, str],
                   drawn_set: set[int]) -> list[tuple[list[int], int, list[int]]]:
    """(nodes of one block, repeat count, every node the group stands for) for each group
    (``keys``: each drawn node's name group, as :func:`_group_key` gives it)."""
    def signature(seg):
        local = {i: k for k, i in enumerate(seg)}
        return tuple((graph.nodes[i].op, dtypes[i],
                      tuple(local.get(e.node, -1) for e in graph.nodes[i].inputs if e.node in drawn_set))
                     for i in seg)

    # units: a multi-node block with the single nodes of its name group that follow it (the
    # activation after a residual add), or a run of single nodes of one name group
    units: list[tuple[list[int], bool]] = []   # (nodes, is a block)
    for seg in segments:
        ops = _core(graph, seg)
        if len(ops) > 1:
            units.append((list(seg), True))
        elif units and (keys[units[-1][0][-1]] == keys[seg[-1]] or not ops):
            units[-1][0].extend(seg)
        else:
            units.append((list(seg), False))
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
    return groups


def _collapsed(graph: Graph, groups: list[tuple[list[int], int, list[int]]], dtypes: list[str],
               short: Mapping[int, str], keys: Mapping[int, str], node_edges: Sequence[tuple[int, int]],
               title: str) -> Picture:
    """One box per group; edges between boxes."""
    boxes: list[Box] = []
    box_of = {}
    for block, n, every in groups:
        names = [short[i] for i in _core(graph, every)] or [short[i] for i in every]
        kind = "group"
        if len(block) == 1:
            node = graph.nodes[block[0]]
            kind = _box_kind(node)
            label = node.op if kind == "cast" else names[0]
        else:
            label = _range_label(names)
        if n > 1:
            ops = _core(graph, every) or every
            first, last = keys[ops[0]], keys[ops[-1]]
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


def fp32_islands(graph: Graph, dtypes: list[str], target: str) -> set[int]:
    """The float32 op nodes in low precision surroundings: those that read from or feed a
    ``target`` op node (directly or through casts). The picture names each of them.

    Parameters
    ----------
    graph : Graph
        The converted graph (``Conversion.graph``).
    dtypes : list of str
        The dtype of each node, as :func:`node_dtypes` gives it.
    target : str
        The low precision dtype.

    Returns
    -------
    set of int
        Node indices.
    """
    consumers: dict[int, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        for e in node.inputs:
            consumers.setdefault(e.node, []).append(i)

    def ops_near(i):
        seen, stack, out = {i}, [i], []
        while stack:
            j = stack.pop()
            near = [e.node for e in graph.nodes[j].inputs] + consumers.get(j, [])
            for k in near:
                if k in seen:
                    continue
                seen.add(k)
                if graph.nodes[k].op in CAST_OPS:
                    stack.append(k)
                elif not graph.nodes[k].is_variable:
                    out.append(k)
        return out
    return {i for i, node in enumerate(graph.nodes)
            if not node.is_variable and node.op not in CAST_OPS and dtypes[i] == "float32"
            and any(dtypes[k] == target for k in ops_near(i))}


def _mixed(graph: Graph, nodes: Sequence[int], dtypes: list[str], target: str) -> bool:
    have = {dtypes[i] for i in nodes if not graph.nodes[i].is_variable and graph.nodes[i].op not in CAST_OPS}
    return "float32" in have and target in have


def _dtype_runs(graph: Graph, nodes: list[int], dtypes: list[str], islands: set[int]) -> list[list[int]]:
    """``nodes`` (a stretch of a topological order) reordered so that nodes of one dtype come
    together, then cut into runs of one dtype; each island is a run of its own. A cast
    joins the run of the node that reads it. Every run is still a stretch of a topological
    order, so edges between runs only go forward."""
    inside = set(nodes)
    pending = {i: sum(1 for e in graph.nodes[i].inputs if e.node in inside) for i in nodes}
    consumers: dict[int, list[int]] = {}
    for i in nodes:
        for e in graph.nodes[i].inputs:
            if e.node in inside:
                consumers.setdefault(e.node, []).append(i)
    rank = {i: k for k, i in enumerate(nodes)}

    def cls(i):
        node = graph.nodes[i]
        if node.op in CAST_OPS or node.is_variable:
            return None
        return ("island", i) if i in islands else dtypes[i]
    ready = [i for i in nodes if pending[i] == 0]
    order: list[int] = []
    current = None
    while ready:
        # casts first (they join what reads them), then more of the current dtype
        pick = min(ready, key=lambda i: (cls(i) is not None, cls(i) != current, rank[i]))
        ready.remove(pick)
        order.append(pick)
        if cls(pick) is not None:
            current = cls(pick)
        for c in consumers.get(pick, ()):
            pending[c] -= 1
            if pending[c] == 0:
                ready.append(c)
    runs: list[list[int]] = []
    held: list[int] = []          # casts waiting for the node that reads them
    last = None
    for i in order:
        c = cls(i)
        if c is None:
            held.append(i)
            continue
        if runs and c == last and not isinstance(c, tuple):
            runs[-1] += held + [i]
        else:
            runs.append(held + [i])
        held = []
        last = c
    if held:
        if runs:
            runs[-1] += held
        else:
            runs.append(held)
    return runs


def _run_class(graph: Graph, nodes: Sequence[int], dtypes: list[str], islands: set[int]) -> object:
    """What a group may be merged with: groups of the same class (None: never)."""
    ops = [i for i in nodes if not graph.nodes[i].is_variable and graph.nodes[i].op not in CAST_OPS]
    if any(i in islands for i in ops):
        return None
    kinds = {dtypes[i] for i in ops}
    return next(iter(kinds)) if len(kinds) == 1 else ("mixed",)


def _merge_to(groups: list, max_boxes: int, klass: Callable[[Any], object]) -> list:
    """Merge neighbouring groups of one class pairwise (chain order kept) until at most
    ``max_boxes`` remain or nothing more may merge."""
    while len(groups) > max_boxes:
        out, k, merged = [], 0, False
        while k < len(groups):
            a = groups[k]
            b = groups[k + 1] if k + 1 < len(groups) else None
            ka = klass(a)
            if b is not None and ka is not None and ka == klass(b):
                every = a[2] + b[2]
                out.append((every, 1, every))
                k += 2
                merged = True
            else:
                out.append(a)
                k += 1
        groups = out
        if not merged:
            break
    return groups


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


_BOX_MAX_W = 600.0
_MAX_WIDTH = 1800    # a layer holds boxes up to about this width; more go to later layers
_GAP_X, _GAP_Y, _LANE = 24, 44, 14
_TOP = 70


@dataclass
class _Layout:
    """Where each box sits and the path of each edge (see :func:`_layout`)."""

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


def _layout(pic: Picture, target: str) -> _Layout:
    """Layered layout with edges routed between boxes, never across one.

    Each box gets a layer (:func:`_layers`); an edge spanning several layers gets a lane in
    each layer it passes, reserved like a narrow box. An edge runs down from its source to
    the bottom of the source's layer band, crosses each gap between bands as a curve that
    stays inside the gap, runs down its lane through each band it passes, and enters its
    target from the top. Bands hold one row of boxes and gaps hold none, so no edge passes
    through a box it does not connect.
    """
    n = len(pic.boxes)
    lines = [_box_lines(box, target) for box in pic.boxes]
    # wide enough for the name (bold, so wider glyphs) up to a limit: a cut name names nothing
    widths = [min(_BOX_MAX_W, max(440.0 if box.kind == "group" else 210.0,
                                  20 + _CHAR_W * max(1.12 * len(ls[0]), len(ls[1]) if len(ls) > 1 else 0)))
              for box, ls in zip(pic.boxes, lines)]
    heights = [10 + _LINE_H * len(ls) + (10 if box.kind == "group" else 0)
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
    width = max(width, 20 + _CHAR_W * 1.25 * len(pic.title) + 20, 760 if pic.collapsed else 520)
    return _Layout(geom, lines, paths, width, y + 10 - _GAP_Y + 10)


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
    """SVG path of edge ``k`` from box ``u`` to box ``v`` (see :func:`_layout`)."""
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


def graph_svg(conversion: Conversion, title: str = "", detail_limit: int | None = 80, max_boxes: int = 48) -> str:
    """The picture of ``conversion`` as a standalone SVG document (text).

    Parameters
    ----------
    conversion : mxnet_amp.convert.Conversion
    title : str
        Shown above the picture, before the summary.
    detail_limit : int or None, default 80
        Graphs with more drawn nodes are collapsed into blocks; None draws every node.
    max_boxes : int, default 48
        About how many boxes a collapsed picture may have.

    Returns
    -------
    str
        Each box is a ``<g>`` whose ``rect`` carries ``data-box`` (its index) and each
        edge a ``path`` with ``data-edge="SRC DST"`` (box indices).
    """
    pic = collapse(conversion, detail_limit, max_boxes, title)
    target = conversion.policy.target_dtype
    lay = _layout(pic, target)
    geom, lines, width, height = lay.geom, lay.lines, lay.width, lay.height
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
    for (u, v, dt), d in zip(pic.edges, lay.paths):
        stroke = DTYPE_COLOURS.get(dt, DTYPE_COLOURS["non-float"])[1]
        out.append(f'<path d="{d}" data-edge="{u} {v}" fill="none" stroke="{stroke}" stroke-width="1.6" '
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
        out.append(f'<rect data-box="{b}" x="{x:.1f}" y="{y:.1f}" width="{w}" height="{h}" rx="{rx}" '
                   f'fill="{fill}" stroke="{stroke}" stroke-width="1.4"/>')
        for k, text in enumerate(lines[b]):
            weight = ' font-weight="bold"' if k == 0 else ""
            out.append(f'<text x="{x + 8:.1f}" y="{y + 8 + _LINE_H * (k + 1) - 4:.1f}"{weight}>'
                       f'{html.escape(_fit(text, (w - 14) / (1.12 if k == 0 else 1)))}</text>')
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


def graph_dot(conversion: Conversion, title: str = "", detail_limit: int | None = 80, max_boxes: int = 48) -> str:
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


def write_graph(conversion: Conversion, path: str | os.PathLike, title: str = "",
                detail_limit: int | None = 80) -> str:
    """Write the picture to ``path``; the format follows the extension.

    ``.svg`` and ``.dot``/``.gv`` need nothing beyond Python; ``.png`` needs the ``cairosvg``
    package or graphviz's ``dot`` program. Returns the format written. ``detail_limit`` is
    that of :func:`graph_svg` (None: every node drawn).

    Raises
    ------
    DrawError
        Unknown extension, or PNG asked for with neither renderer available.
    """
    from .io import atomic_write
    path = os.fspath(path)
    fmt = check_graph_path(path)
    if fmt == "svg":
        data = graph_svg(conversion, title, detail_limit).encode()
    elif fmt == "dot":
        data = graph_dot(conversion, title, detail_limit).encode()
    else:
        data = _png(conversion, title, detail_limit)

    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(data)
    atomic_write(path, write)
    return fmt


def _png(conversion: Conversion, title: str, detail_limit: int | None = 80) -> bytes:
    cairosvg = _cairosvg()
    if cairosvg is not None:
        return bytes(cairosvg.svg2png(bytestring=graph_svg(conversion, title, detail_limit).encode()))
    dot = shutil.which("dot")
    if dot is not None:
        done = subprocess.run([dot, "-Tpng"], input=graph_dot(conversion, title, detail_limit).encode(),
                              capture_output=True, check=False)
        if done.returncode == 0:
            return done.stdout
        raise DrawError(f"dot failed to render the PNG: {done.stderr.decode(errors='replace')[:200]}")
    raise DrawError(_NO_PNG)
