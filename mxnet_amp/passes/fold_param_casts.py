"""Fold the emulation's weight roundings into variables, and prune what nothing reads."""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from ..ir.dtypes import LOW_PRECISION
from ..ir.graph import Graph, Node
from .kernel import GraphPass, Outputs, PassResult, Rewriter

__all__ = ["fold_param_casts", "prune", "FoldParamCasts", "Prune"]


def fold_param_casts(graph: Graph, params: Mapping) -> tuple[Graph, dict[str, tuple[str, str]]]:
    """An emulated ``graph`` whose weight roundings are done once, ahead of time.

    Each round trip ``amp_cast(amp_cast(w, low), float32)`` of a weight ``w`` in ``params``
    becomes a float32 variable (named after the outer cast, a name unique in the graph)
    that is to hold the rounded weight. Same values as rounding in the graph, but done once
    instead of at every run: bfloat16 rounding is slow on CPU (a resnet18's weights cost
    seconds per forward pass). Returns the graph, without nodes nothing reads any more, and
    for each new variable ``(weight name, low precision dtype)``: what to round into it."""
    result = FoldParamCasts(params)(graph)
    return result.graph, result.decided


class FoldParamCasts(GraphPass[dict[str, tuple[str, str]]]):
    """:func:`fold_param_casts` as a pass; decides what to round into each new variable."""

    name = "fold_param_casts"
    cast_chains = True   # the activations' round trips stay

    def __init__(self, params: Mapping, *, verify: bool = True) -> None:
        super().__init__(verify=verify)
        self.params = params

    def call(self, graph: Graph) -> PassResult[dict[str, tuple[str, str]]]:
        """Run the pass on ``graph`` (see the class)."""
        # the loop's state: new variable -> (weight name, low dtype), what this run decides
        rounded: dict[str, tuple[str, str]] = {}
        folded = self.node_loop(graph, rounded).run()
        if not rounded:
            return PassResult(graph, {}, False)
        return PassResult(Prune().call(folded).graph, rounded, True)

    def rewrite_node(self, loop: Rewriter, i: int, node: Node) -> Outputs:
        """The outer cast of a weight's round trip becomes a variable; other nodes are copied."""
        source = self._rounded_weight(loop.graph, node)
        if source is None:
            return loop.copy(node)
        src, dtype = source
        attrs = {k: v for k, v in src.attrs.items() if k != "__dtype__"}
        loop.state[node.name] = (src.name, dtype)
        return loop.emit(Node("null", node.name, (), MappingProxyType(attrs)))

    def _rounded_weight(self, graph: Graph, node: Node) -> tuple[Node, str] | None:
        """``(weight variable, low dtype)`` when ``node`` is the outer cast of a weight's
        round trip, else None."""
        if node.op != "amp_cast" or node.attrs.get("dtype") != "float32":
            return None
        inner = graph.nodes[node.inputs[0].node]
        if inner.op != "amp_cast" or inner.attrs.get("dtype") not in LOW_PRECISION:
            return None
        src = graph.nodes[inner.inputs[0].node]
        if not src.is_variable or src.name not in self.params:
            return None
        return src, inner.attrs["dtype"]


class Prune(GraphPass[None]):
    """:func:`prune` as a pass."""

    name = "prune"
    cast_chains = True

    def call(self, graph: Graph) -> PassResult[None]:
        """Run the pass on ``graph`` (see the class)."""
        keep = [False] * len(graph.nodes)
        stack = [e.node for e in graph.heads]
        while stack:
            i = stack.pop()
            if not keep[i]:
                keep[i] = True
                stack.extend(e.node for e in graph.nodes[i].inputs)
        if all(keep):
            return PassResult(graph, None, False)
        return PassResult(self.node_loop(graph, keep).run(), None, True)

    def rewrite_node(self, loop: Rewriter, i: int, node: Node) -> Outputs:
        """A node the heads depend on is copied; any other dropped."""
        # a dropped node's outputs go nowhere: nothing kept reads them (the loop's state:
        # which nodes the heads depend on)
        return loop.copy(node) if loop.state[i] else ()


def prune(graph: Graph) -> Graph:
    """``graph`` without the nodes its heads do not depend on."""
    return Prune()(graph).graph
