"""A Gluon block as a model: its graph (from the cached graph, or traced on symbol
variables without changing the caller's block), its params by name, and
:func:`export_block`, which writes any block with its amp casts kept, atomically.

Used by :mod:`mxnet_amp.gluon.adapter` (conversion) and :mod:`mxnet_amp.gluon.block` (the block's
``export``); imports mxnet only where it runs.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence

from ..errors import ArgumentError, DeferredInitError, GraphError, ParamError, error_text
from ..files.paths import check_epoch
from ..ir.graph import Graph
from ..mx.arguments import check_names, check_path
from ..mx.io import graph_from_symbol, graph_to_symbol, save_checkpoint

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet.gluon import HybridBlock
    from mxnet.symbol import Symbol

__all__ = ["BlockGraph", "BlockModel", "block_graph", "block_model", "model_params", "export_block"]


def _gluon() -> Any:
    from mxnet import gluon
    return gluon


class BlockGraph(NamedTuple):
    """A block's graph (unpacks as ``(input names, output symbol, input format, output format)``;
    the formats are Gluon's nesting of the inputs and outputs)."""

    input_names: list[str]
    symbol: Symbol
    in_format: Any
    out_format: Any


class BlockModel(NamedTuple):
    """What :func:`block_model` returns (unpacks as ``(symbol, arg_params, aux_params,
    input_names)``)."""

    symbol: Symbol
    arg_params: dict
    aux_params: dict
    input_names: list[str]


def _traced_graph(block: HybridBlock, input_names: Sequence[str]) -> BlockGraph:
    """The block's graph, by calling ``block`` on symbol variables; the block is not
    hybridized and keeps its cached state."""
    import mxnet as mx
    from mxnet.gluon.block import _flatten
    inputs = [mx.sym.var(n) for n in input_names]
    try:
        out = block(*inputs)
        flat, out_format = _flatten(out, "output")
    except TypeError as err:
        raise GraphError(
            f"tracing {type(block).__name__} with inputs {list(input_names)} failed ({err}); "
            "pass input_names with one name per positional input of its forward, or "
            "hybridize it and run one forward pass first") from None
    except ValueError as err:
        # MXNet's own check of what forward returned (a dict, say)
        raise GraphError(
            f"the block {type(block).__name__} cannot be converted: {error_text(err)}; only "
            "blocks whose forward returns a symbol or a (nested) list or tuple of them have a "
            "graph to convert") from None
    except (AttributeError, mx.base.MXNetError) as err:
        # what hybridize() would hit too: the block reads x.shape, calls asnumpy(), ...
        raise GraphError(
            f"{type(block).__name__} cannot be traced symbolically: {error_text(err)}; only "
            "blocks whose forward runs on symbols (blocks that can hybridize) have a graph "
            "to convert") from None
    if not flat or not all(isinstance(s, mx.sym.Symbol) for s in flat):
        raise GraphError(f"{type(block).__name__} returned {type(out).__name__} when called "
                         "on symbols; only (nested) tuples of symbols can be converted")
    sym = flat[0] if len(flat) == 1 else mx.sym.Group(flat)
    return BlockGraph(list(input_names), sym, 0 if len(input_names) == 1 else [0] * len(input_names),
                      out_format)


def _cached_graph(block: Any) -> BlockGraph:
    """The block's graph, from its cached graph."""
    syms, out = block._cached_graph
    return BlockGraph([s.name for s in syms], out, block._in_format, block._out_format)


def _rename_inputs(sym: Symbol, old: Sequence[str], new: Sequence[str]) -> Symbol:
    """``sym`` with its input variables ``old`` renamed ``new`` (a new symbol)."""
    if list(old) == list(new):
        return sym
    if len(set(new)) != len(new):
        raise GraphError(f"input_names {list(new)} name one input twice")
    graph = graph_from_symbol(sym)
    taken = {n.name for n in graph.nodes} - set(old)
    clash = sorted(set(new) & taken)
    if clash:
        raise GraphError(f"input_names {clash} are already names of nodes or params of the block")
    mapping = dict(zip(old, new))
    nodes = tuple(n.replace(name=mapping[n.name]) if n.is_variable and n.name in mapping else n
                  for n in graph.nodes)
    return graph_to_symbol(Graph(nodes, graph.heads, graph.attrs))


