"""Remove a converted graph's AMP casts: the same computation, entirely in the inputs' dtype.

Every ``amp_cast`` and ``amp_multicast`` (:data:`mxnet_amp.graph.CAST_OPS`) goes; whatever
read a cast reads the cast's input instead (output ``k`` of a multicast: its input ``k``),
graph outputs included. On a converted float32 model with float32 params that is the
original computation, so running it must reproduce the float32 model to float32 roundoff:
a check that the conversion lost, rewired or changed no op, whatever the precision does to
the numbers (the zoo sweep's structure check). MXNet's own
``tojson(remove_amp_cast=True)`` keeps the casts that are graph outputs, and MXNet's
``Cast`` ops, which a model may hold for its own reasons, are kept here too.
"""
from __future__ import annotations

from ..graph import CAST_OPS, Entry, Graph, GraphBuilder

__all__ = ["strip_casts"]


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
    builder = GraphBuilder()
    new_index: list[int | tuple[Entry, ...]] = []  # a node's new index, or a cast's inputs

    def moved(e: Entry) -> Entry:
        where = new_index[e.node]
        return where[e.output] if isinstance(where, tuple) else Entry(where, e.output)

    for node in graph.nodes:
        inputs = tuple(moved(e) for e in node.inputs)
        if node.op in CAST_OPS:
            new_index.append(inputs)
            continue
        if node.subgraphs:
            node = node.replace(subgraphs=tuple(strip_casts(g) for g in node.subgraphs))
        new_index.append(builder.add(node.replace(inputs=inputs)))
    return builder.build([moved(h) for h in graph.heads], graph.attrs)
