"""An emulated graph with its roundings run by the compiled kernels (:mod:`mxnet_amp.kernels`).

The emulation (:mod:`mxnet_amp.passes.emulate`) rounds with MXNet's casts: each round trip
``amp_cast(amp_cast(x, low), float32)`` is two element-at-a-time passes over the tensor, and a
float16 conv / dense layer's bias step (``_bias_step``: the product rounded, the bias added by
``broadcast_add``, the sum rounded) is five. This pass puts the kernels' ops in their place:

* a round trip becomes ``mxnet_amp_round(x; dtype)`` (named as its outer cast);
* a bias step (the product's round trip read by ``broadcast_add`` and by
  ``_identity_with_attr_like_rhs``, which reads the sum and whose round trip ends the step)
  becomes ``mxnet_amp_round_bias(product, bias; dtype)`` (named as the step's last cast).

The kernels' ops infer their output's shape from their first input only, never backwards
(the step's ``_identity_with_attr_like_rhs`` did both, at the cost of a copy of the sum):
a graph whose shapes need that (an unrolled LSTM's begin state) must run as it was
(:func:`mxnet_amp.emulation.with_kernels` compares the shapes both infer).

The same bits (the kernels round as MXNet's casts do, NaNs included; the add is float32's);
the graph must run where the library is loaded. Only ``amp_cast`` round trips are replaced:
the truncating ``Cast`` of ``rounding='mxnet-cpu'`` stays. ``flush_sign`` is how this
machine's ``amp_cast`` to bfloat16 flushes a negative float32 subnormal (True: to -0).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from ..ir.dtypes import LOW_PRECISION
from ..ir.graph import Entry, Graph, Node
from ..kernels.build import ROUND_BIAS_OP, ROUND_OP
from .kernel import GraphPass, Outputs, PassResult, Rewriter

__all__ = ["round_with_kernels", "RoundWithKernels"]


def round_with_kernels(graph: Graph, flush_sign: bool = False) -> Graph:
    """``graph`` (an emulated one) with its ``amp_cast`` round trips and float16 bias steps
    run by the kernels' ops (module doc); ``graph`` itself where it has none."""
    return RoundWithKernels(flush_sign)(graph).graph


class RoundWithKernels(GraphPass[int]):
    """:func:`round_with_kernels` as a pass; decides how many kernel ops it put in."""

    name = "round_with_kernels"
    cast_chains = True   # the weights' round trips a caller folds later may stay

    def __init__(self, flush_sign: bool = False, *, verify: bool = True) -> None:
        super().__init__(verify=verify)
        self.flush_sign = bool(flush_sign)

    def call(self, graph: Graph) -> PassResult[int]:
        """Run the pass on ``graph`` (see the class)."""
        loop = self.node_loop(graph, _find(graph))
        new = loop.run()
        if not loop.state.count:
            return PassResult(graph, 0, False)
        return PassResult(new, loop.state.count, True)

    def rewrite_node(self, loop: Rewriter, i: int, node: Node) -> Outputs:
        """A round trip or bias step found before the loop becomes a kernel op; what it made dead goes."""
        found: _Found = loop.state
        if i in found.dead:
            return ()   # only the replacement below read it
        if i in found.steps:
            product, bias, _ = found.steps[i]
            found.count += 1
            inputs = (loop.entry(product), loop.entry(bias))
            return [Entry(loop.emit(Node(ROUND_BIAS_OP, node.name, inputs,
                                         self._attrs(found.trips[i][1]))))]
        if i not in found.trips:
            return loop.copy(node)
        x, low = found.trips[i]
        found.count += 1
        return [Entry(loop.emit(Node(ROUND_OP, node.name, (loop.entry(x),), self._attrs(low))))]

    def _attrs(self, low: str) -> MappingProxyType:
        attrs = {"dtype": low}
        if low == "bfloat16":
            attrs["flush_sign"] = "1" if self.flush_sign else "0"
        return MappingProxyType(attrs)


def _round_trip(graph: Graph, i: int, readers: list[list[tuple[int, int]]]) -> tuple[Entry, str] | None:
    """``(x, low)`` when node ``i`` is the outer cast of ``amp_cast(amp_cast(x, low),
    float32)`` whose inner cast nothing else reads, else None."""
    node = graph.nodes[i]
    if node.op != "amp_cast" or node.attrs.get("dtype") != "float32" or len(node.inputs) != 1:
        return None
    e = node.inputs[0]
    inner = graph.nodes[e.node]
    if inner.op != "amp_cast" or inner.attrs.get("dtype") not in LOW_PRECISION or len(inner.inputs) != 1:
        return None
    if readers[e.node] != [(i, 0)] or e in graph.heads:
        return None
    return inner.inputs[0], inner.attrs["dtype"]


class _BiasStep(NamedTuple):
    """A bias step the fused op replaces: the rounded product, the bias, its broadcast_add."""

    product: Entry
    bias: Entry
    add: Node


@dataclass
class _Found:
    """What one run replaces, found before the loop so that the nodes a replacement makes
    dead are never emitted: each round trip's outer cast -> (x, low), each bias step's last
    cast -> its :class:`_BiasStep`; and how many kernel ops the loop put in so far."""

    readers: list[list[tuple[int, int]]]
    trips: dict[int, tuple[Entry, str]] = field(default_factory=dict)
    steps: dict[int, _BiasStep] = field(default_factory=dict)
    dead: set[int] = field(default_factory=set)
    count: int = 0


def _find(graph: Graph) -> _Found:
    found = _Found(graph.consumers())
    for i in range(len(graph.nodes)):
        trip = _round_trip(graph, i, found.readers)
        if trip is not None:
            found.trips[i] = trip
    found.dead = {graph.nodes[i].inputs[0].node for i in found.trips}
    for i, (total, low) in found.trips.items():
        step = _bias_step(graph, found, total, low)
        if step is not None:
            found.steps[i] = step
            rounded, added = (graph.nodes[total.node].inputs[k] for k in (1, 0))
            found.dead.update((total.node, added.node, rounded.node))
    return found


def _bias_step(graph: Graph, found: _Found, total: Entry, low: str) -> _BiasStep | None:
    """``(product, bias, add node)`` when ``total`` (what a round trip rounds) is the
    sum of a bias step (``_bias_step`` in :mod:`mxnet_amp.passes.emulate`): an
    ``_identity_with_attr_like_rhs(broadcast_add(r, bias), r)`` with ``r`` the
    ``low`` round trip of ``product``, and nothing else reading ``r``, the sum or the
    identity; else None."""
    readers = found.readers
    ident = graph.nodes[total.node]
    if ident.op != "_identity_with_attr_like_rhs" or len(ident.inputs) != 2 or total.output:
        return None
    added, rounded = ident.inputs
    add = graph.nodes[added.node]
    if (add.op != "broadcast_add" or len(add.inputs) != 2 or add.inputs[0] != rounded
            or added.output or rounded.output):
        return None
    trip = found.trips.get(rounded.node)
    if trip is None or trip[1] != low:
        return None
    heads = set(graph.heads)
    if ({rounded, added, total} & heads or len(readers[total.node]) != 1
            or readers[added.node] != [(total.node, 0)]
            or sorted(readers[rounded.node]) != sorted([(added.node, 0), (total.node, 1)])):
        return None
    return _BiasStep(trip[0], add.inputs[1], add)
