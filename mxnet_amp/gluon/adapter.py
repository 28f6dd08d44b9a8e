"""Gluon adapter: convert a HybridBlock / SymbolBlock to a mixed precision ``SymbolBlock``.

The block's graph comes from its cached graph (a SymbolBlock, or a HybridBlock that ran
hybridized) or, otherwise, from calling it on symbol variables, which traces the same
``hybrid_forward`` without hybridizing the caller's block or changing its state. The graph
and params go through :func:`mxnet_amp.convert.convert_model_full`; the result is a new
``SymbolBlock`` whose params hold copies in the dtypes the converted graph infers, with the
original param names, so that its export loads back with ``SymbolBlock.imports``.

MXNet 1.9.1's ``HybridBlock.export`` drops amp casts unless told ``remove_amp_cast=False``;
the returned block is an :class:`~mxnet_amp.gluon.block.AMPSymbolBlock`, whose ``export()``
keeps them, and :func:`export_block` writes any block with its casts, atomically.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..convert import convert_model_full
from ..emulation import emulate_model
from ..errors import BackendError, error_text
from ..mx.arguments import check_contexts
from ..mx.hardware import warn_not_native
from ..options import OpLists, make_options
from .model import block_graph, model_params

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet import Context
    from mxnet.gluon import HybridBlock
    from mxnet.symbol import Symbol

    from ..record import Conversion
    from ..options import ConvertOptions
    from .block import AMPSymbolBlock   # why: block.py imports mxnet, which `import mxnet_amp` never loads

__all__ = ["convert_hybrid_block", "convert_block", "emulate_block"]


def _flat_outputs(sym: Symbol) -> list:
    """One single-output symbol per output of ``sym``."""
    return [sym[k] for k in range(len(sym.list_outputs()))]


def _contexts(block: Any, ctx: Any) -> Any:
    import mxnet as mx
    if ctx is not None:
        return check_contexts(ctx)
    for param in block.collect_params().values():
        if param._data is not None:
            return param.list_ctx()
    return [mx.current_context()]


def _without_none_inputs(fmt: Any) -> Any:
    """A cached graph's input format less the arguments that hold no input: ``None``
    (``-1``) and empty lists. gluonnlp's BERT called without ``masked_positions`` has
    ``[0, 0, 0, -1]``, RoBERTa (no token types) ``[0, [], 0, -1]``: the graph has no
    variable for them and a SymbolBlock takes variables only, so the converted block
    takes the arrays alone (``(tokens, valid_length)`` for RoBERTa; MXNet still accepts
    trailing ``None`` arguments)."""
    if isinstance(fmt, int):
        return fmt
    kept = [_without_none_inputs(f) for f in fmt if f != -1]
    return [f for f in kept if f != []]


def _mkldnn_available(ctx_list: Sequence[Context]) -> bool:
    """True when MXNet's oneDNN subgraph backend can run a block on ``ctx_list``."""
    import mxnet as mx
    return (all(c.device_type == "cpu" for c in ctx_list)
            and mx.runtime.Features().is_enabled("MKLDNN"))


def check_hybridize(hybridize: bool | str | None) -> str | None:
    """The converters' ``hybridize=`` keyword as ``'default'``, None (no backend) or a
    subgraph backend name MXNet registers; anything else is a :class:`BackendError`."""
    import mxnet as mx
    if hybridize is None or hybridize is True or hybridize == "default":
        return "default"
    if hybridize is False:
        return None
    if not isinstance(hybridize, str):
        raise BackendError(f"hybridize={hybridize!r}: expected None, a bool or a subgraph "
                           "backend name such as 'MKLDNN'")
    try:   # a name MXNet does not register fails here, not at the first forward pass
        mx.sym.var("data").get_backend_symbol(hybridize)
    except mx.base.MXNetError as err:
        raise BackendError(f"hybridize={hybridize!r} is not a subgraph backend of this MXNet "
                           f"build ({error_text(err)}); use None (default), False or "
                           "'MKLDNN'") from None
    return hybridize


