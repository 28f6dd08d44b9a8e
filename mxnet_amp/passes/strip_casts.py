"""Remove a converted graph's AMP casts: the same computation, entirely in the inputs' dtype.

Every ``amp_cast`` and ``amp_multicast`` (:data:`mxnet_amp.ir.graph.CAST_OPS`) goes; whatever
read a cast reads the cast's input instead (output ``k`` of a multicast: its input ``k``),
graph outputs included. On a converted float32 model with float32 params that is the
original computation, so running it must reproduce the float32 model to float32 roundoff:
a check that the conversion lost, rewired or changed no op, whatever the precision does to
the numbers (the zoo sweep's structure check). MXNet's own
``tojson(remove_amp_cast=True)`` keeps the casts that are graph outputs, and MXNet's
``Cast`` ops, which a model may hold for its own reasons, are kept here too.
"""
from __future__ import annotations

from ..ir.graph import CAST_OPS, Graph, Node
from .kernel import GraphPass, Outputs, PassResult, Rewriter

__all__ = ["strip_casts", "StripCasts"]


class StripCasts(GraphPass[None]):
    """:func:`strip_casts` as a pass (what it decides: nothing beyond the graph)."""

    name = "strip_casts"

    def call(self, graph: Graph) -> PassResult[None]:
        """Run the pass on ``graph`` (see the class)."""
        new = self.node_loop(graph).run()
        changed = new != graph
        return PassResult(new if changed else graph, None, changed)

    def rewrite_node(self, loop: Rewriter, i: int, node: Node) -> Outputs:
        """A cast is replaced by its input(s); any other node is copied."""
        if node.op in CAST_OPS:
            # whatever read the cast reads its input (a multicast's output k: its input k)
            return loop.inputs(node)
        return loop.copy(node)

    def rewrite_subgraph(self, loop: Rewriter, body: Graph) -> Graph:
        """A loop/cond body: its casts go too."""
        return self.node_loop(body).run()


def strip_casts(graph: Graph) -> Graph:
    """``graph`` without its ``amp_cast`` / ``amp_multicast`` nodes (subgraphs included).

    Parameters
    ----------
    graph : Graph
        A graph, usually a converted one; not changed.

    Returns
    -------
    Graph
        A new graph: every node but the AMP casts, in the same order with the same names
        and attributes, each input that read a cast rewired to that cast's input; the graph
        outputs rewired the same way. A graph without AMP casts comes back equal.
    """
    return StripCasts()(graph).graph
