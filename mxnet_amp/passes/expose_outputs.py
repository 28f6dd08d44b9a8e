"""Expose every used op output of a graph as a graph output (the automatic mode's
instrumented run reads every tensor's range from one execution)."""
from __future__ import annotations

from ..ir.graph import Entry, Graph
from .kernel import GraphPass, PassResult

__all__ = ["expose_outputs", "ExposeOutputs"]


def expose_outputs(graph: Graph) -> tuple[Graph, list[tuple[int, int]]]:
    """``graph`` with every used op output (and every head) as an output, and their keys."""
    result = ExposeOutputs()(graph)
    return result.graph, result.decided


class ExposeOutputs(GraphPass[list[tuple[int, int]]]):
    """:func:`expose_outputs` as a pass; decides the ``(node, output)`` key of each new head."""

    name = "expose_outputs"

    def call(self, graph: Graph) -> PassResult[list[tuple[int, int]]]:
        """Run the pass on ``graph`` (see the class)."""
        return _expose(graph)


def _expose(graph: Graph) -> PassResult[list[tuple[int, int]]]:
    used = graph.num_used_outputs()
    keys: list[tuple[int, int]] = []
    for i, node in enumerate(graph.nodes):
        if not node.is_variable:
            keys.extend((i, k) for k in range(used[i]))
    seen = set(keys)
    keys.extend((e.node, e.output) for e in graph.heads if (e.node, e.output) not in seen)
    heads = tuple(Entry(i, k) for i, k in keys)
    return PassResult(Graph(graph.nodes, heads, graph.attrs), keys, heads != graph.heads)
