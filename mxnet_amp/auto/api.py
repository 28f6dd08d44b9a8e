"""The automatic mode's entry points: :func:`auto_convert_model`, :func:`auto_convert_block`
and :func:`auto_convert` (the same under built options)."""
from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Sequence

from ..emulation import rounding_note
from ..errors import ArgumentError, GraphError
from ..gluon.adapter import converted_symbol_block
from ..gluon.model import block_model
from ..ir.graph import Graph
from ..mx.arguments import (check_bool, check_callable, check_choice, check_int, check_names, check_number,
                            check_symbol, param_dict)
from ..mx.io import graph_from_symbol
from ..mx.params import check_data_names, label_inputs, model_inputs
from ..options import ConvertOptions, OpLists, make_options
from ..policy import check_target_dtype
from ..shape_check.check import check_param_shapes
from ..warn import warn_user
from .batches import BatchSource, eval_source, known_batches
from .checks.config import RunConfig
from .deployed import deployment_note
from .evaluation import DataJudge, batch_pool
from .inputs import sample_inputs as sample_input_arrays
from .measure import default_scale_tolerance, default_tolerances
from .metrics import DROPS, MetricCheck
from .numpy_notes import numpy_warnings_noted
from .records import SEARCHES, AutoReport, AutoSettings, kept_reasons
from .runner import Runs, context_of, execution_mode
from .search import reference_and_search
from .task_metric import task_metric

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet import Context
    from mxnet.gluon import HybridBlock
    from mxnet.symbol import Symbol

    from ..gluon.block import AMPSymbolBlock


class AutoConverted(NamedTuple):
    """What :func:`auto_convert_model` returns (unpacks as ``(symbol, arg_params, aux_params,
    report)``): the model as :func:`mxnet_amp.convert_model` returns it, and the report."""

    symbol: Symbol
    arg_params: dict
    aux_params: dict
    report: AutoReport


def auto_settings(target_dtype: str, rtol: float | None = None, atol: float | None = None,
                  validate: Callable[[list, list], bool] | None = None,
                  tolerance: float | None = None, underflow_fraction: float = 0.1,
                  max_executions: int | None = None, search: str = "attribution",
                  metric: Any = None, max_drop: float | None = None,
                  drop: str = "absolute", metric_inputs: Callable | None = None) -> AutoSettings:
    """The :class:`AutoSettings` of :func:`auto_convert_model`'s keywords, defaults filled in.

    Parameters
    ----------
    target_dtype, rtol, atol, validate, tolerance, underflow_fraction, max_executions
        As in :func:`auto_convert_model`.
    search : {'attribution', 'bisection'}, default 'attribution'
        How accuracy culprits are found when the check fails with no range culprit left:
        one attribution run (teacher forcing) ranks the nodes and the top ones are
        validated, the bisection taking over only when that fails; or the bisection alone.
    metric : EvalMetric, str or callable, optional
        An ``mx.metric.EvalMetric`` (``mx.metric.Accuracy()``, ``TopKAccuracy(5)``, gluoncv's
        ``VOC07MApMetric``, ...) or a name for ``mx.metric.create`` (``'acc'``,
        ``'top_k_accuracy'``, ``'mse'``): updated batch by batch over ``eval_data`` with
        (labels, outputs), its value read once per pass (a loss metric's negated: higher is
        better; :mod:`mxnet_amp.auto.task_metric`). Or a callable
        ``metric(outputs) -> float``: a task score of the model outputs on the sample inputs
        (a list of float32 numpy arrays in model output order; higher is better, e.g. top-1
        accuracy against the sample's labels: :func:`mxnet_amp.auto.metrics.builtin_metric`).
        Given, a configuration passes when its score is at most ``max_drop`` below the float32
        model's, instead of the closeness check; nodes are kept in float32 only where the
        score drops. The report's ``metric`` holds the figures.
    max_drop : float
        Required with ``metric``: the largest drop that passes.
    drop : {'absolute', 'relative'}, default 'absolute'
        ``max_drop`` in the score's own units, or as a fraction of the float32 score (as
        Intel Neural Compressor's ``accuracy_criterion``).
    metric_inputs : callable, optional
        ``metric_inputs(labels, outputs) -> tuple``: the arguments of the EvalMetric's
        ``update`` for one batch (lists of NDArrays: the batch's labels, the model's
        outputs); default ``(labels, outputs)``. A detector metric takes others.

    Raises
    ------
    ValueError
        A tolerance that is negative or not finite, ``max_executions`` below 2,
        ``underflow_fraction`` outside (0, 1], ``search`` not one of ``SEARCHES``, a
        ``metric`` without ``max_drop`` or with ``validate``, or a bad ``max_drop``/``drop``.
    """
    checked = _tolerances(check_target_dtype(target_dtype), tolerance, rtol, atol)
    max_executions = check_int(max_executions, "max_executions", low=2, optional=True)
    underflow_fraction = check_number(underflow_fraction, "underflow_fraction", low=0, high=1,
                                      low_open=True)
    search = check_choice(search, "search", SEARCHES)
    validate = check_callable(validate, "validate")
    drop = check_choice(drop, "drop", DROPS)
    if metric is None and (max_drop is not None or metric_inputs is not None):
        raise ArgumentError("max_drop / metric_inputs are given without metric: they bound and feed "
                            "the metric's score; give metric too")
    if metric is not None:
        validate = _metric_check(metric, validate, max_drop, drop, metric_inputs)
    return AutoSettings(checked.tolerance, checked.rtol, checked.atol, validate, underflow_fraction,
                        max_executions, search)


