"""``convert_bucketing_module``: mixed precision for ``mx.mod.BucketingModule`` users.

A BucketingModule builds one symbol per bucket key from its ``sym_gen`` and shares one set
of params between them. The converted module gets a ``sym_gen`` that converts each bucket's
symbol as it is asked for (once per key), so buckets bound later (``switch_bucket``) run in
mixed precision too; ``mx.contrib.amp`` converts only the buckets bound so far and hands
later buckets the float32 symbol. The params are converted once, on the default bucket's
graph; every other bucket reads them in the dtypes decided there (cast where one of its ops
wants another dtype), so all buckets agree on the shared params.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from .convert import convert_graph, convert_model_full
from .errors import ArgumentError, GraphError, ParamError
from .ir.dtypes import array_dtype
from .mx.hardware import warn_not_native
from .mx.io import graph_from_symbol
from .options import ConvertOptions, OpLists, make_options
from .pipeline import fold_model

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet.module import BucketingModule
    from mxnet.symbol import Symbol

    from .ir.graph import Graph

__all__ = ["convert_bucketing_module"]


def _generate(sym_gen: Callable, key: object) -> Any:
    """``sym_gen(key)`` under a fresh name scope, as BucketingModule calls it."""
    import mxnet as mx
    with mx.name.NameManager():
        return sym_gen(key)


def _node_names(sym: Symbol) -> set[str]:
    return {n.name for n in graph_from_symbol(sym).nodes}


def _folded_bucket(graph: Graph, originals: Mapping, options: ConvertOptions, present: set[str],
                   param_dtypes: Mapping[str, str]) -> Graph:
    """``graph`` with its BatchNorms folded as the default bucket's were (from the original
    float32 params: the same arithmetic gives the same folded weights); a bucket where
    folding reads a param the default bucket's folding did not produce is refused."""
    if not options.fold_batchnorm:
        return graph
    used = {n.name for n in graph.variables()}
    args = {k: v for k, v in originals.items() if k in used}
    graph = fold_model(graph, args, {}, options.keeping_only(present).fp32_nodes).graph
    extra = sorted({n.name for n in graph.variables()} & set(originals) - set(param_dtypes))
    if extra:
        raise GraphError(f"this bucket's BatchNorms fold differently from the default bucket's "
                         f"(it reads {extra[:5]}, folded away there); convert with "
                         "fold_batchnorm=False")
    return graph


def _converted_sym_gen(sym_gen: Callable, state_names: Sequence[str],
                       param_dtypes: Mapping[str, str], options: ConvertOptions,
                       first: tuple, originals: Mapping) -> Callable:
    """A sym_gen returning each bucket's converted symbol (memoised per key).

    ``first`` is ``(key, (symbol, data_names, label_names))`` of the bucket already
    converted (the default one); ``originals`` the module's float32 params (folding)."""
    done = {first[0]: first[1]}

    def converted_sym_gen(key: Any) -> Any:
        if key in done:
            return done[key]
        sym, data_names, label_names = _generate(sym_gen, key)
        graph = graph_from_symbol(sym)
        inputs = [*(data_names or ()), *(label_names or ()), *state_names]
        present = {n.name for n in graph.nodes}
        graph = _folded_bucket(graph, originals, options, present, param_dtypes)
        variables = {n.name for n in graph.variables()} - set(inputs)
        conversion = convert_graph(
            graph, _bucket_options(options, present), data_names=inputs,
            param_dtypes={k: v for k, v in param_dtypes.items() if k in variables},
            # the shared params are already in the dtypes the default bucket decided
            accept_low_precision_params=True)
        done[key] = (conversion.symbol, data_names, label_names)
        return done[key]

    return converted_sym_gen


def _bucket_options(options: ConvertOptions, present: set[str]) -> ConvertOptions:
    """``options`` for a bucket other than the default one: its params already stored as
    the default bucket decided, and excluded only the names the bucket's graph has."""
    # unrolled buckets differ in length: a node excluded in one may not exist here
    return replace(options.keeping_only(present), cast_optional_params=False)


