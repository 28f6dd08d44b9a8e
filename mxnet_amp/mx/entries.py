"""Every entry ``[node, output, version]`` of a parsed graph checked against its producer.

MXNet trusts the output index of an entry: a symbol JSON whose node reads output 5 of a
one-output node loads, and then crashes the process (a segmentation fault) in shape
inference or even in ``Symbol.list_outputs``. So before MXNet sees a graph, each producer
read at an output index above 0 is asked how many outputs it has, and an entry past them
is a :class:`~mxnet_amp.errors.GraphError` naming the reader, the producer and the index.

A node's output count is MXNet's own: the node alone (its inputs replaced by variables, its
loop/cond bodies kept) is loaded, reading only its output 0, and the count is read from the
``node_row_ptr`` MXNet writes back, which counts every output (BatchNorm's mean and var,
Dropout's mask) and not only the visible ones.
"""
from __future__ import annotations

import functools
import json
from typing import Iterator

from ..errors import GraphError, error_text
from ..ir.graph import Entry, Graph, Node, node_alone_obj
from .registry import registry_op_names

__all__ = ["check_entries", "output_count"]


def check_entries(graph: Graph, where: str) -> None:
    """Raise :class:`GraphError` for an entry (an input of a node or of a loop/cond body, a
    head) that reads an output its producer does not have.

    Parameters
    ----------
    graph : Graph
        Parsed graph: node indices are in range and in topological order already.
    where : str
        What the graph is (a file name), at the start of the message.
    """
    stack = [(graph, where)]
    while stack:
        g, at = stack.pop()
        highest: dict[int, tuple[int, str]] = {}   # producer -> (highest index read, reader)
        for reader, entry in _reads(g):
            if entry.output < 0:
                raise GraphError(f"{at}: {reader} reads output {entry.output} of node "
                                 f"{entry.node} {g.nodes[entry.node].name!r}: a negative index")
            if entry.output > highest.get(entry.node, (0, ""))[0]:
                highest[entry.node] = (entry.output, reader)
        for producer, (index, reader) in highest.items():
            node = g.nodes[producer]
            count = output_count(node, at)
            if count is not None and index >= count:
                raise GraphError(
                    f"{at}: {reader} reads output {index} of node {producer} {node.name!r} "
                    f"({'variable' if node.is_variable else node.op}), which has "
                    f"{count} output{'s' if count != 1 else ''} (0 to {count - 1})")
        for node in g.nodes:
            stack.extend((body, f"{at}: subgraph of {node.name!r}") for body in node.subgraphs)


def _reads(g: Graph) -> Iterator[tuple[str, Entry]]:
    for node in g.nodes:
        for pos, entry in enumerate(node.inputs):
            yield f"node {node.name!r} ({node.op}) input {pos}", entry
    for k, entry in enumerate(g.heads):
        yield f"graph output {k} (heads)", entry


def output_count(node: Node, where: str = "symbol JSON") -> int | None:
    """How many outputs MXNet gives ``node`` (1 for a variable); None for an op this MXNet
    build does not register (converting names it as such). :class:`GraphError` naming the
    node when MXNet rejects it alone (attributes it cannot parse)."""
    if node.is_variable:
        return 1
    if node.op not in registry_op_names():
        return None
    if node.subgraphs:   # not cached: bodies are not hashable, and such nodes are few
        count = _mxnet_count(node)
    else:
        count = _cached_count(node.op, tuple(sorted(node.attrs.items())), len(node.inputs))
    if isinstance(count, str):
        raise GraphError(f"{where}: MXNet rejects node {node.name!r} ({node.op}): {count}")
    return count


@functools.lru_cache(maxsize=1024)
def _cached_count(op: str, attrs: tuple[tuple[str, str], ...], inputs: int) -> int | str:
    return _mxnet_count(Node(op, "probe", tuple(Entry(i) for i in range(inputs)), dict(attrs)))


def _mxnet_count(node: Node) -> int | str:
    """The output count of ``node`` alone (MXNet's error text when it rejects the node)."""
    import mxnet as mx
    text = json.dumps(node_alone_obj(node, len(node.inputs)))
    try:
        row_ptr = json.loads(mx.sym.load_json(text).tojson())["node_row_ptr"]
    except mx.base.MXNetError as err:
        return error_text(err)
    return int(row_ptr[-1] - row_ptr[-2])