class _Tolerances(NamedTuple):
    tolerance: float
    rtol: float | None
    atol: float | None


def _tolerances(target_dtype: str, tolerance: Any, rtol: Any, atol: Any) -> _Tolerances:
    """The tolerances checked (ArgumentError naming each), defaults filled in."""
    rtol = None if rtol is None else check_number(rtol, "rtol", low=0)
    atol = None if atol is None else check_number(atol, "atol", low=0)
    if rtol is not None or atol is not None:
        d_rtol, d_atol = default_tolerances(target_dtype)
        rtol = d_rtol if rtol is None else rtol
        atol = d_atol if atol is None else atol
    tolerance = (default_scale_tolerance(target_dtype) if tolerance is None
                 else check_number(tolerance, "tolerance", low=0, low_open=True))
    return _Tolerances(tolerance, rtol, atol)


def _metric_check(metric: Any, validate: Callable | None, max_drop: float | None, drop: str,
                  metric_inputs: Callable | None = None) -> MetricCheck:
    """The check of a user ``metric`` (a fresh one per run: it remembers the float32 score
    of this model only); ValueError for what :func:`auto_settings` says."""
    if validate is not None:
        raise ArgumentError("give metric or validate, not both: both decide the check")
    if max_drop is None:
        raise ArgumentError("metric needs max_drop: the largest drop of the score from the "
                         "float32 model's that passes (absolute, or relative with "
                         "drop='relative')")
    task = task_metric(metric, metric_inputs)
    if task is not None:
        return MetricCheck(_scored_per_pass, check_number(max_drop, "max_drop", low=0), drop, task.name,
                           task=task)
    if not callable(metric):
        raise ArgumentError(f"metric must be an mx.metric.EvalMetric, a metric name or a callable "
                            f"of the model outputs, got {metric!r}")
    return MetricCheck(metric, check_number(max_drop, "max_drop", low=0),
                       drop, getattr(metric, "__name__", "metric"))


def _scored_per_pass(outputs: list) -> float:
    """The score function of an EvalMetric's check: never called on one batch's outputs."""
    raise ArgumentError("an EvalMetric (or a metric name) scores passes over eval_data: give "
                     "auto_convert_model eval_data with labels")