def low_precision_conv_batchnorms(conversion: Conversion) -> list[str]:
    """BatchNorms that read a low precision Convolution directly: oneDNN's fused backend folds
    each into the conv's low precision weights, rounding them twice (measured on resnet18_v1b
    bf16: 0.062 max relative error fused, 0.006 unfused). ``fold_batchnorm=True`` leaves none
    (folded in float32, rounded once)."""
    nodes, dtypes = conversion.graph.nodes, conversion.result.node_dtypes
    low = conversion.policy.target_dtype
    return [n.name for n in nodes if n.op == "BatchNorm" and n.inputs
            and nodes[n.inputs[0].node].op == "Convolution"
            and dtypes.get(nodes[n.inputs[0].node].name) == low]


def run_settings(choice: str | None, ctx_list: Sequence[Context],
                 conversion: Conversion) -> dict | None:
    """The ``hybridize()`` keywords of a converted block (None: not hybridized with a backend).

    ``choice`` is :func:`check_hybridize`'s. ``'default'``: MXNet's fused oneDNN kernels
    (``backend='MKLDNN'``) where every context is a CPU and MXNet has oneDNN, unless the
    fusion would fold BatchNorms into low precision weights
    (:func:`low_precision_conv_batchnorms`): speed is not bought with accuracy there.
    ``static_alloc`` / ``static_shape`` go with a backend: measured faster (mobilenetv2 bs8
    bf16: 201 ms -> 112 ms), and a call with another batch size still runs (re-planned).
    """
    backend = choice
    if choice == "default":
        fusable = _mkldnn_available(ctx_list)
        backend = "MKLDNN" if fusable and not low_precision_conv_batchnorms(conversion) else None
    if backend is None:
        return None
    return {"backend": backend, "static_alloc": True, "static_shape": True}


def _symbol_block(sym: Symbol, names: Sequence[str], in_format: Any, out_format: Any, params: Mapping,
                  ctx: Any, hybridize: dict | None = None) -> AMPSymbolBlock:
    """A SymbolBlock running ``sym`` with copies of ``params`` (each keeps its dtype),
    hybridized with the keywords ``hybridize`` (:func:`run_settings`) if given."""
    import mxnet as mx
    from mxnet.gluon.block import _regroup

    from .block import AMPSymbolBlock   # why: block.py imports mxnet, which `import mxnet_amp` never loads
    in_format = _without_none_inputs(in_format) if in_format is not None else None
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
    if hybridize:
        # the backend partitions the graph at the first forward pass (it needs the shapes);
        # hybridize() again without backend= keeps it (AMPSymbolBlock.hybridize)
        net.default_backend = hybridize["backend"]
        net.hybridize(**hybridize)
    return net


