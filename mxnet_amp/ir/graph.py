"""The graph value the passes work on: a flat, topologically ordered node list.

No mxnet import here: a :class:`Graph` is plain data, built once from symbol JSON
(:mod:`mxnet_amp.mx.io`) and never mutated. Passes read one graph and build a new one with
:class:`GraphBuilder`.
"""
from __future__ import annotations

import collections
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping, NamedTuple

__all__ = ["Entry", "Node", "Graph", "GraphBuilder", "CAST_OPS", "ANY_CAST_OPS", "cast_node", "multicast_node",
           "graph_obj", "node_alone_obj"]

# the cast ops a converted graph holds
CAST_OPS = frozenset({"amp_cast", "amp_multicast"})
# every op that only changes dtypes: those and MXNet's own Cast (``cast`` is its alias), which
# a model may hold and the emulation inserts where MXNet's kernels truncate
ANY_CAST_OPS = CAST_OPS | frozenset({"Cast", "cast"})

_EMPTY: Mapping[str, str] = MappingProxyType({})


class Entry(NamedTuple):
    """One output of one node: ``(node index, output index)`` as in MXNet's JSON."""

    node: int
    output: int = 0
    version: int = 0


class Node(NamedTuple):
    """An operator application, or a variable when ``op == 'null'``.

    A tuple, so a 100k-node graph builds quickly; ``attrs`` and ``extra`` are never
    mutated once a node exists (passes make new nodes with :meth:`replace`).
    """

    op: str
    name: str
    inputs: tuple[Entry, ...] = ()
    attrs: Mapping[str, str] = _EMPTY
    subgraphs: tuple["Graph", ...] = ()
    # JSON keys this version of mxnet-amp does not interpret, written back unchanged
    extra: Mapping[str, object] = _EMPTY

    @property
    def is_variable(self) -> bool:
        return self.op == "null"

    def replace(self, **changes: Any) -> Node:
        """A copy with ``changes`` applied (self when there are none); keys are field names
        (typed Any: NamedTuple's ``_replace`` checks the names, its fields differ in type)."""
        return self._replace(**changes) if changes else self


@dataclass(frozen=True, slots=True)
class Graph:
    """An immutable symbol graph: nodes in topological order, plus the output entries."""

    nodes: tuple[Node, ...]
    heads: tuple[Entry, ...]
    attrs: Mapping[str, object] = field(default_factory=lambda: _EMPTY)
    _consumers: list[list[tuple[int, int]]] | None = field(default=None, repr=False, compare=False)  # lazily derived

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def variables(self) -> list[Node]:
        """Variable nodes in order (MXNet's ``arg_nodes``, arguments and aux states alike)."""
        return [n for n in self.nodes if n.is_variable]

    def consumers(self) -> list[list[tuple[int, int]]]:
        """For node ``i``, the ``(consumer node, input position)`` pairs reading any of its outputs."""
        if self._consumers is not None:
            return self._consumers
        users: list[list[tuple[int, int]]] = [[] for _ in self.nodes]
        for i, node in enumerate(self.nodes):
            for pos, entry in enumerate(node.inputs):
                users[entry.node].append((i, pos))
        object.__setattr__(self, "_consumers", users)
        return users

    def num_used_outputs(self) -> list[int]:
        """For each node, one more than the highest output index any consumer or head reads."""
        used = [1] * len(self.nodes)
        for node in self.nodes:
            for e in node.inputs:
                if e.output + 1 > used[e.node]:
                    used[e.node] = e.output + 1
        for e in self.heads:
            if e.output + 1 > used[e.node]:
                used[e.node] = e.output + 1
        return used

    def walk(self) -> Iterator[Node]:
        """Every node of the graph, then of each loop/cond body, breadth first (iterative:
        deeply nested bodies need no recursion)."""
        pending = collections.deque([self])
        while pending:
            for node in pending.popleft().nodes:
                yield node
                pending.extend(node.subgraphs)

    def ops(self) -> set[str]:
        """Every op name in the graph, subgraphs included (variables excluded)."""
        return {n.op for n in self.walk() if not n.is_variable}

    def index_of(self, name: str) -> int:
        """Index of the node called ``name`` (KeyError when there is none)."""
        for i, n in enumerate(self.nodes):
            if n.name == name:
                return i
        raise KeyError(name)


