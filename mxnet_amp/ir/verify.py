"""One checker for a :class:`~mxnet_amp.ir.graph.Graph`, run after each pass in the tests.

:func:`verify_graph` checks what every pass must keep true: nodes in topological order,
unique node names, every input and head naming an existing node, no ``amp_cast`` reading
another ``amp_cast``, and cast attributes MXNet accepts (``amp_cast``'s ``dtype`` is a dtype it
knows, ``amp_multicast`` has one output per input). A broken graph raises
:class:`GraphCheckError` naming the offending node, with a few nodes around it.
"""
from __future__ import annotations

from ..errors import GraphCheckError
from .dtypes import MX_CODE
from .graph import Graph

__all__ = ["verify_graph"]

_WINDOW = 2  # nodes shown on each side of the offending one


def verify_graph(graph: Graph, *, cast_chains: bool = False) -> Graph:
    """Check ``graph`` (and its subgraphs); return it unchanged.

    Parameters
    ----------
    graph : Graph
        The graph a pass produced.
    cast_chains : bool, default False
        Allow an ``amp_cast`` of a cast: emulation's round trips
        ``amp_cast(amp_cast(x, low), float32)`` are such chains on purpose.

    Raises
    ------
    GraphCheckError
        The first broken rule, naming the node and showing its neighbourhood.
    """
    stack = [graph]
    while stack:  # iteratively: bodies nest, and a graph may be very deep
        g = stack.pop()
        _check_names(g)
        for i, node in enumerate(g.nodes):
            problem = _node_problem(g, i, cast_chains)
            if problem:
                raise GraphCheckError(_message(g, i, problem))
            stack.extend(node.subgraphs)
        for k, e in enumerate(g.heads):
            if not 0 <= e.node < len(g.nodes) or e.output < 0:
                raise GraphCheckError(f"head {k} reads node {e.node} output {e.output}, "
                                      f"but the graph has {len(g.nodes)} nodes")
    return graph


def _check_names(g: Graph) -> None:
    seen: dict[str, int] = {}
    for i, node in enumerate(g.nodes):
        if node.name in seen:
            raise GraphCheckError(_message(
                g, i, f"duplicate node name (node {seen[node.name]} is called so too)"))
        seen[node.name] = i


def _node_problem(g: Graph, i: int, cast_chains: bool) -> str | None:
    """Why node ``i`` breaks a rule, or None."""
    node = g.nodes[i]
    for pos, e in enumerate(node.inputs):
        if not 0 <= e.node < len(g.nodes) or e.output < 0:
            return f"input {pos} reads node {e.node} output {e.output}, which does not exist"
        if e.node >= i:
            return f"input {pos} reads node {e.node}, which comes later (not topological order)"
    if node.op == "amp_cast":
        if node.attrs.get("dtype") not in MX_CODE:
            return f"amp_cast to unknown dtype {node.attrs.get('dtype')!r}"
        if len(node.inputs) != 1:
            return f"amp_cast with {len(node.inputs)} inputs"
        # an amp_cast may read an amp_multicast: gluoncv's SSD has one in its fp32 graph
        if not cast_chains and g.nodes[node.inputs[0].node].op == "amp_cast":
            return f"amp_cast of the amp_cast {g.nodes[node.inputs[0].node].name!r} (a cast chain)"
    elif node.op == "amp_multicast":
        if node.attrs.get("num_outputs") != str(len(node.inputs)):
            return (f"amp_multicast with num_outputs={node.attrs.get('num_outputs')!r} "
                    f"but {len(node.inputs)} inputs")
    return None


def _message(g: Graph, i: int, problem: str) -> str:
    lo, hi = max(0, i - _WINDOW), min(len(g.nodes), i + _WINDOW + 1)
    lines = [f"node {i} {g.nodes[i].name!r} ({g.nodes[i].op}): {problem}"]
    for j in range(lo, hi):
        n = g.nodes[j]
        ins = ", ".join(f"{e.node}:{e.output}" for e in n.inputs)
        lines.append(f"{'>' if j == i else ' '} {j:4d} {n.name} = {n.op}({ins})")
    return "\n".join(lines)