def block_graph(block: HybridBlock, input_names: Sequence[str] | None) -> BlockGraph:
    """The block's graph: its input names, output symbol, input and output format."""
    gluon = _gluon()
    if not isinstance(block, gluon.HybridBlock):
        raise ArgumentError(f"block must be a gluon HybridBlock or SymbolBlock, got "
                            f"{type(block).__name__} (a plain Block has no symbolic graph to convert)")
    input_names = check_names(input_names, "input_names")
    if block._cached_graph:
        names, sym, in_format, out_format = _cached_graph(block)
        if input_names is not None:
            if len(input_names) != len(names):
                raise GraphError(f"input_names {list(input_names)} give {len(input_names)} "
                                 f"name(s) but the block takes {len(names)} input(s) {names}")
            sym = _rename_inputs(sym, names, input_names)
            names = list(input_names)
        return BlockGraph(names, sym, in_format, out_format)
    return _traced_graph(block, list(input_names) if input_names is not None else ["data"])


def _param_array(param: Any) -> Any:
    """The array of a gluon Parameter (its first context), or a typed error if it has none."""
    if param._data is None:
        if param._deferred_init:
            raise DeferredInitError(
                f"parameter {param.name!r} has deferred initialisation: its shape is not known "
                "until data flows through the block. Run one forward pass (net(x)) first, or "
                "give the layers their input sizes (in_units / in_channels) so that "
                "initialize() can allocate the weights, then convert")
        raise DeferredInitError(f"parameter {param.name!r} is not initialised: call "
                                "block.initialize() or block.load_parameters(...) first")
    return param.data(param.list_ctx()[0])


def block_model(block: HybridBlock, input_names: Sequence[str] | None = None
                ) -> BlockModel:
    """The symbol and params of a Gluon block, as :func:`mxnet_amp.convert_model` takes them.

    Parameters
    ----------
    block : HybridBlock or SymbolBlock
        Not modified (a block that never ran hybridized is traced symbolically).
    input_names : list of str, optional
        Names for the block's inputs, one per positional input. Default: the names its cached
        graph has (``data``, or ``data0``, ``data1``… as ``export()`` writes them), else
        ``['data']``.

    Returns
    -------
    BlockModel
        Symbol, arg params, aux params (the block's own arrays, not copies) and input names
        (unpacks as that 4-tuple).

    Raises
    ------
    DeferredInitError
        A parameter the graph reads is not initialised or still waits for its shape.
    """
    graph = block_graph(block, input_names)
    args, auxs = model_params(block, graph.symbol, graph.input_names)
    return BlockModel(graph.symbol, args, auxs, graph.input_names)


def model_params(block: HybridBlock, sym: Symbol, names: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(arg params, aux params)`` of ``block`` that ``sym`` reads (its ``names`` inputs
    excepted); :class:`ParamError` for a read name that is neither an input nor a param."""
    params = {p.name: p for p in block.collect_params().values()}
    arg_params: dict[str, Any] = {}
    aux_params: dict[str, Any] = {}
    for group, wanted in ((arg_params, sym.list_arguments()), (aux_params, sym.list_auxiliary_states())):
        for name in wanted:
            if name in names:
                continue
            if name not in params:
                raise ParamError(f"the graph of {type(block).__name__} reads {name!r}, which is "
                                 f"neither one of its inputs {list(names)} nor one of its params; "
                                 "if it is an input, name it in input_names")
            group[name] = _param_array(params[name])
    return arg_params, aux_params


def export_block(block: HybridBlock, path: str | os.PathLike, epoch: int = 0, *,
                 fused_for: str | None = None) -> tuple[str, str]:
    """Write ``block`` as ``path-symbol.json`` and ``path-%04d.params``, amp casts kept.

    Unlike ``HybridBlock.export`` (1.9.1), the casts are kept, the params are written even
    before any forward pass, and each file appears only when complete (params first).
    The files load with ``SymbolBlock.imports(json, input_names, params)`` or
    :func:`mxnet_amp.load_checkpoint`.

    Parameters
    ----------
    block : HybridBlock or SymbolBlock
        The block to save, e.g. what :func:`convert_hybrid_block` returns.
    path : str or PathLike
        The file prefix.
    epoch : int, default 0
        The epoch number in the params file name.
    fused_for : {None, 'cpu'}, default None
        ``'cpu'``: the graph written already partitioned by MXNet's oneDNN backend where that
        removes a generic bf16 kernel, for ``SymbolBlock.imports`` + a plain ``hybridize()``
        (see :func:`mxnet_amp.save_checkpoint`).

    Returns
    -------
    (str, str)
        The symbol file and params file paths.
    """
    import mxnet as mx
    prefix = str(check_path(path, "path"))
    epoch = check_epoch(epoch)
    sym, arg_params, aux_params, _ = block_model(block)
    cpu = mx.cpu()
    save_checkpoint(prefix, epoch, sym,
                    {k: v.as_in_context(cpu) for k, v in arg_params.items()},
                    {k: v.as_in_context(cpu) for k, v in aux_params.items()}, fused_for=fused_for)
    return f"{prefix}-symbol.json", f"{prefix}-{epoch:04d}.params"
