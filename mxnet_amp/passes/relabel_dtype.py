"""Relabel one dtype as another in every attribute that names it (``dtype=``, ``__dtype__``).

The ONNX export of a bfloat16 model: MXNet's exporter handles float16 in each converter but
knows no bfloat16 (numpy has no such dtype; MXNet's stand-in is a structured one). Both are
16-bit floats, so the exporter converts the model relabelled bfloat16 -> float16 and the
export labels each such tensor BFLOAT16 again (:mod:`mxnet_amp.onnx.retype`); the casts stay
where the conversion put them.
"""
from __future__ import annotations

from types import MappingProxyType

from ..ir.dtypes import MX_CODE
from ..ir.graph import Graph
from .kernel import GraphPass, PassResult

__all__ = ["relabel_dtype", "RelabelDtype", "dtypes_named"]


class RelabelDtype(GraphPass[int]):
    """:func:`relabel_dtype` as a pass; ``decided`` is the number of nodes relabelled."""

    name = "relabel_dtype"

    def __init__(self, old: str, new: str, *, verify: bool = True) -> None:
        super().__init__(verify=verify)
        self.old, self.new = old, new

    def call(self, graph: Graph) -> PassResult[int]:
        """Run the pass on ``graph`` (see the class)."""
        swaps = {self.old: self.new, str(MX_CODE[self.old]): str(MX_CODE[self.new])}
        nodes = list(graph.nodes)
        count = 0
        for i, node in enumerate(nodes):
            attrs = dict(node.attrs)
            if attrs.get("dtype") == self.old:
                attrs["dtype"] = self.new
            if attrs.get("__dtype__") in swaps:
                attrs["__dtype__"] = swaps[attrs["__dtype__"]]
            if attrs != node.attrs:
                nodes[i] = node.replace(attrs=MappingProxyType(attrs))
                count += 1
        new = Graph(tuple(nodes), graph.heads, graph.attrs) if count else graph
        return PassResult(new, count, bool(count))


def relabel_dtype(graph: Graph, old: str, new: str) -> Graph:
    """``graph`` with dtype ``old`` named ``new`` in each node's ``dtype`` and ``__dtype__``.

    Parameters
    ----------
    graph : Graph
        Not modified.
    old, new : str
        Dtype names (``'bfloat16'``, ``'float16'``).

    Returns
    -------
    Graph
        A new graph (``graph`` itself when no attribute names ``old``).
    """
    return RelabelDtype(old, new)(graph).graph


def dtypes_named(graph: Graph) -> set[str]:
    """The dtype names the nodes' ``dtype`` and ``__dtype__`` attributes give."""
    codes = {str(code): name for name, code in MX_CODE.items()}
    found = set()
    for node in graph.nodes:
        if "dtype" in node.attrs:
            found.add(node.attrs["dtype"])
        if node.attrs.get("__dtype__") in codes:
            found.add(codes[node.attrs["__dtype__"]])
    return found
