"""Dtype of every tensor of a (converted) graph, from MXNet's per-op type inference."""
from __future__ import annotations

from typing import Mapping

from ..errors import InferenceFailed
from ..ir.graph import Graph
from ..mx.optypes import OpTypes
from .kernel import GraphPass, PassResult, node_context

__all__ = ["infer_dtypes", "InferDtypes"]


class InferDtypes(GraphPass[list[tuple[str | None, ...]]]):
    """:func:`infer_dtypes` as a pass: an analysis (the graph comes back unchanged), deciding
    each node's output dtypes."""

    name = "infer_dtypes"

    def __init__(self, var_dtypes: Mapping[str, str], op_types: OpTypes | None = None, *,
                 verify: bool = True) -> None:
        super().__init__(verify=verify)
        self.var_dtypes, self.op_types = var_dtypes, op_types

    def call(self, graph: Graph) -> PassResult[list[tuple[str | None, ...]]]:
        """Run the pass on ``graph`` (see the class)."""
        return PassResult(graph, _infer(graph, self.var_dtypes, self.op_types), False)


def infer_dtypes(graph: Graph, var_dtypes: Mapping[str, str],
                 op_types: OpTypes | None = None) -> list[tuple[str | None, ...]]:
    """For each node, the dtypes of its used outputs.

    Variables take ``var_dtypes[name]`` (float32 when absent and no consumer decides);
    a variable missing from ``var_dtypes`` takes what its first consumer asks for.
    """
    return InferDtypes(var_dtypes, op_types)(graph).decided


def _infer(graph: Graph, var_dtypes: Mapping[str, str],
           op_types: OpTypes | None) -> list[tuple[str | None, ...]]:
    op_types = op_types or OpTypes()
    used = graph.num_used_outputs()
    out: list[list[str | None]] = []
    for node in graph.nodes:
        if node.is_variable:
            out.append([var_dtypes.get(node.name)])
            continue
        ins = [out[e.node][e.output] for e in node.inputs]
        try:
            filled, outs = op_types.infer(node, ins, used[len(out)])
        except InferenceFailed as err:
            raise InferenceFailed(f"node {node.name!r} ({node.op}): {err}") from None
        except Exception as err:   # not MXNet's answer: a bug, named at its node
            raise node_context(err, "infer_dtypes", len(out), node) from err
        for e, d in zip(node.inputs, filled):
            if out[e.node][e.output] is None and graph.nodes[e.node].is_variable:
                out[e.node][e.output] = d
        out.append(list(outs))
    return [tuple(o) for o in out]
