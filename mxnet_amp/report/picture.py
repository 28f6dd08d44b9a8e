"""What the picture of a conversion shows: its graph read as boxes and edges (:func:`collapse`).

Small graphs are drawn node by node (any graph with ``detail_limit=None``). Large ones (a
resnet50 has ~170 op nodes and ~90 casts) are collapsed so they stay readable: the node
sequence is cut at *cut points*, nodes no edge jumps over (in a resnet, the activation
closing each residual block), so each piece is a block; consecutive identical blocks become
one box marked ``× N``, and runs of single nodes become one box per name group
(``stage1_…``; a cast the conversion inserted, as its record ``CastResult.inserted_casts``
says, belongs to the group of the node whose output it casts, an amp_multicast to that of
the op it was put in for). A block mixing float32 and low precision is split into runs of
one dtype, and a float32 node next to a low precision one is a box of its own, so the
picture names every such node. Each box lists its op counts per dtype, is filled with the
colour of its majority dtype and carries a bar showing the dtype mix.

Where the boxes go is :mod:`mxnet_amp.report.layout`'s job, drawing them :mod:`mxnet_amp.report.draw`'s.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ..ir.dtypes import is_float
from ..ir.graph import CAST_OPS, Entry, Graph, Node
from ..passes.insert_casts import MULTICAST

if TYPE_CHECKING:   # only annotations name it
    from ..record import Conversion

__all__ = ["Box", "Picture", "collapse", "node_dtypes", "fp32_islands"]


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
    def signature(seg: Sequence[int]) -> tuple:
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

    def ops_near(i: int) -> list[int]:
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

    def cls(i: int) -> Any:
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