def auto_convert_model(sym: Symbol, arg_params: Mapping, aux_params: Mapping,
                       sample_inputs: Any = None, target_dtype: str = "float16",
                       rtol: float | None = None, atol: float | None = None,
                       validate: Callable[[list, list], bool] | None = None, *,
                       tolerance: float | None = None, ctx: Context | None = None,
                       execution: str = "auto", excluded_sym_names: Sequence[str] | None = None,
                       target_dtype_ops: Sequence[str] | None = None,
                       fp32_ops: Sequence[str] | None = None,
                       widest_dtype_ops: Sequence[str] | None = None,
                       conditional_fp32_ops: Sequence[tuple[str, str, Sequence[str]]] | None = None,
                       data_names: Sequence[str] | None = None, cast_optional_params: bool = True,
                       fold_batchnorm: bool = True, underflow_fraction: float = 0.1,
                       max_executions: int | None = None, quiet: bool = False,
                       follow_ops: Sequence[str] | None = None, overrides: str = "replace",
                       strict_params: bool = False, search: str = "attribution",
                       metric: Any = None, max_drop: float | None = None, drop: str = "absolute",
                       guard_weight_range: bool = True, tune: object = None, eval_data: Any = None,
                       metric_inputs: Callable | None = None, workers: int | None = None,
                       client: Any = None, attribution_samples: int = 8
                       ) -> AutoConverted:
    """Convert an fp32 model to mixed precision, keeping in float32 what fails validation.

    Parameters
    ----------
    sym : Symbol
        The fp32 model (not modified).
    arg_params, aux_params : dict of str to NDArray
        Its params (not modified).
    sample_inputs : NDArray, array, list of arrays, or dict of name to array, optional
        One batch of inputs (a list in input order; one array for a single-input model).
    target_dtype : {'float16', 'bfloat16'}
    rtol, atol : float, optional
        Given (either), the check is ``allclose(converted, fp32, rtol, atol)``, the other from
        :func:`default_tolerances` ((1e-2, 1e-3) float16, (5e-2, 1e-2) bfloat16).
    validate : callable, optional
        ``validate(reference_outputs, converted_outputs) -> bool`` on lists of float32
        numpy arrays (model output order), replacing the check.
    tolerance : float, optional
        The default check's bound on each output's ``max|out - fp32| / max|fp32|``
        (:func:`check_outputs`; no ``(batch, classes)`` output may change a top-1 class).
        Default :func:`default_scale_tolerance`: 1e-2 for float16, 5e-2 for bfloat16.
    ctx : Context, optional: where the model runs (default ``mx.cpu()``).
    execution : {'auto', 'native', 'emulated'}
        How the checks run the converted model: ``'auto'``, natively where the hardware runs
        ``target_dtype`` (float16 on a GPU, bfloat16 on avx512), else emulated; the report says.
    excluded_sym_names, target_dtype_ops, fp32_ops, widest_dtype_ops, follow_ops, conditional_fp32_ops, data_names, cast_optional_params, fold_batchnorm, overrides, strict_params, guard_weight_range
        As in :func:`mxnet_amp.convert_model`; user-excluded nodes stay excluded (a BatchNorm
        excluded, or after an excluded op, is not folded); every check runs the model as returned.
    underflow_fraction : float, default 0.1
        A tensor is an underflow suspect when this fraction of its nonzero values flush to
        zero in ``target_dtype`` (kept only where that costs accuracy).
    max_executions : int, optional
        Upper bound on model executions (at least 2); when hit, the undecided candidates
        stay float32 (the last configuration seen to pass).
    quiet : bool, default False: no progress bar (shown on a terminal only).
    search, metric, max_drop, drop, metric_inputs
        As in :func:`auto_settings` (the culprit search; a task metric as the check).
    tune : As in :func:`mxnet_amp.convert_model`, at the sample inputs' shapes (once, first).
    eval_data, workers, client, attribution_samples
        Evaluation data of any size, and where its batches run: as in :func:`auto_convert`.

    Returns
    -------
    AutoConverted
        The model as :func:`mxnet_amp.convert_model` returns it, and the report.

    Raises
    ------
    GraphError, ParamError
        Bad sample inputs, or params that do not fit the symbol.
    """
    settings = auto_settings(target_dtype, rtol, atol, validate, tolerance, underflow_fraction,
                             max_executions, search, metric, max_drop, drop, metric_inputs)
    options = make_options(target_dtype, OpLists(target_dtype_ops, fp32_ops, widest_dtype_ops, conditional_fp32_ops,
                                                 follow_ops, excluded_sym_names, overrides),
                           cast_optional_params=cast_optional_params, fold_batchnorm=fold_batchnorm,
                           strict_params=strict_params, guard_weight_range=guard_weight_range, tune=tune)
    return auto_convert(sym, arg_params, aux_params, sample_inputs, options, settings, ctx=ctx,
                        execution=execution, data_names=data_names, quiet=quiet, eval_data=eval_data,
                        workers=workers, client=client, attribution_samples=attribution_samples)


