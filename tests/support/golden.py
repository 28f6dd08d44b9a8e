"""Hand-built graphs for golden tests: a pass's whole output compared with the graph a
reader writes down from the rule (as TVM's ``test_to_mixed_precision.py`` does).

    g = graph(var("x"), var("w"), op("fc", "FullyConnected", "x", "w", num_hidden="4"),
              heads=["fc"])

Inputs name earlier nodes (output 0) or ``("name", k)`` for output ``k``; attributes are
strings, as in MXNet's JSON.
"""
from __future__ import annotations

from types import MappingProxyType

from mxnet_amp.ir.graph import Entry, Graph, Node


def var(name: str, **attrs: str) -> tuple:
    """A variable."""
    return ("null", name, (), attrs)


def op(name: str, op_name: str, *inputs, **attrs: str) -> tuple:
    """An op node reading ``inputs`` (names, or ``(name, output)``)."""
    return (op_name, name, inputs, attrs)


def cast(name: str, src, dtype: str) -> tuple:
    """An ``amp_cast`` of ``src`` to ``dtype``."""
    return op(name, "amp_cast", src, dtype=dtype)


def graph(*nodes: tuple, heads=(), attrs=None) -> Graph:
    """The graph of ``nodes`` (in order) with outputs ``heads`` (names or (name, k))."""
    index: dict[str, int] = {}
    built = []

    def entry(ref) -> Entry:
        name, k = (ref, 0) if isinstance(ref, str) else ref
        return Entry(index[name], k)
    for op_name, name, inputs, node_attrs in nodes:
        built.append(Node(op_name, name, tuple(entry(r) for r in inputs),
                          MappingProxyType(dict(node_attrs))))
        index[name] = len(built) - 1
    return Graph(tuple(built), tuple(entry(h) for h in heads), MappingProxyType(attrs or {}))


def sketch(g: Graph) -> str:
    """One line per node, ``name = op(inputs) {attrs}``: what a failed comparison shows."""
    names = [n.name for n in g.nodes]

    def ref(e: Entry) -> str:
        return names[e.node] + (f"[{e.output}]" if e.output else "")
    lines = [f"{n.name} = {n.op}({', '.join(ref(e) for e in n.inputs)}) {dict(n.attrs) or ''}".rstrip()
             for n in g.nodes]
    return "\n".join(lines + [f"heads: {[ref(h) for h in g.heads]}"])


def assert_graph(got: Graph, expected: Graph) -> None:
    """``got == expected`` (nodes, attributes, inputs, heads), showing both sketches if not."""
    assert got == expected, f"got:\n{sketch(got)}\nexpected:\n{sketch(expected)}"
