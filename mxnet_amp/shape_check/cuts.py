"""Graph cuts that let MXNet's partial shape inference go on where a shape function stops.

With the spatial size unknown, a shape function may stop on the unknown dimension (a
``Pooling``, a ``FullyConnected`` reading a map): :func:`cut_past` makes such a node an input
(or, for a flattening ``FullyConnected``, feeds it a new input of the size its weight
gives) and :func:`graph_with_cuts` makes every such cut at once, windowed poolings read as copies.
Each rewrite runs through the pass kernel (:class:`~mxnet_amp.passes.kernel.Rewriter`).
"""
from __future__ import annotations

import warnings
from typing import Mapping

from ..ir.graph import Entry, Graph, Node
from ..mx.io import graph_to_symbol
from ..passes.kernel import Outputs, Rewriter
from .guess import SAME_SHAPE_INPUTS, SHAPE_KEEPING, reader_guess, unknown_dim, windowed_pool

__all__ = ["cut_past", "graph_with_cuts"]


def _pooled_shape(graph: Graph, node: Node, shapes: Mapping[str, tuple]) -> tuple | None:
    """What a ``Pooling`` over an input of unknown size gives: its input's batch and
    channels (inferred from above it), the rest unknown."""
    import mxnet as mx
    if not node.attrs.get("layout", "NC").startswith("NC"):
        return None
    above = graph_to_symbol(Graph(graph.nodes, node.inputs[:1], graph.attrs))
    names = set(above.list_arguments() + above.list_auxiliary_states())
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, (shape,), _ = above.infer_shape_partial(**{k: v for k, v in shapes.items() if k in names})
    except (mx.base.MXNetError, ValueError):
        return None
    if not shape or len(shape) < 3:
        return None
    unknown = unknown_dim()
    return (shape[0], shape[1]) + (unknown,) * (len(shape) - 2)


def cut_past(graph: Graph, name: str, given: Mapping[str, tuple],
         shapes: Mapping[str, tuple]) -> tuple[Graph, dict[str, tuple]] | None:
    """``(graph, input shapes)`` letting inference go on past node ``name``, whose shape
    function stopped on an unknown dimension; None when it cannot.

    A flattening ``FullyConnected`` reads a new input of shape ``(batch, in_units)`` (its
    weight tells), so that it and its readers stay checked; any other node becomes an
    input of unknown shape. What the node read becomes an output, so it stays checked too.
    """
    try:
        i = graph.index_of(name)
    except KeyError:
        return None
    node = graph.nodes[i]
    if node.is_variable or graph.num_used_outputs()[i] != 1:
        return None
    guess = reader_guess(node, given, graph) if node.op == "FullyConnected" else None
    cut_name = name + "__shape_check_cut"
    if guess is None:
        shape = _pooled_shape(graph, node, shapes) if node.op == "Pooling" else None
        return (_ShapeCut(graph, {i: cut_name}, as_input=True).run(i),
                {cut_name: shape} if shape else {})
    return _fresh_inputs(graph, {i: cut_name}), {cut_name: guess[0]}


class _ShapeCut(Rewriter):
    """Cuts for shape inference (see :func:`cut_past`): node ``i`` of ``readers`` becomes a
    variable ``readers[i]`` (``as_input``), or reads its first input from a new variable
    ``readers[i]`` inserted just before it; what it read becomes an output either way."""

    name = "shape_check_cut"

    def __init__(self, graph: Graph, readers: Mapping[int, str], as_input: bool = False) -> None:
        super().__init__(graph)
        self.readers, self.as_input = readers, as_input
        self.read: list[Entry] = []

    def rewrite_node(self, i: int, node: Node) -> Outputs:
        name = self.readers.get(i)
        if name is None:
            return super().rewrite_node(i, node)
        inputs = self.inputs(node)
        self.read.extend(inputs if self.as_input else inputs[:1])
        variable = self.emit(Node("null", name, (), {}, (), {}))
        if self.as_input:
            return variable
        return self.emit(node._replace(inputs=(Entry(variable, 0, 0),) + inputs[1:]))

    def heads(self) -> list[Entry]:
        return super().heads() + self.read


def _fresh_inputs(graph: Graph, readers: Mapping[int, str]) -> Graph:
    """``graph`` where node ``i`` of ``readers`` reads its first input from a new variable
    ``readers[i]`` (inserted just before it); what it read before becomes an output."""
    # nodes before the first reader keep their index and are shared (a cut near the
    # output of a 100k-node graph then rebuilds only what follows it)
    return _ShapeCut(graph, readers).run(min(readers))


class _PoolsAsCopies(Rewriter):
    name = "pools_as_copies"

    def rewrite_node(self, i: int, node: Node) -> Outputs:
        if windowed_pool(node):
            return self.emit(Node("_copy", node.name, self.inputs(node)[:1], {}, (), {}))
        return super().rewrite_node(i, node)


def _pools_as_copies(graph: Graph) -> Graph:
    """``graph`` with each windowed ``Pooling`` (NC layout) made a copy of its input.

    While the spatial size is unknown a pooling's output is its input's batch and channels
    with unknown spatial dimensions, which a copy gives too; MXNet's own Pooling shape
    function instead stops on the unknown size (each stop costs a rebuilt graph)."""
    first = next((i for i, node in enumerate(graph.nodes) if windowed_pool(node)), None)
    return graph if first is None else _PoolsAsCopies(graph).run(first)


def graph_with_cuts(graph: Graph, given: Mapping[str, tuple], pools: bool = True) -> tuple[Graph, dict]:
    """``(graph, input shapes)`` for inference while the spatial size is not the real one,
    built at once: windowed poolings as copies (``pools``), and each flattening
    ``FullyConnected`` that reads a convolution or pooling map through shape-keeping ops
    cut as :func:`cut_past` does (its ``in_units`` depend on the real spatial size)."""
    readers, shapes = {}, {}
    for i, node in enumerate(graph.nodes):
        guess = reader_guess(node, given, graph) if node.op == "FullyConnected" else None
        if guess is None:
            continue
        src = graph.nodes[node.inputs[0].node]
        while (src.op in SHAPE_KEEPING or src.op in SAME_SHAPE_INPUTS
               or src.op in ("Flatten", "flatten")) and src.inputs:
            src = graph.nodes[src.inputs[0].node]
        if src.op in ("Convolution", "Deconvolution") or windowed_pool(src):
            readers[i] = node.name + "__shape_check_cut"
            shapes[readers[i]] = guess[0]
    quick = _pools_as_copies(graph) if pools else graph
    return (_fresh_inputs(quick, readers) if readers else quick), shapes
