"""Symbol JSON <-> :class:`~mxnet_amp.graph.Graph`, and Symbol / checkpoint adapters.

MXNet 1.9.1's ``Symbol.tojson()``/``save()`` and ``mx.model.save_checkpoint`` drop every
``amp_cast``/``amp_multicast`` node by default, so a converted graph is always serialised
here with ``remove_amp_cast=False`` (or by :func:`graph_to_json`).
"""
from __future__ import annotations

import json
import os
import tempfile
from types import MappingProxyType
from typing import Any, Mapping

from .errors import CheckpointError, GraphError
from .graph import Entry, Graph, Node

__all__ = ["graph_from_json", "graph_to_json", "graph_from_symbol", "graph_to_symbol",
           "symbol_json", "atomic_write", "save_symbol", "save_checkpoint", "load_checkpoint"]

_NODE_KEYS = {"op", "name", "inputs", "attrs", "attr", "param", "subgraphs"}


def _parse_graph(obj: Any, where: str) -> Graph:
    if not isinstance(obj, dict) or not isinstance(obj.get("nodes"), list):
        raise GraphError(f"{where}: not an MXNet symbol graph (no 'nodes' list)")
    raw_nodes = obj["nodes"]
    nodes: list[Node] = []
    for i, raw in enumerate(raw_nodes):
        if not isinstance(raw, dict) or "op" not in raw or "name" not in raw:
            raise GraphError(f"{where}: node {i} lacks 'op' or 'name': {str(raw)[:120]}")
        name = raw["name"]
        inputs = []
        for e in raw.get("inputs", ()):
            if not isinstance(e, (list, tuple)) or not 2 <= len(e) <= 3:
                raise GraphError(f"{where}: node {name!r} has a malformed input {e!r}")
            if not 0 <= e[0] < i:
                raise GraphError(f"{where}: node {name!r} reads node {e[0]}, which does not "
                                 "come before it (nodes must be in topological order)")
            inputs.append(Entry(int(e[0]), int(e[1]), int(e[2]) if len(e) == 3 else 0))
        # MXNet has written attributes under 'attrs', 'attr' (<=1.x) and 'param' (0.x)
        attrs = raw.get("attrs", raw.get("attr", raw.get("param", {}))) or {}
        subgraphs = tuple(_parse_graph(g, f"{where}: subgraph of {name!r}")
                          for g in raw.get("subgraphs", ()))
        extra = {k: v for k, v in raw.items() if k not in _NODE_KEYS}
        nodes.append(Node(raw["op"], name, tuple(inputs),
                          MappingProxyType({str(k): str(v) for k, v in attrs.items()}),
                          subgraphs, MappingProxyType(extra)))
    heads = []
    for e in obj.get("heads", ()):
        if not isinstance(e, (list, tuple)) or len(e) < 2 or not 0 <= e[0] < len(nodes):
            raise GraphError(f"{where}: malformed head {e!r}")
        heads.append(Entry(int(e[0]), int(e[1]), int(e[2]) if len(e) > 2 else 0))
    if not heads:
        raise GraphError(f"{where}: the graph has no outputs ('heads')")
    attrs = obj.get("attrs", {})
    return Graph(tuple(nodes), tuple(heads), MappingProxyType(dict(attrs)))


def graph_from_json(text: str, where: str = "symbol JSON") -> Graph:
    """Parse MXNet symbol JSON into a :class:`Graph`; :class:`GraphError` names what is wrong."""
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, TypeError) as err:
        raise GraphError(f"{where}: not valid JSON ({err}); the file may be truncated") from None
    return _parse_graph(obj, where)


