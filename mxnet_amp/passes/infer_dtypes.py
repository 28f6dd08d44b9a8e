"""Dtype of every tensor of a (converted) graph, from MXNet's per-op type inference."""
from __future__ import annotations

from typing import Mapping

from ..graph import Graph
from ..optypes import InferenceFailed, OpTypes

__all__ = ["infer_dtypes"]


def infer_dtypes(graph: Graph, var_dtypes: Mapping[str, str],
                 op_types: OpTypes | None = None) -> list[tuple[str | None, ...]]:
    """For each node, the dtypes of its used outputs.

    Variables take ``var_dtypes[name]`` (float32 when absent and no consumer decides);
    a variable missing from ``var_dtypes`` takes what its first consumer asks for.
    """
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
        for e, d in zip(node.inputs, filled):
            if out[e.node][e.output] is None and graph.nodes[e.node].is_variable:
                out[e.node][e.output] = d
        out.append(list(outs))
    return [tuple(o) for o in out]