class GraphBuilder:
    """Appends nodes to a new graph; keeps node names unique."""

    __slots__ = ("nodes", "names")

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.names: set[str] = set()

    def add(self, node: Node) -> int:
        """Append ``node``; returns its index in the graph being built."""
        self.nodes.append(node)
        self.names.add(node.name)
        return len(self.nodes) - 1

    def fresh_name(self, base: str) -> str:
        """``base``, or ``base_1``, ``base_2``… when the name is taken."""
        name, k = base, 0
        while name in self.names:
            k += 1
            name = f"{base}_{k}"
        return name

    def build(self, heads: Iterable[Entry], attrs: Mapping[str, object] = _EMPTY) -> Graph:
        """The finished :class:`Graph` with output entries ``heads`` and graph ``attrs``."""
        return Graph(tuple(self.nodes), tuple(heads), attrs)


def attr_ints(text: str | None) -> tuple[int, ...]:
    """The integers in an attribute's text (``'(3, 3)'`` -> ``(3, 3)``; None -> ``()``)."""
    return tuple(int(v) for v in re.findall(r"-?\d+", text or ""))


def cast_node(name: str, src: Entry, dtype: str) -> Node:
    """An ``amp_cast`` of ``src`` to ``dtype`` called ``name``."""
    return Node("amp_cast", name, (src,), MappingProxyType({"dtype": dtype}))


def multicast_node(name: str, srcs: tuple[Entry, ...]) -> Node:
    """An ``amp_multicast`` unifying ``srcs`` to their widest dtype, one output per input."""
    return Node("amp_multicast", name, tuple(srcs),
                MappingProxyType({"num_outputs": str(len(srcs)), "cast_narrow": "False"}))


def graph_obj(graph: Graph) -> dict[str, Any]:
    """``graph`` as the JSON object MXNet reads (casts kept), before serialisation."""
    nodes: list[dict[str, Any]] = []
    append = nodes.append
    for node in graph.nodes:
        raw: dict[str, Any] = {"op": node.op, "name": node.name}
        if node.attrs:
            raw["attrs"] = dict(node.attrs)
        raw["inputs"] = node.inputs   # Entry tuples: json writes them as [node, index, version]
        if node.subgraphs:
            raw["subgraphs"] = [graph_obj(g) for g in node.subgraphs]
        if node.extra:
            raw.update(node.extra)
        append(raw)
    attrs = dict(graph.attrs) or {"mxnet_version": ["int", 10901]}
    # node_row_ptr is left out: MXNet recomputes it on load
    return {
        "nodes": nodes,
        "arg_nodes": [i for i, n in enumerate(graph.nodes) if n.op == "null"],
        "heads": [list(e) for e in graph.heads],
        "attrs": attrs,
    }


def node_alone_obj(node: Node, inputs: int, outputs: int = 1) -> dict[str, Any]:
    """JSON object of ``node`` alone: it reads ``inputs`` variables ``in0``, ``in1``…
    (its attributes and loop/cond bodies kept, named ``probe``) and its first ``outputs``
    outputs are the heads; what MXNet is asked about one node (its dtypes, its outputs)."""
    raw: dict[str, Any] = {"op": node.op, "name": "probe", "attrs": dict(node.attrs),
                           "inputs": [[i, 0, 0] for i in range(inputs)]}
    if node.subgraphs:
        raw["subgraphs"] = [graph_obj(g) for g in node.subgraphs]
    return {
        "nodes": [{"op": "null", "name": f"in{i}", "inputs": []} for i in range(inputs)] + [raw],
        "arg_nodes": list(range(inputs)),
        "heads": [[inputs, k, 0] for k in range(outputs)],
        "attrs": {"mxnet_version": ["int", 10901]},
    }
