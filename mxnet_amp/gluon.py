"""Gluon adapter: convert a HybridBlock / SymbolBlock to a mixed precision ``SymbolBlock``.

The block's graph comes from its cached graph (a SymbolBlock, or a HybridBlock that ran
hybridized) or, otherwise, from calling it on symbol variables, which traces the same
``hybrid_forward`` without hybridizing the caller's block or changing its state. The graph
and params go through :func:`mxnet_amp.convert.convert_model_full`; the result is a new
``SymbolBlock`` whose params hold copies in the dtypes the converted graph infers, with the
original param names, so that its export loads back with ``SymbolBlock.imports``.

MXNet 1.9.1's ``HybridBlock.export`` drops amp casts unless told ``remove_amp_cast=False``;
the returned block is an :class:`~mxnet_amp.gluon_block.AMPSymbolBlock`, whose ``export()``
keeps them, and :func:`export_block` writes any block with its casts, atomically.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .block_model import block_graph, block_model, export_block, model_params
from .convert import convert_model_full
from .options import make_options

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet import Context
    from mxnet.gluon import HybridBlock
    from mxnet.symbol import Symbol

    from .gluon_block import AMPSymbolBlock

__all__ = ["convert_hybrid_block", "convert_block", "export_block", "emulate_block",
           "block_model"]


def _flat_outputs(sym: Symbol) -> list:
    """One single-output symbol per output of ``sym``."""
    return [sym[k] for k in range(len(sym.list_outputs()))]


def _contexts(block, ctx):
    import mxnet as mx
    if ctx is not None:
        return [ctx] if isinstance(ctx, mx.Context) else list(ctx)
    for param in block.collect_params().values():
        if param._data is not None:
            return param.list_ctx()
    return [mx.current_context()]


def _symbol_block(sym: Symbol, names: Sequence[str], in_format: Any, out_format: Any, params: Mapping,
                  ctx: Any) -> AMPSymbolBlock:
    """A SymbolBlock running ``sym`` with copies of ``params`` (each keeps its dtype)."""
    import mxnet as mx
    from mxnet.gluon.block import _regroup

    from .gluon_block import AMPSymbolBlock
    # typed inputs let SymbolBlock infer its params' dtypes instead of warning
    input_syms = [mx.sym.var(n, dtype="float32") for n in names]
    inputs = _regroup(input_syms, in_format) if in_format is not None else input_syms
    outputs = _flat_outputs(sym)
    if mx.util.is_np_array():
        # under npx.set_np() a SymbolBlock must hold numpy-interface symbols
        input_syms = [s.as_np_ndarray() for s in input_syms]
        inputs = _regroup(input_syms, in_format) if in_format is not None else input_syms
        outputs = [s.as_np_ndarray() for s in outputs]
    outputs = _regroup(outputs, out_format) if out_format is not None else outputs
    # export() of this subclass keeps the amp casts that SymbolBlock.export() would drop
    net = AMPSymbolBlock(outputs, inputs)
    # an inference block: no gradient array beside each weight (as much memory again as the
    # params; mx.np cannot even allocate a bfloat16 one, "unknown type void16"). Fine-tuning
    # turns them on: net.collect_params().setattr('grad_req', 'write')
    net.collect_params().setattr("grad_req", "null")
    # dtype_source='saved': each param takes its array's dtype (SymbolBlock would make it
    # float32); the arrays are copied onto ``ctx``, never shared with the source block
    net.collect_params().load_dict(dict(params), ctx=ctx, cast_dtype=True, dtype_source="saved")
    # build the cached op now (as the first forward would; nothing runs): MXNet's own
    # export() saves the params its cached op lists, none before a forward pass
    net._build_cache()
    return net


def convert_hybrid_block(block: HybridBlock, target_dtype: str = "float16",
                         target_dtype_ops: Sequence[str] | None = None,
                         fp32_ops: Sequence[str] | None = None,
                         conditional_fp32_ops: Sequence[tuple[str, str, Sequence[str]]] | None = None,
                         excluded_sym_names: Sequence[str] | None = None,
                         ctx: Context | Sequence[Context] | None = None,
                         cast_optional_params: bool = True, *,
                         widest_dtype_ops: Sequence[str] | None = None,
                         input_names: Sequence[str] | None = None,
                         fold_batchnorm: bool = False,
                         follow_ops: Sequence[str] | None = None) -> AMPSymbolBlock:
    """Convert an fp32 Gluon block to a mixed precision ``SymbolBlock`` for inference.

    The positional parameters are those of ``mx.contrib.amp.convert_hybrid_block``, in its
    order (a call written for it keeps its meaning); the options it lacks are keyword-only.

    Parameters
    ----------
    block : HybridBlock or SymbolBlock
        The fp32 model: hybridized or not, run or not, as long as its params are initialised.
        It is not modified and keeps working in fp32.
    target_dtype : {'float16', 'bfloat16'}, default 'float16'
    target_dtype_ops, fp32_ops, widest_dtype_ops, follow_ops, conditional_fp32_ops, excluded_sym_names
        As in :func:`mxnet_amp.convert_model`.
    input_names : list of str, optional
        Names of the block's inputs, one per positional input (several inputs need them
        when the block never ran hybridized). Default: those of its cached graph (``data``,
        or ``data0``, ``data1``… as ``export()`` names them), else ``['data']``. These are
        the ``input_names`` to give ``SymbolBlock.imports`` for the exported block.
    ctx : Context or list of Context, optional
        Where the converted params live; default where the block's params live (unlike
        ``mx.contrib.amp``, never ``gpu(0)`` unasked).
    cast_optional_params : bool, default True
        Store in low precision the weights that are only read by low precision ops (False:
        every weight stays float32 and is cast at every run, ``mx.contrib.amp``'s default).
    fold_batchnorm : bool, default False
        Fold inference BatchNorms into the op before them first, as in
        :func:`mxnet_amp.convert_model`.

    Returns
    -------
    AMPSymbolBlock
        A ``SymbolBlock`` taking float32 inputs and returning float32 outputs in the block's
        output structure; its params carry the converted dtypes and the block's param names.
        Its ``export(prefix)`` keeps the amp casts (``SymbolBlock.export`` drops them), as
        :func:`export_block` does; the files re-import with ``SymbolBlock.imports``. Its
        params have ``grad_req='null'``: no gradient arrays, as much memory again as the
        params, are allocated for inference (``collect_params().setattr('grad_req',
        'write')`` turns them on).

    Raises
    ------
    DeferredInitError
        The block's params are not initialised yet.
    AlreadyConvertedError, GraphError, ParamError, TypeInferenceError
        As for :func:`mxnet_amp.convert_model`.
    """
    options = make_options(target_dtype, target_dtype_ops, fp32_ops, widest_dtype_ops,
                           conditional_fp32_ops, follow_ops, excluded_sym_names,
                           cast_optional_params, fold_batchnorm)
    names, sym, in_format, out_format = block_graph(block, input_names)
    arg_params, aux_params = model_params(block, sym, names)
    ctx_list = _contexts(block, ctx)
    new_sym, new_args, new_auxs, _ = convert_model_full(sym, arg_params, aux_params, options,
                                                        data_names=names)
    params = {f"arg:{k}": v for k, v in new_args.items()}
    params.update({f"aux:{k}": v for k, v in new_auxs.items()})
    return _symbol_block(new_sym, names, in_format, out_format, params, ctx_list)


convert_block = convert_hybrid_block


def emulate_block(block: HybridBlock,
                  ctx: Context | Sequence[Context] | None = None) -> AMPSymbolBlock:
    """A float32 ``SymbolBlock`` simulating a converted block's low precision numerics.

    See :mod:`mxnet_amp.emulation`: every tensor the converted graph holds in low precision
    is rounded to that dtype, so this runs on any CPU (no avx512 or GPU needed) and gives
    what the low precision block computes, up to what that module lists as not modelled.
    Same inputs, input names and output structure as ``block``; ``block`` is not modified.

    Parameters
    ----------
    block : HybridBlock or SymbolBlock
        A converted block, e.g. what :func:`convert_hybrid_block` returns.
    ctx : Context or list of Context, optional
        Where the emulating block's params live; default where ``block``'s live.

    Returns
    -------
    AMPSymbolBlock
        Float32 inputs and outputs, low precision rounding simulated.
    """
    from .emulation import emulate_model
    names, sym, in_format, out_format = block_graph(block, None)
    arg_params, aux_params = model_params(block, sym, names)
    esym, eargs, eauxs = emulate_model(sym, arg_params, aux_params)
    params = {f"arg:{k}": v for k, v in eargs.items()}
    params.update({f"aux:{k}": v for k, v in eauxs.items()})
    return _symbol_block(esym, names, in_format, out_format, params, _contexts(block, ctx))


def converted_symbol_block(block: HybridBlock, input_names: Sequence[str] | None, sym: Symbol,
                           arg_params: Mapping, aux_params: Mapping,
                           ctx: Context | Sequence[Context] | None = None) -> AMPSymbolBlock:
    """The ``AMPSymbolBlock`` running a converted model of ``block`` (``sym`` and its params,
    as :func:`mxnet_amp.convert_model` returns them), with ``block``'s inputs, output
    structure and contexts, as :func:`convert_hybrid_block` builds it."""
    names, _, in_format, out_format = block_graph(block, input_names)
    params = {f"arg:{k}": v for k, v in arg_params.items()}
    params.update({f"aux:{k}": v for k, v in aux_params.items()})
    return _symbol_block(sym, names, in_format, out_format, params, _contexts(block, ctx))