def convert_bucketing_module(bucketing_mod: BucketingModule, target_dtype: str = "float16",
                             target_dtype_ops: Sequence[str] | None = None,
                             fp32_ops: Sequence[str] | None = None,
                             conditional_fp32_ops: Sequence[tuple[str, str, Sequence[str]]] | None = None,
                             excluded_sym_names: Sequence[str] | None = None,
                             cast_optional_params: bool = True, *,
                             widest_dtype_ops: Sequence[str] | None = None,
                             follow_ops: Sequence[str] | None = None,
                             fold_batchnorm: bool = True,
                             overrides: str = "replace") -> BucketingModule:
    """Convert an fp32 ``BucketingModule`` to mixed precision for inference.

    Same positional parameters as ``mx.contrib.amp.convert_bucketing_module``.

    Parameters
    ----------
    bucketing_mod : mx.mod.BucketingModule
        The fp32 module, its params initialised (trained, ``init_params``/``set_params``
        called, or loaded with ``BucketingModule.load``). It is not modified.
    target_dtype, target_dtype_ops, fp32_ops, conditional_fp32_ops, widest_dtype_ops, follow_ops, overrides
        As in :func:`mxnet_amp.convert_model` (a given list replaces the shipped one).
    excluded_sym_names : list of str, optional
        Node names that run in float32; in each bucket, the names its symbol has (an
        unrolled network's longer buckets have nodes the shorter ones lack).
    cast_optional_params : bool, default True
        As in :func:`mxnet_amp.convert_model`, decided on the default bucket's graph.
    fold_batchnorm : bool, default True
        As in :func:`mxnet_amp.convert_model`; every bucket folds the same BatchNorms.

    Returns
    -------
    mx.mod.BucketingModule
        A new, unbound module with the same default bucket key, context and options, holding
        the converted params; its ``sym_gen`` returns the converted symbol of any bucket key.
        Bind it (``for_training=False``) and run it as the original.

    Raises
    ------
    ParamError
        The module's params are not initialised, or do not match the default bucket.
    AlreadyConvertedError, GraphError, TypeInferenceError
        As for :func:`mxnet_amp.convert_model`.
    """
    import mxnet as mx
    options = make_options(target_dtype, OpLists(target_dtype_ops, fp32_ops, widest_dtype_ops, conditional_fp32_ops,
                                                 follow_ops, excluded_sym_names, overrides),
                           cast_optional_params=cast_optional_params, fold_batchnorm=fold_batchnorm)
    if not isinstance(bucketing_mod, mx.mod.BucketingModule):
        raise ArgumentError(f"bucketing_mod must be an mx.mod.BucketingModule, got {type(bucketing_mod).__name__}")
    if not bucketing_mod.params_initialized:
        raise ParamError("the BucketingModule's params are not initialised: bind it and call "
                         "init_params / set_params (or fit, or BucketingModule.load) first")
    warn_not_native(options.target_dtype)   # said once, at the caller's line
    arg_params, aux_params = bucketing_mod.get_params()
    key = bucketing_mod._default_bucket_key
    state_names = list(bucketing_mod._state_names or ())
    sym, data_names, label_names = _generate(bucketing_mod._sym_gen, key)
    inputs = [*(data_names or ()), *(label_names or ()), *state_names]
    # params no op of the default bucket reads stay as they are
    used = set(sym.list_arguments()) | set(sym.list_auxiliary_states())
    new_sym, new_args, new_auxs, _ = convert_model_full(
        sym, {k: v for k, v in arg_params.items() if k in used},
        {k: v for k, v in aux_params.items() if k in used},
        options.keeping_only(_node_names(sym)), data_names=inputs)
    new_args.update({k: v for k, v in arg_params.items() if k not in used})
    new_auxs.update({k: v for k, v in aux_params.items() if k not in used})
    param_dtypes = {k: array_dtype(v) for k, v in {**new_args, **new_auxs}.items()}
    sym_gen = _converted_sym_gen(bucketing_mod._sym_gen, state_names, param_dtypes, options,
                                 (key, (new_sym, data_names, label_names)),
                                 {**arg_params, **aux_params})
    return mx.mod.BucketingModule.load_dict(
        {key: new_sym}, sym_gen=sym_gen, default_bucket_key=key,
        arg_params=new_args, aux_params=new_auxs, logger=bucketing_mod.logger,
        context=bucketing_mod._context, work_load_list=bucketing_mod._work_load_list,
        fixed_param_names=bucketing_mod._fixed_param_names, state_names=state_names,
        group2ctxs=bucketing_mod._group2ctxs,
        compression_params=bucketing_mod._compression_params)