def convert_hybrid_block(block: HybridBlock, target_dtype: str = "float16",
                         target_dtype_ops: Sequence[str] | None = None, fp32_ops: Sequence[str] | None = None,
                         conditional_fp32_ops: Sequence[tuple[str, str, Sequence[str]]] | None = None,
                         excluded_sym_names: Sequence[str] | None = None,
                         ctx: Context | Sequence[Context] | None = None, cast_optional_params: bool = True, *,
                         widest_dtype_ops: Sequence[str] | None = None, input_names: Sequence[str] | None = None,
                         fold_batchnorm: bool = True, follow_ops: Sequence[str] | None = None,
                         overrides: str = "replace", hybridize: bool | str | None = None,
                         guard_weight_range: bool = True, data_shapes: Mapping[str, Sequence[int]] | None = None,
                         tune: object = None) -> AMPSymbolBlock:
    """Convert an fp32 Gluon block to a mixed precision ``SymbolBlock`` for inference.

    The positional parameters are those of ``mx.contrib.amp.convert_hybrid_block``, in its
    order (a call written for it keeps its meaning); the options it lacks are keyword-only.

    Parameters
    ----------
    block : HybridBlock or SymbolBlock
        The fp32 model: hybridized or not, run or not, as long as its params are initialised.
        It is not modified and keeps working in fp32.
    target_dtype : {'float16', 'bfloat16'}, default 'float16'
    target_dtype_ops, fp32_ops, widest_dtype_ops, follow_ops, conditional_fp32_ops, excluded_sym_names, overrides, cast_optional_params, fold_batchnorm, guard_weight_range, data_shapes, tune
        As in :func:`mxnet_amp.convert_model` (a given list replaces the shipped one;
        ``data_shapes`` names the inputs as ``input_names`` does).
    input_names : list of str, optional
        Names of the block's inputs, one per positional input (several inputs need them
        when the block never ran hybridized). Default: its cached graph's (``data``, or
        ``data0``, ``data1``…, as ``SymbolBlock.imports`` of the export takes them).
    ctx : Context or list of Context, optional
        Where the converted params live; default where the block's params live (unlike
        ``mx.contrib.amp``, never ``gpu(0)`` unasked).
    hybridize : None, bool or str, default None
        None (or True, ``'default'``): MXNet's fused oneDNN kernels where the contexts are
        CPUs with oneDNN, unless a BatchNorm left unfolded reads a low precision Convolution
        (:func:`run_settings` says why). False: generic kernels. A string: that backend.

    Returns
    -------
    AMPSymbolBlock
        A ``SymbolBlock`` taking and returning float32 in the block's input and output
        structure, its params in the converted dtypes under the block's names, with
        ``grad_req='null'`` (``collect_params().setattr('grad_req', 'write')`` for
        gradients). ``export(prefix)`` writes the converted graph with its amp casts, as
        :func:`~mxnet_amp.gluon.model.export_block` does; ``hybridize()`` keeps the backend
        unless given ``backend=`` (:class:`~mxnet_amp.gluon.block.AMPSymbolBlock`).

    Raises
    ------
    DeferredInitError
        The block's params are not initialised yet.
    AlreadyConvertedError, GraphError, ParamError, TypeInferenceError
        As for :func:`mxnet_amp.convert_model`.
    """
    options = make_options(target_dtype, OpLists(target_dtype_ops, fp32_ops, widest_dtype_ops, conditional_fp32_ops,
                                                 follow_ops, excluded_sym_names, overrides),
                           cast_optional_params=cast_optional_params, fold_batchnorm=fold_batchnorm,
                           guard_weight_range=guard_weight_range, tune=tune)
    warn_not_native(options.target_dtype)   # said once, at the caller's line
    return _converted_block(block, options, input_names, ctx, hybridize, data_shapes)


def _converted_block(block: HybridBlock, options: ConvertOptions, input_names: Sequence[str] | None,
                     ctx: Context | Sequence[Context] | None, hybridize: bool | str | None,
                     data_shapes: Mapping[str, Sequence[int]] | None) -> AMPSymbolBlock:
    """:func:`convert_hybrid_block` once its options are built: the block's graph and params
    read out, converted, and wrapped in a ``SymbolBlock`` on ``ctx``."""
    names, sym, in_format, out_format = block_graph(block, input_names)
    arg_params, aux_params = model_params(block, sym, names)
    ctx_list = _contexts(block, ctx)
    backend = check_hybridize(hybridize)
    new_sym, new_args, new_auxs, conv = convert_model_full(sym, arg_params, aux_params, options,
                                                           data_names=names, data_shapes=data_shapes)
    params = {f"arg:{k}": v for k, v in new_args.items()}
    params.update({f"aux:{k}": v for k, v in new_auxs.items()})
    return _symbol_block(new_sym, names, in_format, out_format, params, ctx_list,
                         run_settings(backend, ctx_list, conv))


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
    names, sym, in_format, out_format = block_graph(block, None)
    ctx_list = _contexts(block, ctx)
    arg_params, aux_params = model_params(block, sym, names)
    esym, eargs, eauxs = emulate_model(sym, arg_params, aux_params)
    params = {f"arg:{k}": v for k, v in eargs.items()}
    params.update({f"aux:{k}": v for k, v in eauxs.items()})
    return _symbol_block(esym, names, in_format, out_format, params, ctx_list)


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