def auto_convert(sym: Symbol, arg_params: Mapping, aux_params: Mapping, sample_inputs: Any,
                 options: ConvertOptions, settings: AutoSettings, *,
                 ctx: Context | None = None, execution: str = "auto",
                 data_names: Sequence[str] | None = None,
                 quiet: bool = False, eval_data: Any = None, workers: int | None = None,
                 client: Any = None, attribution_samples: int = 8
                 ) -> AutoConverted:
    """:func:`auto_convert_model` under ``options`` (:func:`mxnet_amp.options.make_options`)
    and ``settings`` (:func:`auto_settings`); the other parameters and the result as there.

    ``eval_data``: data of any size, read a batch at a time (:mod:`mxnet_amp.auto.batches`: a
    DataIter, a DataLoader, an iterable of batches), judging every configuration on all of
    it (:mod:`mxnet_amp.auto.evaluation`) on ``workers`` processes (default one per core; 1:
    here) or a Dask ``client``'s cluster; ranges and attribution on ``sample_inputs``, else
    its first ``attribution_samples`` (every tensor of them is held: ~0.3 GB per 224 px
    resnet50 image)."""
    from tqdm.auto import tqdm
    sym, quiet = check_symbol(sym), check_bool(quiet, "quiet")
    workers, attribution_samples = _checked_pool(workers, attribution_samples, client)
    ctx = context_of(ctx)
    mode, mode_note = execution_mode(options.target_dtype, ctx, execution)
    arg_params, aux_params = param_dict(arg_params, "arg_params"), param_dict(aux_params, "aux_params")
    _check_eval_data(eval_data, sample_inputs, settings)
    # worker processes start first, while the graph and first batches are read; they load
    # MXNet with the first model, preloaded after the reference run
    source = judge = progress = pool = None
    try:   # from the pool's start: a Ctrl-C as its workers start still closes it
        pool = batch_pool(workers, ctx, client, known_batches(eval_data)) if eval_data is not None else None
        original, data_names = _graph_and_inputs(sym, arg_params, data_names)
        evaluated = eval_source(eval_data, sample_inputs, data_names, original, attribution_samples)
        source, sample_inputs, rows = evaluated.source, evaluated.sample_inputs, evaluated.rows
        notes = ([mode_note] if mode_note else []) + ([rounding_note()] if mode == "emulated" else [])
        progress = tqdm(desc=f"auto {options.target_dtype}", unit="run", leave=False,
                        disable=True if quiet else None)   # None: on a terminal only, never a pipe
        judge = _data_judge(source, settings, options.target_dtype, pool, quiet)
        runs = _checked_runs(sym, arg_params, aux_params, sample_inputs, original, options, settings,
                             ctx=ctx, data_names=data_names, execution=mode, progress=progress,
                             data=judge)
        with numpy_warnings_noted(runs.log.steps, notes):
            # the first conversion checks params against the symbol (typed errors) first
            runs.convert(options.excluded)
            found = reference_and_search(runs, original, settings, notes)
            if judge is not None:   # no more batches: the workers wind down meanwhile
                judge.pool.stop()
            model = runs.final(found.excluded, kept_reasons(found.kept))
        deployed = deployment_note(runs.config.options.target_dtype, runs.config.ctx, runs.bound,
                                   model.conversion, runs.bind_error, over_data=runs.data is not None)
        notes.extend([deployed] if deployed else [])
    finally:
        # the judge closes its source and pool; without one, what was opened is closed here
        for closing in [progress] + ([judge] if judge is not None else [source, pool]):
            if closing is not None:
                closing.close()
    report = _with_data_figures(runs.log.report(runs.config, found.excluded, found.kept, model.conversion, notes,
                                                found.reference_finite, tuple(found.errors)), judge, rows)
    if not report.validated:
        warn_user("auto_convert_model: the returned model did not validate "
                  f"({report.criterion_text()}); see report.notes")
    return AutoConverted(model.symbol, model.arg_params, model.aux_params, report)