def _graph_obj(graph: Graph) -> dict:
    nodes = []
    row_ptr = [0]
    used = graph.num_used_outputs()
    for node, n_out in zip(graph.nodes, used):
        raw: dict[str, Any] = {"op": node.op, "name": node.name}
        if node.attrs:
            raw["attrs"] = dict(node.attrs)
        raw["inputs"] = [[e.node, e.index, e.version] for e in node.inputs]
        if node.subgraphs:
            raw["subgraphs"] = [_graph_obj(g) for g in node.subgraphs]
        raw.update(node.extra)
        nodes.append(raw)
        row_ptr.append(row_ptr[-1] + n_out)
    attrs = dict(graph.attrs) or {"mxnet_version": ["int", 10901]}
    return {
        "nodes": nodes,
        "arg_nodes": [i for i, n in enumerate(graph.nodes) if n.is_variable],
        # only a hint for readers; MXNet recomputes it on load
        "node_row_ptr": row_ptr,
        "heads": [[e.node, e.index, e.version] for e in graph.heads],
        "attrs": attrs,
    }


def graph_to_json(graph: Graph, indent: int | None = None) -> str:
    """MXNet symbol JSON for ``graph``, casts included."""
    return json.dumps(_graph_obj(graph), indent=indent)


def symbol_json(sym) -> str:
    """JSON of an ``mx.sym.Symbol`` with its amp casts kept."""
    return sym.tojson(remove_amp_cast=False)


def graph_from_symbol(sym) -> Graph:
    """The :class:`Graph` of an ``mx.sym.Symbol`` (the symbol is not modified)."""
    return graph_from_json(symbol_json(sym), where=f"symbol {sym.name!r}")


def graph_to_symbol(graph: Graph):
    """A new ``mx.sym.Symbol`` for ``graph``."""
    import mxnet as mx
    return mx.sym.load_json(graph_to_json(graph))


def atomic_write(path: str | os.PathLike, write) -> None:
    """Write a file under ``path`` all at once: ``write(tmp_path)`` fills a temporary file
    beside it, which is renamed over ``path`` only when complete, so an interrupted write
    never leaves a truncated file under the final name."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_symbol(path: str | os.PathLike, sym) -> None:
    """Save ``sym`` to ``path`` atomically, keeping its amp casts."""
    text = symbol_json(sym)

    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)
    atomic_write(path, write)


def save_checkpoint(prefix: str, epoch: int, sym, arg_params: Mapping, aux_params: Mapping) -> None:
    """Like ``mx.model.save_checkpoint`` but keeps amp casts and writes both files atomically.

    The params file is written first, so a reader never sees a new symbol with old params."""
    import mxnet as mx
    save = {f"arg:{k}": v.as_in_context(mx.cpu()) for k, v in arg_params.items()}
    save.update({f"aux:{k}": v.as_in_context(mx.cpu()) for k, v in aux_params.items()})
    atomic_write(f"{prefix}-{epoch:04d}.params", lambda tmp: mx.nd.save(tmp, save))
    save_symbol(f"{prefix}-symbol.json", sym)


def load_checkpoint(prefix: str, epoch: int = 0):
    """Load ``(sym, arg_params, aux_params)`` like ``mx.model.load_checkpoint``, with errors
    that name the file."""
    import mxnet as mx
    sym_path, params_path = f"{prefix}-symbol.json", f"{prefix}-{epoch:04d}.params"
    for p in (sym_path, params_path):
        if not os.path.isfile(p):
            raise CheckpointError(f"checkpoint file not found: {p}")
    with open(sym_path) as f:
        text = f.read()
    graph_from_json(text, where=sym_path)  # typed error for malformed JSON
    try:
        sym = mx.sym.load_json(text)
    except mx.base.MXNetError as err:
        raise GraphError(f"{sym_path}: MXNet cannot load this symbol: {str(err).splitlines()[0]}") from None
    try:
        saved = mx.nd.load(params_path)
    except mx.base.MXNetError as err:
        raise CheckpointError(f"{params_path}: not a readable MXNet params file "
                              f"(truncated?): {str(err).splitlines()[0]}") from None
    if not isinstance(saved, dict):
        raise CheckpointError(f"{params_path}: holds a list of arrays, not named params")
    arg_params, aux_params = {}, {}
    for key, value in saved.items():
        kind, _, name = key.partition(":")
        if kind == "arg":
            arg_params[name] = value
        elif kind == "aux":
            aux_params[name] = value
        else:
            raise CheckpointError(f"{params_path}: key {key!r} is neither 'arg:…' nor 'aux:…'")
    return sym, arg_params, aux_params
