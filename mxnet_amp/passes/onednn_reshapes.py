"""Find the reshapes MXNet's bfloat16 CPU kernels cannot run in bfloat16.

MXNet 1.9.1 keeps the output of a oneDNN convolution or pooling with a 3-d kernel (a 5-d
``NCDHW`` tensor) in a blocked memory layout. A ``Reshape`` (or ``Flatten``,
``expand_dims``, ``reshape_like``, ...) of such a bfloat16 tensor gives a view that a
later ``amp_cast`` to float32, directly or after an elementwise op, cannot reorder: binding
fails with "could not create a primitive descriptor for a reorder primitive", on the fused
and the unfused path alike. Measured (``tests/passes/test_onednn_reshapes.py``): conv3d ->
Reshape -> cast fails, conv3d -> cast -> Reshape runs; 3-d and 4-d tensors (1-d and 2-d
kernels) and a bfloat16 reader of the reshape (FullyConnected) are fine. gluoncv's
non-local I3D video nets (``i3d_nl*``) reshape their 3-d convolutions' outputs for a
float32 ``batch_dot`` and could not run in bfloat16 at all.

:func:`blocked_reshapes` names each such reshape of a first conversion round; the
conversion runs the cast pass again with them in float32, which moves the cast to before
the reshape (the reshape is exact in either dtype: nothing is lost).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..ir.graph import Entry, Graph, attr_ints
from ..policy import Reason

if TYPE_CHECKING:
    from .insert_casts import CastResult

__all__ = ["blocked_reshapes", "BLOCKED_RESHAPE_REASON"]

BLOCKED_RESHAPE_REASON = Reason(
    "MXNet 1.9.1's oneDNN cannot widen a reshaped bfloat16 5-d tensor of a 3-d convolution / "
    "pooling ('could not create a primitive descriptor for a reorder primitive'): reshaped in "
    "float32, after the cast (exact)", "onednn reshape")

_RESHAPES = frozenset({"Reshape", "reshape", "reshape_like", "Flatten", "flatten", "expand_dims",
                       "squeeze", "_np_reshape", "_npx_reshape", "_np_squeeze"})
# ops whose output keeps their data input's oneDNN layout
_LAYOUT_KEEPING = frozenset({"Activation", "BatchNorm", "LeakyReLU", "clip", "relu", "elemwise_add",
                             "_npi_add", "Dropout", "amp_cast"})
_BLOCKED_PRODUCERS = frozenset({"Convolution", "Deconvolution", "Pooling"})
# elementwise ops between the reshape and the widening cast that fail the same way
_ELEMENTWISE = frozenset({"Activation", "relu", "LeakyReLU", "clip", "_mul_scalar", "_div_scalar",
                          "_plus_scalar", "_minus_scalar"})


def _blocked_5d(graph: Graph, entry: Entry) -> bool:
    """Whether ``entry`` is (through layout-keeping ops) a 3-d kernel op's output."""
    node = graph.nodes[entry.node]
    while node.op in _LAYOUT_KEEPING and node.inputs:
        node = graph.nodes[node.inputs[0].node]
    return node.op in _BLOCKED_PRODUCERS and len(attr_ints(node.attrs.get("kernel"))) == 3


def _widened_after(graph: Graph, consumers: list, start: int) -> bool:
    """Whether node ``start``'s output reaches a cast to float32, directly or through
    elementwise ops."""
    stack, seen = [start], {start}
    while stack:
        for c, _ in consumers[stack.pop()]:
            node = graph.nodes[c]
            if node.op == "amp_multicast" or (node.op == "amp_cast" and node.attrs.get("dtype") == "float32"):
                return True
            if node.op in _ELEMENTWISE and c not in seen:
                seen.add(c)
                stack.append(c)
    return False


def blocked_reshapes(result: CastResult) -> dict[str, str]:
    """The reshape nodes of a bfloat16 conversion that MXNet cannot run (see the module
    doc), each with the reason to keep it in float32.

    Parameters
    ----------
    result : CastResult
        A conversion round's outcome (its graph with casts, and its tensor dtypes).

    Returns
    -------
    dict of str to str
        Node name -> reason; empty when there is none.
    """
    graph = result.graph
    consumers = graph.consumers()
    found: dict[str, str] = {}
    for i, node in enumerate(graph.nodes):
        if node.op not in _RESHAPES or not node.inputs:
            continue
        if result.tensor_dtypes.get(node.inputs[0]) != "bfloat16":
            continue
        if _blocked_5d(graph, node.inputs[0]) and _widened_after(graph, consumers, i):
            found[node.name] = BLOCKED_RESHAPE_REASON
    return found
