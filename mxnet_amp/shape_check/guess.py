"""What the params prove about a model's inputs, and which ops keep their input's shape.

Read by the shape check (:mod:`mxnet_amp.shape_check.check`) and its graph cuts
(:mod:`mxnet_amp.shape_check.cuts`): where the caller gives no input shapes, each model input gets
what its first readers prove about it (rank and channel count from a ``Convolution`` weight,
``(batch, in_units)`` when only flattening ``FullyConnected`` layers read it), every other
dimension unknown.
"""
from __future__ import annotations

from typing import Mapping

from ..ir.graph import Graph, Node, attr_ints

__all__ = ["SHAPE_KEEPING", "SAME_SHAPE_INPUTS", "unknown_dim", "reader_guess",
           "guess_input_shapes", "windowed_pool"]

# ops whose output has their first input's shape: a model input's rank shows through them
SHAPE_KEEPING = frozenset({
    "BatchNorm", "Activation", "relu", "sigmoid", "tanh", "LeakyReLU", "Dropout", "_copy",
    "identity", "_mul_scalar", "_div_scalar", "_plus_scalar", "_minus_scalar",
    "_rminus_scalar", "_rdiv_scalar", "Cast", "amp_cast", "clip", "InstanceNorm"})
# elementwise ops over same-shaped inputs: the output has the first input's shape too
SAME_SHAPE_INPUTS = frozenset({
    "elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div", "_plus", "_minus", "_mul",
    "_div", "_Plus", "_Minus", "_Mul", "_Div", "add_n", "ElementWiseSum"})
_FALSE = ("false", "0")


def unknown_dim() -> int:
    """How MXNet writes an unknown dimension (-1 under numpy shape semantics, else 0)."""
    import mxnet as mx
    return -1 if mx.util.is_np_shape() else 0


def reader_guess(node: Node, given: Mapping[str, tuple],
                  graph: Graph) -> tuple[tuple[int, ...], bool] | None:
    """``(shape, rank_is_certain)`` a reader proves of its data input, or None."""
    attrs = node.attrs
    w = given.get(graph.nodes[node.inputs[1].node].name) if len(node.inputs) > 1 else None
    unknown = unknown_dim()
    if node.op in ("Convolution", "Deconvolution") and w is not None:
        kernel = attr_ints(attrs.get("kernel"))
        if not kernel or len(w) != len(kernel) + 2 or not attrs.get("layout", "NC").startswith("NC"):
            return None
        groups = (attr_ints(attrs.get("num_group")) or (1,))[0]
        channels = w[1] * groups if node.op == "Convolution" else w[0]
        return (unknown, channels) + (unknown,) * len(kernel), True
    if node.op == "FullyConnected" and w is not None and len(w) == 2:
        if attrs.get("flatten", "True").lower() in _FALSE:
            return None
        return (unknown, w[1]), False   # any rank flattens to (batch, in_units)
    return None


def guess_input_shapes(graph: Graph, data: list[str], given: Mapping[str, tuple]) -> dict:
    """Partial shapes of the model inputs ``data`` that their readers prove (see module)."""
    consumers = graph.consumers()
    guesses = {}
    for name in data:
        try:
            start = graph.index_of(name)
        except KeyError:
            continue
        certain: set[tuple[int, ...]] = set()
        loose: set[tuple[int, ...]] = set()
        other = False
        stack, seen = [start], {start}
        while stack:
            for j, pos in consumers[stack.pop()]:
                node = graph.nodes[j]
                if pos == 0 and node.op in SHAPE_KEEPING:
                    if j not in seen:
                        seen.add(j)
                        stack.append(j)
                    continue
                found = reader_guess(node, given, graph) if pos == 0 else None
                if found is None:
                    other = True
                else:
                    (certain if found[1] else loose).add(found[0])
        if len(certain) == 1:
            guesses[name] = next(iter(certain))
        elif not certain and not other and len(loose) == 1:
            guesses[name] = next(iter(loose))
    return guesses


def windowed_pool(node: Node) -> bool:
    """Whether ``node`` is a ``Pooling`` over a window (not global) in an NC layout."""
    return (node.op == "Pooling" and node.attrs.get("global_pool", "False").lower() in _FALSE
            and node.attrs.get("layout", "NC").startswith("NC") and bool(node.inputs))
