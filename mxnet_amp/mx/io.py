"""Symbol JSON <-> :class:`~mxnet_amp.ir.graph.Graph`, and Symbol / checkpoint adapters.

MXNet 1.9.1's ``Symbol.tojson()``/``save()`` and ``mx.model.save_checkpoint`` drop every
``amp_cast``/``amp_multicast`` node by default, so a converted graph is always serialised
here with ``remove_amp_cast=False`` (or by :func:`graph_to_json`).
"""
from __future__ import annotations

import json
import os
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import ArgumentError, CheckpointError, GraphError, UnknownOpError, error_text
from ..files.atomic import atomic_writes, text_writer
from ..files.interrupts import interruptible
from ..files.paths import checkpoint_files, refuse_stream_prefix
from ..files.progress import byte_bar, preread, watch_growth
from ..ir.dtypes import array_nbytes
from ..ir.gcpause import gc_paused
from ..ir.graph import Entry, Graph, Node, graph_obj
from .arguments import check_optional_bool, check_symbol, param_dict
from .entries import check_entries
from .fused import check_fused_for, fuse_for_cpu, keep_fused_where_generic, warn_saved
from .registry import check_attrs, registry_op_names

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet.symbol import Symbol

__all__ = ["graph_from_json", "graph_to_json", "graph_from_symbol", "graph_to_symbol", "symbol_json",
           "save_checkpoint", "load_checkpoint", "existing_checkpoint_files"]

_NODE_KEYS = frozenset({"op", "name", "inputs", "attrs", "attr", "param", "subgraphs"})
_EMPTY: Mapping[str, str] = MappingProxyType({})


def _parse_graph(obj: Any, where: str) -> Graph:
    if not isinstance(obj, dict) or not isinstance(obj.get("nodes"), list):
        raise GraphError(f"{where}: not an MXNet symbol graph (no 'nodes' list)")
    raw_nodes = obj["nodes"]
    nodes: list[Node] = []
    append = nodes.append
    for i, raw in enumerate(raw_nodes):
        try:
            op, name = raw["op"], raw["name"]
            inputs = tuple([Entry(*e) for e in raw["inputs"]]) if raw.get("inputs") else ()
        except (KeyError, TypeError):
            raise GraphError(f"{where}: node {i} is malformed (needs 'op', 'name' and "
                             f"[node, index, version] inputs): {str(raw)[:160]}") from None
        for e in inputs:
            if type(e.node) is not int or type(e.output) is not int or type(e.version) is not int:
                raise GraphError(f"{where}: node {name!r} has a malformed input {list(raw['inputs'])!r}"
                                 " (each input is [node, index, version] integers)")
            if not 0 <= e.node < len(raw_nodes):
                raise GraphError(f"{where}: node {name!r} reads node {e.node}, which does not "
                                 f"exist (the graph has {len(raw_nodes)} nodes, 0 to "
                                 f"{len(raw_nodes) - 1})")
            if e.node >= i:
                raise GraphError(f"{where}: node {name!r} reads node {e.node}, which does not "
                                 "come before it (nodes must be in topological order)")
        # MXNet has written attributes under 'attrs', 'attr' (<=1.x) and 'param' (0.x)
        attrs = raw.get("attrs") or raw.get("attr") or raw.get("param") or _EMPTY
        if not isinstance(attrs, (dict, MappingProxyType)):
            raise GraphError(f"{where}: node {name!r} has attributes {str(attrs)[:80]!r}, "
                             "not a mapping of names to values")
        if attrs is not _EMPTY:
            if not all(type(v) is str for v in attrs.values()):
                attrs = {str(k): str(v) for k, v in attrs.items()}
            attrs = MappingProxyType(attrs)
        subgraphs: tuple[Graph, ...] = ()
        if "subgraphs" in raw:
            subgraphs = tuple(_parse_graph(g, f"{where}: subgraph of {name!r}")
                              for g in raw["subgraphs"])
        extra: Mapping[str, object] = _EMPTY
        if len(raw) > 3 and not _NODE_KEYS.issuperset(raw):
            extra = MappingProxyType({k: v for k, v in raw.items() if k not in _NODE_KEYS})
        append(Node(op, name, inputs, attrs, subgraphs, extra))
    heads = []
    raw_heads = obj.get("heads", ())
    for k, e in enumerate(raw_heads if isinstance(raw_heads, list) else [raw_heads]):
        if not isinstance(e, (list, tuple)) or not 2 <= len(e) <= 3 \
                or not all(type(v) is int for v in e):
            raise GraphError(f"{where}: malformed head {e!r} (each head is [node, index, "
                             "version] integers)")
        if not 0 <= e[0] < len(nodes):
            raise GraphError(f"{where}: malformed head {e!r}: graph output {k} reads node "
                             f"{e[0]}, which does not exist (the graph has {len(nodes)} nodes)")
        heads.append(Entry(*e))
    if not heads:
        raise GraphError(f"{where}: the graph has no outputs ('heads')")
    attrs = obj.get("attrs", {})
    return Graph(tuple(nodes), tuple(heads), MappingProxyType(dict(attrs)))