def _checked_runs(sym: Symbol, arg_params: dict, aux_params: dict, sample_inputs: Any,
                  original: Graph, options: ConvertOptions, settings: AutoSettings, *,
                  ctx: Context, data_names: list[str], execution: str, progress: Any,
                  data: DataJudge | None = None) -> Runs:
    """The :class:`Runs` of a search, the sample inputs and exclusions checked first (the
    sample inputs' shapes reach every weight: a wrong one is named before any run)."""
    inputs = sample_input_arrays(sample_inputs, data_names, ctx, sym, original)
    check_param_shapes(sym, arg_params, aux_params, {k: v.shape for k, v in inputs.items()},
                       shapes_from="sample_inputs")
    options.check_excluded(original)
    return Runs(RunConfig.of(sym=sym, arg_params=arg_params, aux_params=aux_params, inputs=inputs,
                             ctx=ctx, options=options, data_names=data_names, settings=settings,
                             execution=execution), progress, data)


def _checked_pool(workers: Any, attribution_samples: Any, client: Any) -> tuple[int | None, int]:
    """``workers`` and ``attribution_samples`` checked (ints >= 1), ``client`` a Dask client or
    None: an :class:`ArgumentError` naming the parameter, before any work."""
    if client is not None and not callable(getattr(client, "submit", None)):
        raise ArgumentError(f"client must be a distributed.Client (or None), got {client!r}")
    return (check_int(workers, "workers", low=1, optional=True),
            int(check_int(attribution_samples, "attribution_samples", low=1) or 0))


def _graph_and_inputs(sym: Symbol, arg_params: dict, data_names: Any) -> tuple[Graph, list[str]]:
    """The model's graph and its inputs: ``data_names`` checked, else every argument without
    a param but a loss output's label."""
    data_names = check_names(data_names, "data_names")
    if data_names is not None:
        check_data_names(sym.list_arguments(), arg_params, data_names)
    original = graph_from_symbol(sym)
    return original, model_inputs(sym.list_arguments(), arg_params, data_names,
                                  labels=label_inputs(original))


def _with_data_figures(report: AutoReport, judge: DataJudge | None, rows: int | None) -> AutoReport:
    """``report`` with how much evaluation data the checks read, where they read any."""
    if judge is None:
        return report
    return replace(report, samples=judge.source.samples, batches=judge.source.batches,
                   attribution_samples=rows, workers=judge.pool.workers,
                   pass_seconds=tuple(judge.pass_seconds),
                   sample_evaluations=judge.sample_evaluations)


