"""``convert_symbol`` and ``convert_model``: the symbol-level public API."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from .dtypes import dtype_name, is_float
from .errors import GraphError, TypeInferenceError
from .gcpause import gc_paused
from .graph import Graph
from .io import graph_from_symbol, graph_to_symbol
from .optypes import OpTypes
from .params import array_dtype, check_params, default_data_names, recast_params
from .passes.fold_batchnorm import fold_batchnorm as fold_batchnorm_pass
from .passes.insert_casts import CastResult, insert_casts
from .policy import OpPolicy, load_policy, warn_unlisted
from .registry import InferenceFailed, infer_types

__all__ = ["convert_symbol", "convert_model", "convert_graph", "fold_model", "Conversion"]


@dataclass(frozen=True)
class Conversion:
    """The full outcome of a conversion: the new graph and everything decided on the way."""

    graph: Graph
    original: Graph
    result: CastResult
    policy: OpPolicy
    data_names: tuple[str, ...]
    param_dtypes: Mapping[str, str]
    arg_dtypes: Mapping[str, str]
    aux_dtypes: Mapping[str, str]
    # each weight's dtype as given, before cast_optional_params chose new ones (for reports)
    input_param_dtypes: Mapping[str, str] = field(default_factory=dict)
    # the converted graph as an mx.sym.Symbol (built once; MXNet symbols are immutable)
    symbol: object = None
    # (BatchNorm name, producer name) of each BatchNorm folded away before conversion
    folded_batchnorms: tuple[tuple[str, str], ...] = ()


def _data_names(graph: Graph, data_names, param_names) -> list[str]:
    variables = [n for n in graph.variables()]
    if data_names is not None:
        if isinstance(data_names, str):
            data_names = [data_names]
        names = {n.name for n in variables}
        unknown = [d for d in data_names if d not in names]
        if unknown:
            raise GraphError(f"data_names {unknown} are not inputs of the symbol "
                             f"(its inputs: {sorted(names)[:20]})")
        return list(data_names)
    if param_names is not None:
        return [n.name for n in variables if n.name not in param_names]
    # as mx.contrib.amp: inputs without a __dtype__ attribute are data
    return [n.name for n in variables if "__dtype__" not in n.attrs]


def convert_graph(graph: Graph, *, target_dtype: str = "float16",
                  target_dtype_ops: Sequence[str] | None = None,
                  fp32_ops: Sequence[str] | None = None,
                  widest_dtype_ops: Sequence[str] | None = None,
                  conditional_fp32_ops=None,
                  excluded_sym_names: Sequence[str] | None = None,
                  data_names: Sequence[str] | None = None,
                  cast_optional_params: bool = True,
                  param_dtypes: Mapping[str, str] | None = None,
                  input_dtypes: Mapping[str, str] | None = None,
                  output_dtype: str | None = "float32",
                  policy: OpPolicy | None = None) -> Conversion:
    """Convert a :class:`Graph`; see :func:`convert_symbol` for the parameters.

    ``param_dtypes`` gives the stored dtype of each weight (default float32 for every
    non-data input); ``input_dtypes`` the dtype of model inputs (default float32, or what a
    ``__dtype__`` attribute says).
    """
    if policy is None:
        policy = load_policy(target_dtype, target_dtype_ops, fp32_ops, widest_dtype_ops,
                             conditional_fp32_ops)
    names = _data_names(graph, data_names, None if param_dtypes is None else set(param_dtypes))
    data_set = set(names)
    excluded = frozenset(excluded_sym_names or ())
    all_names = {n.name for n in graph.nodes}
    missing = sorted(excluded - all_names)
    if missing:
        raise GraphError(f"excluded_sym_names {missing} name no node of the symbol")
    from .dtypes import MX_NAME
    data_dtypes = {}
    stored = {}
    for n in graph.variables():
        attr = n.attrs.get("__dtype__")
        attr_dtype = MX_NAME.get(int(attr)) if attr is not None and attr.lstrip("-").isdigit() else None
        if n.name in data_set:
            dt = (input_dtypes or {}).get(n.name) or attr_dtype or "float32"
            data_dtypes[n.name] = dtype_name(dt)
        else:
            stored[n.name] = (param_dtypes or {}).get(n.name) or attr_dtype or "float32"
    with gc_paused():
        return _convert(graph, policy, names, data_dtypes, stored, excluded,
                        cast_optional_params, output_dtype)


def _convert(graph, policy, names, data_dtypes, stored, excluded, cast_optional_params,
             output_dtype) -> Conversion:
    op_types = OpTypes()
    input_param_dtypes = dict(stored)
    final = False
    if cast_optional_params:
        # round one leaves float weights to their consumers; a weight every consumer wants
        # in the same dtype is stored in it, the others stay as stored and get casts
        first = insert_casts(graph, policy, data_dtypes=data_dtypes,
                             param_dtypes={k: (None if is_float(v) else v) for k, v in stored.items()},
                             excluded=excluded, output_dtype=output_dtype, op_types=op_types)
        # round one is final when each float weight is wanted in exactly one dtype: every
        # consumer already reads it in the dtype it is now stored in, and no dtype was left
        # undecided (a weight no consumer gives a dtype leaves its readers' dtypes open)
        final = all(len(first.param_wants.get(name, ())) == 1
                    for name, dt in stored.items() if is_float(dt))
        for name, want in first.param_wants.items():
            if len(want) == 1 and is_float(stored[name]):
                stored[name] = next(iter(want))
    if final:
        # round two would rebuild the same graph: only the weights' __dtype__ attributes
        # are left to write
        result = replace(first, graph=_with_stored_dtypes(first.graph, stored))
    else:
        result = insert_casts(graph, policy, data_dtypes=data_dtypes, param_dtypes=stored,
                              excluded=excluded, output_dtype=output_dtype, op_types=op_types)
    if result.unlisted_ops:
        warn_unlisted(result.unlisted_ops, policy.target_dtype)
    sym = graph_to_symbol(result.graph)
    try:
        # weights pass as stored: one read only by amp_cast is otherwise left undecided
        args, _, auxs = infer_types(sym, {**stored, **data_dtypes})
    except InferenceFailed as err:
        raise TypeInferenceError(f"the converted graph does not type-check: {err}") from None
    arg_dtypes = dict(zip(sym.list_arguments(), args))
    aux_dtypes = dict(zip(sym.list_auxiliary_states(), auxs))
    undecided = [k for k, v in {**arg_dtypes, **aux_dtypes}.items() if v is None]
    if undecided:
        warnings.warn(f"type inference leaves {undecided[:10]} undecided; they stay as stored",
                      stacklevel=2)
    return Conversion(result.graph, graph, result, policy, tuple(names),
                      dict(stored), arg_dtypes, aux_dtypes, input_param_dtypes, sym)


def _with_stored_dtypes(graph: Graph, stored: Mapping[str, str]) -> Graph:
    """``graph`` with each weight variable's ``__dtype__`` attribute (where it has one) set to
    its stored dtype, as :func:`insert_casts` writes it for weights of known dtype."""
    from types import MappingProxyType
    from .dtypes import MX_CODE
    nodes = list(graph.nodes)
    for i, node in enumerate(nodes):
        if node.is_variable and node.name in stored and "__dtype__" in node.attrs:
            code = str(MX_CODE[stored[node.name]])
            if node.attrs["__dtype__"] != code:
                nodes[i] = node.replace(attrs=MappingProxyType({**node.attrs, "__dtype__": code}))
    return Graph(tuple(nodes), graph.heads, graph.attrs)


def convert_symbol(sym, target_dtype: str = "float16",
                   target_dtype_ops: Sequence[str] | None = None,
                   fp32_ops: Sequence[str] | None = None,
                   widest_dtype_ops: Sequence[str] | None = None,
                   conditional_fp32_ops=None,
                   excluded_sym_names: Sequence[str] | None = None,
                   data_names: Sequence[str] | None = None,
                   cast_optional_params: bool = True):
    """Convert an fp32 symbol to mixed precision.

    Parameters
    ----------
    sym : Symbol
        The fp32 model; it is not modified.
    target_dtype : {'float16', 'bfloat16'}, default 'float16'
        The low precision dtype.
    target_dtype_ops, fp32_ops, widest_dtype_ops : list of str, optional
        Ops to move into the target / float32 / widest category (on top of the shipped lists).
    conditional_fp32_ops : list of (op, attr, values), optional
        Ops that run in float32 when ``attr`` takes one of ``values``.
    excluded_sym_names : list of str, optional
        Node names that run in float32 whatever their op.
    data_names : list of str, optional
        Model inputs. By default, as in ``mx.contrib.amp``, every input without a
        ``__dtype__`` attribute; the others are weights.
    cast_optional_params : bool, default True
        Store weights whose every consumer runs in low precision in low precision (the
        converted graph then expects them so): the same numerics as casting them at every
        run, a smaller checkpoint and a faster model. False keeps every weight float32, as
        ``mx.contrib.amp`` does by default (a deliberate difference).

    Returns
    -------
    Symbol
        A new symbol holding the casts; model inputs and outputs stay float32.
    """
    graph = graph_from_symbol(sym)
    conversion = convert_graph(graph, target_dtype=target_dtype, target_dtype_ops=target_dtype_ops,
                               fp32_ops=fp32_ops, widest_dtype_ops=widest_dtype_ops,
                               conditional_fp32_ops=conditional_fp32_ops,
                               excluded_sym_names=excluded_sym_names, data_names=data_names,
                               cast_optional_params=cast_optional_params)
    return conversion.symbol


def fold_model(graph: Graph, arg_params: Mapping, aux_params: Mapping,
               keep: Sequence[str] | None = None) -> tuple[Graph, dict, dict, tuple]:
    """:func:`~mxnet_amp.passes.fold_batchnorm.fold_batchnorm` on a model: returns the new
    graph, arg params, aux params and the ``(BatchNorm, producer)`` pairs folded. Inputs are
    not modified; arrays that do not change are shared."""
    result = fold_batchnorm_pass(graph, {**arg_params, **aux_params}, keep=frozenset(keep or ()))
    new_aux = {k: v for k, v in result.params.items() if k in aux_params}
    new_args = {k: v for k, v in result.params.items() if k not in new_aux}
    return result.graph, new_args, new_aux, result.folded


def convert_model_full(sym, arg_params: Mapping, aux_params: Mapping, *,
                       target_dtype: str = "float16", target_dtype_ops=None, fp32_ops=None,
                       widest_dtype_ops=None, conditional_fp32_ops=None,
                       excluded_sym_names=None, data_names=None,
                       cast_optional_params: bool = True, input_dtypes=None,
                       output_dtype: str | None = "float32", fold_batchnorm: bool = False):
    """:func:`convert_model` that also returns the :class:`Conversion` record."""
    graph = graph_from_symbol(sym)
    arg_names, aux_names = sym.list_arguments(), sym.list_auxiliary_states()
    if data_names is None:
        data_names = default_data_names(arg_names, arg_params)
    check_params(arg_names, aux_names, arg_params, aux_params, data_names)
    folded = ()
    if fold_batchnorm:
        graph, arg_params, aux_params, folded = fold_model(graph, arg_params, aux_params,
                                                           excluded_sym_names)
    params = {**arg_params, **aux_params}
    param_dtypes = {k: array_dtype(v) for k, v in params.items()}
    conversion = convert_graph(graph, target_dtype=target_dtype, target_dtype_ops=target_dtype_ops,
                               fp32_ops=fp32_ops, widest_dtype_ops=widest_dtype_ops,
                               conditional_fp32_ops=conditional_fp32_ops,
                               excluded_sym_names=excluded_sym_names, data_names=data_names,
                               cast_optional_params=cast_optional_params,
                               param_dtypes=param_dtypes, input_dtypes=input_dtypes,
                               output_dtype=output_dtype)
    if folded:
        conversion = replace(conversion, folded_batchnorms=folded)
    new_args = recast_params(arg_params, conversion.arg_dtypes, param_dtypes)
    new_aux = recast_params(aux_params, conversion.aux_dtypes, param_dtypes)
    return conversion.symbol, new_args, new_aux, conversion


def convert_model(sym, arg_params: Mapping, aux_params: Mapping,
                  target_dtype: str = "float16",
                  target_dtype_ops: Sequence[str] | None = None,
                  fp32_ops: Sequence[str] | None = None,
                  widest_dtype_ops: Sequence[str] | None = None,
                  conditional_fp32_ops=None,
                  excluded_sym_names: Sequence[str] | None = None,
                  data_names: Sequence[str] | None = None,
                  cast_optional_params: bool = True,
                  fold_batchnorm: bool = False):
    """Convert an fp32 model (symbol and params) to mixed precision.

    Parameters
    ----------
    sym : Symbol
        The fp32 model; it is not modified.
    arg_params, aux_params : dict of str to NDArray
        The model's weights, as ``mx.model.load_checkpoint`` returns them (not modified).
    target_dtype, target_dtype_ops, fp32_ops, widest_dtype_ops, conditional_fp32_ops
        As in :func:`convert_symbol`.
    excluded_sym_names, cast_optional_params
        As in :func:`convert_symbol`.
    data_names : list of str, optional
        Model inputs; default the arguments that have no entry in ``arg_params``.
    fold_batchnorm : bool, default False
        First fold each inference BatchNorm into the Convolution / FullyConnected /
        Deconvolution it follows (when nothing else reads that op's output), in float32;
        the folded weights are then rounded once by the conversion. The folded BatchNorms
        and their params are gone from the result, a producer without a bias gets one
        (``<producer>_bias``); see :mod:`mxnet_amp.passes.fold_batchnorm`.

    Returns
    -------
    (Symbol, dict, dict)
        The converted symbol and new arg/aux param dicts, each array in the dtype the
        converted graph's type inference gives it, ready for ``mx.mod.Module`` or
        :func:`mxnet_amp.save_checkpoint`.
    """
    sym, args, auxs, _ = convert_model_full(
        sym, arg_params, aux_params, target_dtype=target_dtype, target_dtype_ops=target_dtype_ops,
        fp32_ops=fp32_ops, widest_dtype_ops=widest_dtype_ops,
        conditional_fp32_ops=conditional_fp32_ops, excluded_sym_names=excluded_sym_names,
        data_names=data_names, cast_optional_params=cast_optional_params,
        fold_batchnorm=fold_batchnorm)
    return sym, args, auxs