def graph_from_json(text: str | bytes, where: str = "symbol JSON") -> Graph:
    """Parse MXNet symbol JSON into a :class:`Graph`; :class:`GraphError` names what is wrong."""
    with gc_paused():
        try:
            obj = json.loads(text)
        except (json.JSONDecodeError, TypeError, UnicodeDecodeError) as err:
            raise GraphError(f"{where}: not valid JSON ({err}); the file may be truncated") from None
        except RecursionError:
            raise GraphError(f"{where}: JSON nested deeper than Python's parser goes; a symbol "
                             "file nests a few levels only: it is corrupt or not a symbol") from None
        graph = _parse_graph(obj, where)
    check_entries(graph, where)   # MXNet crashes on an output index past its producer's
    check_attrs(graph.nodes, where)
    return graph


def graph_to_json(graph: Graph, indent: int | None = None) -> str:
    """MXNet symbol JSON for ``graph``, casts included.

    Names are written as they are, not as ``\\u`` escapes, which MXNet's JSON reader does
    not know; without ``indent`` the text is compact (quicker to write and to load)."""
    with gc_paused():
        return json.dumps(graph_obj(graph), indent=indent, ensure_ascii=False,
                          separators=(",", ":") if indent is None else None)


def symbol_json(sym: Symbol) -> str:
    """JSON of an ``mx.sym.Symbol`` with its amp casts kept."""
    return str(sym.tojson(remove_amp_cast=False))


def graph_from_symbol(sym: Symbol) -> Graph:
    """The :class:`Graph` of an ``mx.sym.Symbol`` (the symbol is not modified);
    :class:`GraphError` saying what to pass for anything else (a path, a Gluon block)."""
    check_symbol(sym)
    return graph_from_json(symbol_json(sym), where=f"symbol {sym.name!r}")


def graph_to_symbol(graph: Graph) -> Symbol:
    """A new ``mx.sym.Symbol`` for ``graph``.

    Raises :class:`~mxnet_amp.errors.UnknownOpError` naming the nodes whose op this MXNet
    build does not register (a plugin library not loaded, a typo in hand-written JSON), and
    :class:`GraphError` when MXNet rejects the graph otherwise."""
    import mxnet as mx
    try:
        return mx.sym.load_json(graph_to_json(graph))
    except mx.base.MXNetError as err:
        registry_op_names.cache_clear()  # a plugin library may have added ops since
        known = registry_op_names()
        unknown: dict[str, object] = {}
        stack = [graph]
        while stack:
            g = stack.pop()
            for n in g.nodes:
                if not n.is_variable and n.op not in known:
                    unknown.setdefault(n.op, n.name)
                stack.extend(n.subgraphs)
        if unknown:
            nodes = ", ".join(f"{name!r} ({op})" for op, name in sorted(unknown.items()))
            raise UnknownOpError(unknown, f"the symbol's node(s) {nodes}") from None
        raise GraphError(f"MXNet cannot build this graph: {error_text(err)}") from None