def _check_eval_data(eval_data: Any, sample_inputs: Any, settings: AutoSettings) -> None:
    """``eval_data`` and ``sample_inputs`` checked against each other and the metric, before
    any work (an :class:`ArgumentError` / :class:`GraphError` saying what to give)."""
    task = settings.validate.task if isinstance(settings.validate, MetricCheck) else None
    if eval_data is None:
        if task is not None:
            raise ArgumentError(f"metric {task.name!r} (an EvalMetric) is updated with the labels "
                             "of eval_data batches: give eval_data")
        if sample_inputs is None:
            raise GraphError("auto_convert_model needs sample_inputs or eval_data")
        return
    if isinstance(settings.validate, MetricCheck) and task is None:
        raise ArgumentError("with eval_data, metric must be an mx.metric.EvalMetric or a metric "
                         "name (updated batch by batch); a callable metric scores one batch "
                         "of sample_inputs")
    if isinstance(eval_data, (str, bytes, os.PathLike)) or not hasattr(eval_data, "__iter__"):
        raise ArgumentError(f"eval_data must be an mx.io.DataIter, a gluon DataLoader or an iterable of "
                            f"batches, got {eval_data!r} (a .rec file: mxnet_amp.auto.batches.RecordBatches)")


def _data_judge(source: BatchSource | None, settings: AutoSettings, target_dtype: str, pool: Any,
                quiet: bool) -> DataJudge | None:
    """The :class:`DataJudge` of the checks over ``source``, its batches run by ``pool``
    (None without evaluation data)."""
    if source is None or pool is None:
        return None
    metric = settings.validate if isinstance(settings.validate, MetricCheck) else None
    return DataJudge(source, pool, target_dtype=target_dtype,
                     tolerance=settings.tolerance, rtol=settings.rtol, atol=settings.atol,
                     metric=metric.task if metric is not None else None,
                     validate=None if metric is not None else settings.validate, quiet=quiet)


def auto_convert_block(block: HybridBlock, sample_inputs: Any, target_dtype: str = "float16",
                       rtol: float | None = None, atol: float | None = None,
                       validate: Callable[[list, list], bool] | None = None, *,
                       input_names: Sequence[str] | None = None, ctx: Context | None = None,
                       **kwargs: Any) -> tuple[AMPSymbolBlock, AutoReport]:
    """:func:`auto_convert_model` for a Gluon block: returns ``(SymbolBlock, AutoReport)``.

    Parameters
    ----------
    block : HybridBlock or SymbolBlock
        The fp32 model, params initialised (not modified).
    sample_inputs : NDArray, list of NDArray, or dict
        One batch: an array per positional input of the block (or a dict by input name).
    input_names : list of str, optional
        As in :func:`mxnet_amp.gluon.adapter.convert_hybrid_block`.
    ctx : Context, optional
        Where the checks run and the converted block's params live (default: the block's).
    **kwargs
        Any other keyword of :func:`auto_convert_model`.

    Returns
    -------
    (SymbolBlock, AutoReport)
        The block :func:`mxnet_amp.gluon.adapter.convert_hybrid_block` would build with the chosen
        ``excluded_sym_names`` (the model :func:`auto_convert_model` returned), and the report.
    """
    if "data_names" in kwargs:
        raise ArgumentError("auto_convert_block takes no 'data_names'; use input_names")
    sym, arg_params, aux_params, names = block_model(block, input_names)
    run_ctx = ctx if ctx is not None else _block_context(block)
    new_sym, new_args, new_auxs, report = auto_convert_model(
        sym, arg_params, aux_params, sample_inputs, target_dtype, rtol, atol, validate,
        ctx=run_ctx, data_names=names, **kwargs)
    # the returned model itself, not a second conversion with the same exclusions
    return converted_symbol_block(block, names, new_sym, new_args, new_auxs, ctx), report


def _block_context(block: Any) -> Any:
    import mxnet as mx
    for param in block.collect_params().values():
        if param._data is not None:
            return param.list_ctx()[0]
    return mx.cpu()
