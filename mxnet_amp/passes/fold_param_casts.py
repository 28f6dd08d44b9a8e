"""Fold the emulation's weight roundings into variables, and prune what nothing reads."""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from ..dtypes import LOW_PRECISION
from ..graph import Entry, Graph, Node

__all__ = ["fold_param_casts", "prune"]


def fold_param_casts(graph: Graph, params: Mapping) -> tuple[Graph, dict[str, tuple[str, str]]]:
    """An emulated ``graph`` whose weight roundings are done once, ahead of time.

    Each round trip ``amp_cast(amp_cast(w, low), float32)`` of a weight ``w`` in ``params``
    becomes a float32 variable (named after the outer cast, a name unique in the graph)
    that is to hold the rounded weight. Same values as rounding in the graph, but done once
    instead of at every run: bfloat16 rounding is slow on CPU (a resnet18's weights cost
    seconds per forward pass). Returns the graph, without nodes nothing reads any more, and
    for each new variable ``(weight name, low precision dtype)``: what to round into it."""
    nodes = list(graph.nodes)
    rounded = {}
    for i, node in enumerate(graph.nodes):
        if node.op != "amp_cast" or node.attrs.get("dtype") != "float32":
            continue
        inner = graph.nodes[node.inputs[0].node]
        if inner.op != "amp_cast" or inner.attrs.get("dtype") not in LOW_PRECISION:
            continue
        src = graph.nodes[inner.inputs[0].node]
        if not src.is_variable or src.name not in params:
            continue
        attrs = {k: v for k, v in src.attrs.items() if k != "__dtype__"}
        nodes[i] = Node("null", node.name, (), MappingProxyType(attrs))
        rounded[node.name] = (src.name, inner.attrs["dtype"])
    if not rounded:
        return graph, {}
    return prune(Graph(tuple(nodes), graph.heads, graph.attrs)), rounded


def prune(graph: Graph) -> Graph:
    """``graph`` without the nodes its heads do not depend on."""
    keep = [False] * len(graph.nodes)
    stack = [e.node for e in graph.heads]
    while stack:
        i = stack.pop()
        if not keep[i]:
            keep[i] = True
            stack.extend(e.node for e in graph.nodes[i].inputs)
    new_index: dict[int, int] = {}
    nodes: list[Node] = []
    for i, node in enumerate(graph.nodes):
        if keep[i]:
            new_index[i] = len(nodes)
            nodes.append(node.replace(inputs=tuple(Entry(new_index[e.node], e.output, e.version)
                                                   for e in node.inputs)) if node.inputs else node)
    heads = tuple(Entry(new_index[e.node], e.output, e.version) for e in graph.heads)
    return Graph(tuple(nodes), heads, graph.attrs)