def save_checkpoint(prefix: str, epoch: int, sym: Symbol, arg_params: Mapping, aux_params: Mapping, *,
                    progress: bool | None = False, fused_for: str | None = None) -> None:
    """Like ``mx.model.save_checkpoint`` but keeps amp casts and writes both files atomically.

    Both files are written to temporary names and then renamed one right after the other
    (params first), so an interrupted save leaves no truncated file under either name.

    Parameters
    ----------
    prefix : str
        Writes ``prefix-symbol.json`` and ``prefix-%04d.params``.
    epoch : int
        The epoch number in the params file name.
    sym : Symbol
        The model; its ``amp_cast`` / ``amp_multicast`` nodes are kept.
    arg_params, aux_params : dict of str to NDArray
        The params, saved as ``arg:NAME`` / ``aux:NAME`` (copied to the CPU first).
    progress : bool or None, default False
        Show a bar of the bytes written on stderr (None: only when stderr is a terminal).
    fused_for : {None, 'cpu'}, default None
        ``'cpu'`` writes the graph already partitioned by MXNet's oneDNN backend
        (:func:`mxnet_amp.mx.fused.fuse_for_cpu`) where fusing removes a generic bf16 kernel
        (:func:`mxnet_amp.mx.fused.keep_fused_where_generic`: relu6's ``clip`` after a conv, say),
        so that ``SymbolBlock.imports`` + a plain ``hybridize()`` runs no slow generic kernel
        there; ``Module`` / ``simple_bind`` / the C predict API fuse the rest at bind. Such a
        file binds on CPUs only.

    Raises
    ------
    FusionError
        ``fused_for`` is not None or ``'cpu'``, or the model computes in float16 (GPU only),
        or MXNet has no oneDNN; nothing is written.
    """
    import mxnet as mx
    given = sym   # what the notes after the write read (fused_for may replace sym)
    if check_fused_for(fused_for) == "cpu":
        fused = fuse_for_cpu(sym, graph_from_symbol(sym), what=f"the model saved as {prefix}")
        sym = graph_to_symbol(keep_fused_where_generic(graph_from_symbol(fused)))
    refuse_stream_prefix(prefix, "checkpoint prefix")
    sym, progress = check_symbol(sym), check_optional_bool(progress, "progress")
    if arg_params is None or aux_params is None and sym.list_auxiliary_states():
        # mx.nd.save would write a params file without them, which no loader can bind
        raise ArgumentError(f"{'arg' if arg_params is None else 'aux'}_params is None: the model's "
                            "params are needed (pass {} for a model without any)")
    arg_params, aux_params = param_dict(arg_params, "arg_params"), param_dict(aux_params, "aux_params")
    params_file, sym_file = checkpoint_files(prefix, epoch)[::-1]
    save = {f"arg:{k}": v.as_in_context(mx.cpu()) for k, v in arg_params.items()}
    save.update({f"aux:{k}": v.as_in_context(mx.cpu()) for k, v in aux_params.items()})

    def write_params(tmp: str) -> None:
        total = sum(array_nbytes(v) for v in save.values())
        with byte_bar(f"writing {os.path.basename(params_file)}", total, progress) as bar, \
                watch_growth(tmp, bar):
            mx.nd.save(tmp, save)
    atomic_writes([(params_file, write_params), (sym_file, text_writer(symbol_json(sym)))])
    # where it runs, how to load it fast: said once the files are there
    graph = graph_from_symbol(given)
    warn_saved(graph, lambda: graph_from_symbol(fuse_for_cpu(given, graph)), prefix, fused_for)


def existing_checkpoint_files(prefix: str | os.PathLike, epoch: int) -> tuple[str, str]:
    """``(prefix-symbol.json, prefix-NNNN.params)``; :class:`CheckpointError` naming the
    first that is not a file."""
    files = checkpoint_files(prefix, epoch)
    for path in files:
        if not os.path.isfile(path):
            raise CheckpointError(f"checkpoint file not found: {path}")
    return files


def load_checkpoint(prefix: str, epoch: int = 0, *,
                    progress: bool | None = False) -> tuple[Symbol, dict, dict]:
    """Load ``(sym, arg_params, aux_params)`` like ``mx.model.load_checkpoint``, with errors
    that name the file.

    Parameters
    ----------
    prefix : str
        Reads ``prefix-symbol.json`` and ``prefix-%04d.params``.
    epoch : int, default 0
    progress : bool or None, default False
        Show a bar of the bytes read on stderr (None: only when stderr is a terminal).

    Returns
    -------
    (Symbol, dict, dict)
        The symbol (casts kept) and the arg and aux params.

    Raises
    ------
    CheckpointError
        A file is missing or not a readable params file.
    GraphError
        The symbol file is not a symbol MXNet can load.
    """
    import mxnet as mx
    sym_path, params_path = existing_checkpoint_files(prefix, epoch)
    with open(sym_path, "rb") as f:
        raw = f.read()
    graph_from_json(raw, where=sym_path)  # typed error for malformed JSON (or bytes: not UTF-8)
    try:
        sym = mx.sym.load_json(raw.decode("utf-8"))
    except mx.base.MXNetError as err:
        raise GraphError(f"{sym_path}: MXNet cannot load this symbol: {error_text(err)}") from None
    if progress or progress is None:
        with byte_bar(f"reading {os.path.basename(params_path)}", os.path.getsize(params_path),
                      progress) as bar:
            preread(params_path, bar)
    try:
        # one C call of seconds for a large file: on a helper thread, so Ctrl-C acts at once
        saved = interruptible(mx.nd.load, params_path)
    except mx.base.MXNetError as err:
        raise CheckpointError(f"{params_path}: not a readable MXNet params file "
                              f"(truncated?): {error_text(err)}") from None
    if not isinstance(saved, dict):
        if not saved:   # mx.nd.save of an empty dict reads back as an empty list
            saved = {}
        else:
            raise CheckpointError(f"{params_path}: holds a list of {len(saved)} unnamed arrays, "
                                  "not named 'arg:NAME' / 'aux:NAME' params")
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
