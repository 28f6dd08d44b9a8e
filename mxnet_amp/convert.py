"""``convert_symbol`` and ``convert_model``: the symbol-level public API.

What a conversion runs is :mod:`mxnet_amp.pipeline` (the pass lists); what it returns,
:mod:`mxnet_amp.record` (:class:`~mxnet_amp.record.Conversion`). The stages, each a function:

* :func:`convert_model` (public keywords) builds the options once and calls
* :func:`convert_model_full` (a symbol and params under options): checks the params against
  the symbol, then casts the params the conversion returns (:class:`ConvertedModel`);
* :func:`convert_with_params` (a graph and params): the steps before the conversion
  (folding, the weight-range guard, the timed choice: ``pipeline.prepare_passes``), then
* :func:`convert_graph` (a graph, weights by dtype only): checks the names and inputs and runs
  the conversion's pass list (``pipeline.convert_passes``), which builds the record.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, NamedTuple, Sequence

from .errors import AlreadyConvertedError, GraphError
from .ir.dtypes import LOW_PRECISION, array_dtype, dtype_name, dtype_of_code
from .ir.gcpause import gc_paused
from .ir.graph import Graph
from .mx.arguments import check_names, check_symbol, name_list, param_dict
from .mx.hardware import warn_amx_off, warn_not_native
from .mx.io import graph_from_symbol
from .mx.params import (check_params, default_data_names, label_inputs, model_inputs, recast_params,
                        with_labels)
from .options import ConvertOptions, OpLists, make_options
from .passes.insert_casts import refuse_converted
from .passes.kernel import GraphPass, PassResult, run_passes
from .pipeline import ORDER, TUNE, Prepared, convert_passes, prepare_passes
from .record import Conversion, input_figures
from .shape_check.check import check_param_shapes
from .shape_check.messages import input_shapes
from .tune.timing import check_tuned_model, tune_policy
from .warn import warn_user

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet.symbol import Symbol

    from .tune.tuning import Tuning

__all__ = ["convert_symbol", "convert_model", "convert_graph", "convert_model_full",
           "convert_with_params", "ConvertedParams", "ConvertedModel"]


def _data_names(graph: Graph, data_names: Sequence[str] | str | None,
                param_names: Iterable[str] | None) -> list[str]:
    variables = [n for n in graph.variables()]
    given = name_list(data_names)
    if given is not None:
        names = {n.name for n in variables}
        unknown = [d for d in given if d not in names]
        if unknown:
            raise GraphError(f"data_names {unknown} are not inputs of the symbol "
                             f"(its inputs: {sorted(names)[:20]})")
        return with_labels(given, label_inputs(graph), set(param_names or ()))
    if param_names is not None:
        return default_data_names([n.name for n in variables], dict.fromkeys(param_names), "param_dtypes")
    # as mx.contrib.amp: inputs without a __dtype__ attribute are data
    return [n.name for n in variables if "__dtype__" not in n.attrs]


def convert_graph(graph: Graph, options: ConvertOptions | None = None, *,
                  data_names: Sequence[str] | None = None,
                  param_dtypes: Mapping[str, str] | None = None,
                  input_dtypes: Mapping[str, str] | None = None,
                  output_dtype: str | None = "float32",
                  accept_low_precision_params: bool = False) -> Conversion:
    """Convert a :class:`Graph` under ``options`` (default: :func:`make_options`'s).

    ``data_names`` as in :func:`convert_symbol`. ``param_dtypes`` gives the stored dtype of
    each weight (default float32 for every non-data input, or what its ``__dtype__``
    attribute says); ``input_dtypes`` the dtype of model inputs (default float32, or what a
    ``__dtype__`` attribute says). ``accept_low_precision_params`` lets weights stored in
    float16/bfloat16 through (they are read as stored, cast where a consumer wants another
    dtype); by default they raise :class:`AlreadyConvertedError`, as they mark a model
    converted before. The nodes kept float32 whatever their op are ``options.fp32_nodes``,
    and the nodes of a ``[[slow_kernel]]`` shape (:meth:`ConvertOptions.with_slow_kernels`).
    """
    if all(n.is_variable for n in graph.nodes):
        warn_user(f"the symbol has no operators, only the inputs {[n.name for n in graph.nodes][:10]}: "
                  "there is nothing to convert; the result is the same graph")
    options = make_options() if options is None else options
    names = _data_names(graph, data_names, None if param_dtypes is None else set(param_dtypes))
    options.check_excluded(graph)
    warn_amx_off(options.target_dtype, "conversion")   # a bf16 model slower than fp32 gets a word
    data_dtypes, stored = _variable_dtypes(graph, set(names), param_dtypes, input_dtypes)
    if not accept_low_precision_params:
        refuse_converted(graph)   # its casts say more than its params' dtypes
        # only arrays given as params mark a converted model: a variable the symbol alone
        # declares float16/bfloat16 is an input (or a weight the caller binds) of that dtype
        _refuse_low_precision_params({k: v for k, v in stored.items() if k in (param_dtypes or {})})
    with gc_paused():   # the [[slow_kernel]] rule is the list's first step
        return convert_passes(graph, options, names, data_dtypes, stored, output_dtype)


def _variable_dtypes(graph: Graph, data_set: set[str], param_dtypes: Mapping[str, str] | None,
                     input_dtypes: Mapping[str, str] | None) -> tuple[dict[str, str], dict[str, str]]:
    """``(data dtypes, stored weight dtypes)``: as given, else the ``__dtype__`` attribute,
    else float32."""
    data_dtypes, stored = {}, {}
    for n in graph.variables():
        attr_dtype = dtype_of_code(n.attrs.get("__dtype__"))
        if n.name in data_set:
            dt = (input_dtypes or {}).get(n.name) or attr_dtype or "float32"
            data_dtypes[n.name] = dtype_name(dt)
        else:
            stored[n.name] = (param_dtypes or {}).get(n.name) or attr_dtype or "float32"
    return data_dtypes, stored


def _refuse_low_precision_params(stored: Mapping[str, str]) -> None:
    """Raise :class:`AlreadyConvertedError` naming the weights already in low precision.

    An fp32 model has none; a model ``mx.contrib.amp`` converted with
    ``cast_optional_params=True`` and then saved by ``mx.model.save_checkpoint`` or
    ``export()`` (which strip the amp casts) has them, and converting it again would treat
    its low precision weights as the model's reference precision."""
    low = sorted(k for k, v in stored.items() if v in LOW_PRECISION)
    if low:
        dtypes = sorted({stored[k] for k in low})
        shown = ", ".join(low[:10]) + (f" and {len(low) - 10} more" if len(low) > 10 else "")
        raise AlreadyConvertedError(
            f"params {shown} are already {'/'.join(dtypes)}: the model looks converted to mixed "
            "precision before (e.g. by mx.contrib.amp, its casts stripped on save). Convert the "
            "original float32 model; if these params are all there is, cast them to float32 "
            "first (exact) and convert that: weights are stored in low precision again by "
            "default. To run such a model as it is, load it with "
            "mxnet_amp.load_checkpoint(prefix, epoch), which restores the casts that "
            "mx.model.save_checkpoint / export() / Symbol.save dropped")


@gc_paused()
def convert_symbol(sym: Symbol, target_dtype: str = "float16",
                   target_dtype_ops: Sequence[str] | None = None,
                   fp32_ops: Sequence[str] | None = None,
                   conditional_fp32_ops: Sequence[tuple[str, str, Sequence[str]]] | None = None,
                   excluded_sym_names: Sequence[str] | None = None,
                   data_names: Sequence[str] | None = None,
                   cast_optional_params: bool = False, *,
                   widest_dtype_ops: Sequence[str] | None = None, follow_ops: Sequence[str] | None = None,
                   overrides: str = "replace") -> Symbol:
    """Convert an fp32 symbol to mixed precision.

    Positional parameters as ``mx.contrib.amp.convert_symbol``'s; ``widest_dtype_ops`` keyword-only.

    Parameters
    ----------
    sym : Symbol
        The fp32 model; it is not modified.
    target_dtype : {'float16', 'bfloat16'}, default 'float16'
    target_dtype_ops, fp32_ops, widest_dtype_ops : list of str, optional
        The ops of the target / float32 / widest category. As in ``mx.contrib.amp``, a
        given list *replaces* the shipped one: an op the shipped list held and no given
        list names runs in its inputs' dtype, so ``target_dtype_ops=['FullyConnected']``
        runs only FullyConnected in low precision. ``overrides='move'`` instead moves the
        named ops and keeps every other op's category (see :func:`mxnet_amp.load_policy`).
    conditional_fp32_ops : list of (op, attr, values), optional
        Ops in float32 when ``attr`` takes one of ``values`` (replacing the shipped ones).
    follow_ops : list of str, optional
        Ops added to the *follow* category (they run in their inputs' dtype).
    overrides : {'replace', 'move'}, default 'replace'
        The lists above replace the shipped ones (contrib's meaning) or move the named ops.
    excluded_sym_names : list of str, optional
        Node names that run in float32 whatever their op (a string is one name).
    data_names : list of str, optional
        Model inputs (a string is one name). By default, as in ``mx.contrib.amp``, every input without a
        ``__dtype__`` attribute; the others are weights. A variable declared float16 or
        bfloat16 (``mx.sym.var('x', dtype='float16')``) is read in that dtype.
    cast_optional_params : bool, default False
        As in ``mx.contrib.amp`` (no params to cast here: the result binds with the caller's
        float32 params). True tags the weights only low precision ops read ``__dtype__``
        low precision: the caller casts those params (:func:`convert_model` does both).

    Returns
    -------
    Symbol
        A new symbol holding the casts; model inputs and outputs stay float32. Each weight
        (every input not in ``data_names``) carries ``__dtype__``: the dtype
        :func:`convert_model` would return its param in (float32, or low precision where
        ``cast_optional_params`` stores it so, or as its own ``__dtype__`` said).

    Raises
    ------
    AlreadyConvertedError
        The graph holds an amp_cast to float16/bfloat16.
    """
    options = make_options(target_dtype, OpLists(target_dtype_ops, fp32_ops, widest_dtype_ops, conditional_fp32_ops,
                                                 follow_ops, excluded_sym_names, overrides),
                           cast_optional_params=cast_optional_params)
    warn_not_native(options.target_dtype)   # said once, at the caller's line
    return convert_graph(graph_from_symbol(check_symbol(sym)), options,
                         data_names=check_names(data_names, "data_names")).symbol


# the collector paused for the whole conversion: its millions of small acyclic objects
# would otherwise be walked by every collection that allocating them triggers
@gc_paused()
def convert_model_full(sym: Symbol, arg_params: Mapping, aux_params: Mapping,
                       options: ConvertOptions | None = None, *,
                       data_names: Sequence[str] | None = None,
                       input_dtypes: Mapping[str, str] | None = None,
                       output_dtype: str | None = "float32",
                       data_shapes: Mapping[str, Sequence[int]] | None = None,
                       shapes_from: str = "data_shapes", sequential_casts: bool = False,
                       check_shapes: bool = True,
                       cast_params: bool = True) -> ConvertedModel:
    """:func:`convert_model` under ``options`` (:func:`make_options`), also returning the
    :class:`Conversion` record: ``(symbol, arg params, aux params, conversion)``.

    ``shapes_from`` is what shape errors call ``data_shapes`` (the caller's own name).
    ``check_shapes=False`` skips the params' shape check, for a caller that ran it already
    on the same params (the automatic mode converts one model many times).

    ``sequential_casts``: finish each param's cast before the next starts. Casts read a
    copy of their param; queued all at once (the default) MXNet's asynchronous engine lets
    those copies pile up while the originals live. The default suits a caller that rebinds
    its names to the result (each original goes once its cast has run); one that keeps the
    originals (the automatic mode) bounds its peak to originals + result + one copy with it.

    ``cast_params=False``: the params come back as given (folded where ``fold_batchnorm``),
    float32, not cast; the record's ``arg_dtypes`` / ``aux_dtypes`` say what they would be
    stored in (the automatic mode's emulated checks round them in the graph instead).
    """
    options = make_options() if options is None else options
    graph = graph_from_symbol(sym)
    arg_params, aux_params = param_dict(arg_params, "arg_params"), param_dict(aux_params, "aux_params")
    arg_names, aux_names = sym.list_arguments(), sym.list_auxiliary_states()
    data_names = model_inputs(arg_names, arg_params, data_names, labels=label_inputs(graph))
    check_params(arg_names, aux_names, arg_params, aux_params, data_names, options.strict_params)
    if check_shapes:
        check_param_shapes(sym, arg_params, aux_params, data_shapes, graph=graph,
                           shapes_from=shapes_from, input_names=arg_names + aux_names)
    done = convert_with_params(graph, arg_params, aux_params, options, data_names=data_names,
                               input_dtypes=input_dtypes, output_dtype=output_dtype,
                               data_shapes=data_shapes)
    conversion = done.conversion
    if not cast_params:   # folded weights written as float32 NDArrays
        return ConvertedModel(conversion.symbol, recast_params(done.arg_params, {}),
                              recast_params(done.aux_params, {}), conversion)
    new_args, new_aux = conversion.recast(done.arg_params, done.aux_params, current=done.param_dtypes,
                                          sequential=sequential_casts)
    return ConvertedModel(conversion.symbol, new_args, new_aux, conversion)


@dataclass(frozen=True)
class ConvertedParams:
    """What :func:`convert_with_params` returns: the conversion (its ``folded_batchnorms``,
    ``kept_batchnorms``, ``input_figures`` and ``tuning`` filled in), the arg and aux params
    the converted graph reads (new dicts when folded, folded weights float32 numpy arrays;
    nothing recast) and each of those params' dtype."""

    conversion: Conversion
    arg_params: dict
    aux_params: dict
    param_dtypes: dict[str, str]


class ConvertedModel(NamedTuple):
    """What :func:`convert_model_full` returns (unpacks as ``(symbol, arg_params,
    aux_params, conversion)``)."""

    symbol: Symbol
    arg_params: dict
    aux_params: dict
    conversion: Conversion


class _Tune(GraphPass[Prepared]):
    """The timed kernel choice (:func:`mxnet_amp.tune.timing.tune_policy`) as a step before the
    conversion: options in, options out; it converts nothing (the whole-model check runs
    after the conversion, :func:`_checked_tuning`)."""

    name = TUNE

    def __init__(self, data_shapes: Mapping[str, Sequence[int]] | None) -> None:
        super().__init__(verify=False)
        self.data_shapes = data_shapes

    def call_after(self, previous: PassResult[Any]) -> PassResult[Prepared]:
        """The options of ``previous`` tuned on its graph and params."""
        before: Prepared = previous.decided
        options, record = tune_policy(previous.graph, {**before.arg_params, **before.aux_params},
                                      before.options, input_shapes(self.data_shapes))
        return PassResult(previous.graph, replace(before, options=options, tuning=record,
                                                  untuned=replace(before.options, tuning=None)), False)


def _checked_tuning(tuned: Conversion, prepared: Prepared, tuning: Tuning, param_dtypes: Mapping[str, str],
                    data_shapes: Mapping[str, Sequence[int]] | None,
                    convert: Callable[[ConvertOptions], Conversion]) -> Conversion:
    """The conversion after the timed choice's whole-model check
    (:func:`mxnet_amp.tune.timing.check_tuned_model`): the graph converted under the options before
    the choice too (``convert(options)``), both models timed with their params cast; the
    untuned conversion where the tuned model is slower beyond the noise. Its ``tuning``
    says so."""
    untuned = convert(prepared.untuned or prepared.options)
    args, auxs = prepared.arg_params, prepared.aux_params
    untuned_model, tuned_model = ((c.symbol, *c.recast(args, auxs, current=param_dtypes)) for c in (untuned, tuned))
    record = check_tuned_model(prepared.tuning, tuning, untuned_model, tuned_model, input_shapes(data_shapes) or {})
    return replace(tuned if record.applied else untuned, tuning=record)


def convert_with_params(graph: Graph, arg_params: dict, aux_params: dict,
                        options: ConvertOptions, *, data_names: Sequence[str],
                        input_dtypes: Mapping[str, str] | None = None,
                        output_dtype: str | None = "float32",
                        data_shapes: Mapping[str, Sequence[int]] | None = None) -> ConvertedParams:
    """Run the steps before the conversion on ``graph`` and its params
    (:func:`mxnet_amp.pipeline.prepare_passes`: folding where ``options`` asks, the weight
    range guard, the timed choice where ``options.tuning`` asks, at ``data_shapes``), then
    convert it with its weights' dtypes read from the params."""
    figures = input_figures(graph, arg_params, aux_params)
    if options.fold_batchnorm:
        # the names are the caller's, of the graph as given (folding drops BatchNorm params)
        options.check_excluded(graph)
    tune = _Tune(data_shapes) if options.tuning is not None else None
    start = PassResult(graph, Prepared(options, arg_params, aux_params), False)
    run = run_passes(start, prepare_passes(options, tune), ORDER)
    prepared: Prepared = run.results[-1].decided
    arg_params, aux_params = dict(prepared.arg_params), dict(prepared.aux_params)
    param_dtypes = {k: array_dtype(v) for k, v in {**arg_params, **aux_params}.items()}

    def convert(opts: ConvertOptions) -> Conversion:
        return convert_graph(run.graph, opts, data_names=data_names, param_dtypes=param_dtypes,
                             input_dtypes=input_dtypes, output_dtype=output_dtype)
    conversion = convert(prepared.options)
    if options.tuning is not None:   # the timed choice, checked on the whole model
        conversion = _checked_tuning(conversion, prepared, options.tuning, param_dtypes, data_shapes, convert)
    conversion = replace(conversion, folded_batchnorms=prepared.folded, kept_batchnorms=prepared.kept,
                         input_figures=figures)
    return ConvertedParams(conversion, arg_params, aux_params, param_dtypes)


# (paused here too, so the conversion record is freed before the collector restarts)
@gc_paused()
def convert_model(sym: Symbol, arg_params: Mapping, aux_params: Mapping,
                  target_dtype: str = "float16",
                  target_dtype_ops: Sequence[str] | None = None,
                  fp32_ops: Sequence[str] | None = None,
                  conditional_fp32_ops: Sequence[tuple[str, str, Sequence[str]]] | None = None,
                  excluded_sym_names: Sequence[str] | None = None,
                  cast_optional_params: bool = True, *,
                  widest_dtype_ops: Sequence[str] | None = None,
                  data_names: Sequence[str] | None = None,
                  data_shapes: Mapping[str, Sequence[int]] | None = None,
                  fold_batchnorm: bool = True, follow_ops: Sequence[str] | None = None,
                  overrides: str = "replace", strict_params: bool = False,
                  guard_weight_range: bool = True, tune: object = None) -> tuple[Symbol, dict, dict]:
    """Convert an fp32 model (symbol and params) to mixed precision.

    Positional parameters as ``mx.contrib.amp.convert_model``'s; the options it lacks keyword-only.

    Parameters
    ----------
    sym, arg_params, aux_params : Symbol, dict of str to NDArray, dict of str to NDArray
        The fp32 model and its weights, as ``mx.model.load_checkpoint`` returns them (not modified).
    target_dtype, target_dtype_ops, fp32_ops, widest_dtype_ops, follow_ops, conditional_fp32_ops, overrides, excluded_sym_names
        As in :func:`convert_symbol` (a given list replaces the shipped one).
    cast_optional_params : bool, default True
        Store weights whose every consumer runs in low precision in low precision: the same
        numerics as casting them at every run, a smaller checkpoint and a faster model.
        False keeps every weight float32, as ``mx.contrib.amp`` does by default.
    data_names, data_shapes : list of str, dict of str to tuple of int, optional
        Model inputs (default: the arguments without an entry in ``arg_params``) and their
        shapes, batch included (or ``Module.bind``'s ``DataDesc`` list): params' shapes are
        checked against them, ``tune`` times kernels at them.
    fold_batchnorm : bool, default True
        First fold each inference BatchNorm into the Convolution / FullyConnected /
        Deconvolution before it, in float32 (:mod:`mxnet_amp.passes.fold_batchnorm`): MXNet's
        oneDNN fusion otherwise folds them in bf16, 2-19x less accurate. False keeps them.
    strict_params, guard_weight_range : bool, default False, True
        Params the symbol does not read raise :class:`ParamError` (default: a warning);
        float16: readers of a weight float16 cannot hold stay float32 (:mod:`~mxnet_amp.passes.weight_range`).
    tune : None, bool, str or mxnet_amp.tune.tuning.Tuning, default None
        bfloat16: keep float32 each kernel timed slower in bfloat16 here (:mod:`mxnet_amp.tune.timing`).

    Returns
    -------
    (Symbol, dict, dict)
        The converted symbol and params in the dtypes it reads (tagged ``__dtype__``: binds as is).

    Raises
    ------
    AlreadyConvertedError
        The graph holds amp casts, or params are float16/bfloat16 already (named).
    ParamError
        A param missing, float64, misshapen, extra (``strict_params``); a BatchNorm's bad statistics.
    """
    options = make_options(target_dtype, OpLists(target_dtype_ops, fp32_ops, widest_dtype_ops, conditional_fp32_ops,
                                                 follow_ops, excluded_sym_names, overrides),
                           cast_optional_params=cast_optional_params, fold_batchnorm=fold_batchnorm,
                           strict_params=strict_params, guard_weight_range=guard_weight_range, tune=tune)
    warn_not_native(options.target_dtype)   # said once, at the caller's line
    return convert_model_full(check_symbol(sym), arg_params, aux_params, options, data_shapes=data_shapes,
                              data_names=check_names(data_names, "data_names"))[:3]
