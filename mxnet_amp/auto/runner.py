"""Running: the instrumented float32 reference, converted candidates (natively or
emulated), execution counting and the per-configuration cache."""
from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from ..convert import ConvertedModel, convert_model_full
from ..emulation import emulate_conversion, with_kernels
from ..errors import ArgumentError, ParamError, TargetDtypeError, error_text
from ..ir.dtypes import array_dtype
from ..ir.graph import Entry, Graph
from ..mx.arguments import check_contexts
from ..mx.hardware import bf16_runs_natively, fp16_runs_natively, refuse_not_native
from ..mx.io import graph_from_symbol, graph_to_symbol
from ..passes.fusion_barriers import insert_fusion_barriers
from ..policy import Reason, reason_kind
from ..record import Conversion
from ..tune.timing import TuneRecord, with_timings
from .checks.config import RunConfig
from .checks.log import SearchLog
from .deployed import binds_fused, forward_bound
from .measure import check_outputs
from .metrics import MetricCheck, validate_passed
from .records import OutputCheck, SearchStep
from .subsets import allowed_drop, subset_figures
from .workers import ModelBlob, run_model

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet import Context
    from mxnet.symbol import Symbol
    from tqdm import tqdm

    from .evaluation import DataJudge

# the reason of a node the search keeps float32, until the returned model's conversion says
# its own (Runs.final): search conversions are only run, never reported
SEARCHING = "auto: kept float32 while the automatic mode searches"


class Runs:
    """The executor of a search: converts, runs and checks configurations of ``config``
    (:class:`~mxnet_amp.auto.checks.config.RunConfig`, read only), caching the latest
    conversion and every configuration's check, and writes each execution to ``log``
    (:class:`~mxnet_amp.auto.checks.log.SearchLog`). ``data``: evaluation data of any size
    (``eval_data=``): checks run over all of it, the reference and attribution on the
    sample inputs (its first batches)."""

    def __init__(self, config: RunConfig, progress: tqdm, data: DataJudge | None = None) -> None:
        self.config, self.progress, self.data = config, progress, data
        self.log = SearchLog()
        self.options = config.options   # tune= times once: the first conversion drops it
        # the checks bind the model as Module does where it will run through oneDNN's
        # fusions (mxnet_amp.auto.deployed), not op by op
        self.bound = binds_fused(config.options.target_dtype, config.ctx, config.execution)
        self.bind_error: str | None = None   # why binding failed (the checks ran op by op)
        self.conversions: dict[frozenset, ConvertedModel] = {}
        self.tuned: TuneRecord | None = None    # what tune= timed (the first conversion's record)
        self.reference: list[np.ndarray] | None = None
        # outputs after NMS / top-k / sorting: the checks judge these tensors instead,
        # ``(node name, output)`` of the float32 graph (:meth:`judge_dense`; empty: the heads)
        self.judged: list[tuple[str, int]] = []
        self.after_reference: list[np.ndarray] = []   # the heads past such ops
        self._reference_blob: ModelBlob | None = None
        # the search's checks over evaluation data run on subsets (mxnet_amp.auto.subsets)
        # while this holds; the whole-set check and the search after a failed one clear it
        self.subsets = True

    @property
    def budget_left(self) -> bool:
        """Whether another execution fits the configuration's ``max_executions``."""
        return self.log.budget_left(self.config.settings.max_executions)

    def judge_dense(self, judged: list[tuple[str, int]], after_reference: list[np.ndarray]) -> None:
        """Judge the tensors ``judged`` instead of the heads (outputs after NMS / top-k),
        the heads only asked to stay finite where ``after_reference`` is."""
        self.judged, self.after_reference = list(judged), list(after_reference)

    def set_reference(self, reference: list[np.ndarray]) -> None:
        """The float32 outputs the one-batch checks compare with."""
        self.reference = list(reference)

    def convert(self, excluded: frozenset, reasons: Mapping[str, str] = MappingProxyType({})
                ) -> ConvertedModel:
        """The model converted with ``excluded`` kept in float32 (the latest one cached),
        each for the caller's reason, else its ``reasons`` entry, else :data:`SEARCHING`.
        Emulated checks get its params uncast (float32, rounded in the graph: no low
        precision copy beside the caller's originals while a check runs); :meth:`final`
        casts them."""
        user = self.config.options.fp32_nodes
        fp32_nodes = {n: user.get(n) or _searched(reasons.get(n) or SEARCHING) for n in sorted(excluded)}
        key = frozenset(fp32_nodes.items())
        hit = self.conversions.get(key)
        if hit is None:
            self.conversions = {}   # its param copies go before the next conversion's come
            options = self.options.keeping(fp32_nodes)
            if self.tuned is not None:
                # timed once: every later conversion starts from the choices made
                options = with_timings(options, self.tuned)
            hit = convert_model_full(self.config.sym, dict(self.config.arg_params),
                                     dict(self.config.aux_params), options,
                                     data_names=list(self.config.data_names), sequential_casts=True,
                                     # checked once, with the sample inputs' shapes
                                     check_shapes=False, cast_params=self.config.execution == "native",
                                     data_shapes={k: v.shape for k, v in self.config.inputs.items()})
            if self.options.tuning is not None:
                self.tuned = hit.conversion.tuning
                self.options = replace(self.options, tuning=None)
            elif self.tuned is not None:
                hit = hit._replace(conversion=replace(hit.conversion, tuning=self.tuned))
            self.conversions = {key: hit}   # only the latest: conversions hold param copies
        return hit

    def final(self, excluded: frozenset, reasons: Mapping[str, str]) -> ConvertedModel:
        """The returned model: :meth:`convert`'s with each node the search kept saying why
        (``reasons``: a report shows them as they are), its params cast now, after the last
        check (so the low precision copies never coexist with a check's temporaries)."""
        sym, args, auxs, conversion = self.convert(excluded, reasons)
        self.conversions = {}
        if self.config.execution == "emulated":
            args, auxs = conversion.recast(args, auxs, sequential=True)
        return ConvertedModel(sym, args, auxs, conversion)

    def forward(self, sym: Symbol, arg_params: Mapping, aux_params: Mapping) -> list[np.ndarray]:
        """One model execution. Through a CachedOp, as Gluon runs models: ``Symbol.bind``
        applies MXNet 1.9's MKLDNN subgraph fusion, which returns wrong values for a fused
        FullyConnected+relu when both outputs are graph outputs (the instrumented run)."""
        import mxnet as mx
        names, values = self._values(sym, arg_params, aux_params)
        if self.config.execution == "emulated":   # its roundings by the kernels (same bits)
            sym = with_kernels(sym, {k: v.shape for k, v in values.items()},
                               {k: array_dtype(v) for k, v in values.items()})[0]
        result = run_model(mx.nd.CachedOp(sym), names, values)
        self._count()
        return result

    def _values(self, sym: Symbol, arg_params: Mapping, aux_params: Mapping
                ) -> tuple[list[str], dict]:
        """``sym``'s input names and a value for each (params on :attr:`ctx`, the sample
        inputs); :class:`ParamError` naming those with none."""
        values = {k: v.as_in_context(self.config.ctx) for k, v in {**arg_params, **aux_params}.items()}
        values.update(self.config.inputs)
        names = sym.list_inputs()
        missing = [n for n in names if n not in values]
        if missing:
            raise ParamError(f"no value for the model inputs {missing[:10]}")
        return names, values

    def _forward_check(self, sym: Symbol, args: Mapping, auxs: Mapping) -> list[np.ndarray]:
        """A check's execution: bound where :attr:`bound`; a model MXNet's executor cannot
        bind (some fused graphs do not) runs op by op from then on, and the report says
        why (:func:`mxnet_amp.auto.deployed.deployment_note`)."""
        if self.bound:
            try:
                return self.forward_bound(sym, args, auxs)
            except RuntimeError as err:   # MXNetError
                self.bound, self.bind_error = False, error_text(err, 300)
        return self.forward(sym, args, auxs)

    def forward_bound(self, sym: Symbol, arg_params: Mapping, aux_params: Mapping
                      ) -> list[np.ndarray]:
        """One model execution bound as ``Module`` binds it (oneDNN's fusions applied:
        :func:`mxnet_amp.auto.deployed.forward_bound`)."""
        _, values = self._values(sym, arg_params, aux_params)
        result = forward_bound(sym, values, self.config.ctx)
        self._count()
        return result

    def _count(self) -> None:
        self.log.executions += 1
        self.progress.update(1)

    def run_reference(self, instrumented_sym: Symbol) -> list[np.ndarray]:
        """Run the instrumented float32 model once (every used tensor an output)."""
        outs = self.forward(instrumented_sym, self.config.arg_params, self.config.aux_params)
        self.log.step("reference")
        return outs

    def check(self, excluded: frozenset, kind: str) -> OutputCheck:
        """Run the converted model without ``excluded`` in low precision; cached."""
        hit = self.log.results.get(excluded)
        if hit is not None:
            return hit
        sym, args, auxs, conversion = self.convert(excluded)
        if self.judged:
            conversion = _judged_conversion(conversion, self.judged, self.bound)
            sym = graph_to_symbol(conversion.graph)
        config = self.config
        if config.execution == "emulated":
            # no param copies: each check emulates once and runs once, so rounding weights
            # in the graph costs what rounding them ahead would, without holding a copy; the
            # conversion's record gives the graph and every dtype (no inference again)
            sym, args, auxs = emulate_conversion(conversion, args, auxs, self.config.input_dtypes())
        if self.data is not None:
            return self._record(excluded, kind,
                                self._check_data(excluded, sym, {**args, **auxs}, kind))
        outs = self._forward_check(sym, args, auxs)
        assert self.reference is not None, "run_reference first"
        reference = self.reference
        after = outs[len(reference):] if self.judged else []
        outs = outs[:len(reference)]
        settings = config.settings
        result = check_outputs(reference, outs, config.options.target_dtype, settings.tolerance,
                               settings.rtol, settings.atol)
        if not _finite_where(self.after_reference, after):
            result = replace(result, passed=False)
        validate = settings.validate
        if validate is not None:
            passed = validate_passed(validate([r.copy() for r in reference], outs))
            metric = validate if isinstance(validate, MetricCheck) else None
            result = replace(result, criterion="validate" if metric is None else "metric",
                             passed=passed)
            if metric is not None:
                self.log.metric_values[excluded] = dict(metric.last or {})
        return self._record(excluded, kind, result)

    def _record(self, excluded: frozenset, kind: str, result: OutputCheck) -> OutputCheck:
        """Cache and log the check of ``excluded``."""
        self.log.record(excluded, kind, result)
        self.progress.set_postfix(kept_fp32=len(excluded), ok=result.passed, refresh=False)
        return result

    def full_check(self, excluded: frozenset) -> OutputCheck:
        """The check of ``excluded`` on the whole evaluation data: its cached one where that
        read it all, else run once more over every batch (step "final"), replacing the
        subset verdict."""
        if excluded not in self.log.partial:
            return self.log.results[excluded]
        del self.log.results[excluded]
        self.log.partial.discard(excluded)
        whole, self.subsets = self.subsets, False
        try:
            return self.check(excluded, "final")
        finally:
            self.subsets = whole

    def _check_data(self, excluded: frozenset, sym: Symbol, params: dict,
                    kind: str = "check") -> OutputCheck:
        """The check of one configuration over the evaluation data (``self.data``); the
        float32 model runs over it first, once. The search's checks run on subsets where
        the metric allows (:mod:`mxnet_amp.auto.subsets`); the first check (``kind``
        "check") stops early only on a failure, so that a pass is the whole set's."""
        data, validate = self.data, self.config.settings.validate
        assert data is not None
        if not data.has_reference:
            data.reference(self.reference_blob(), len(self.judged))
            self._count()
            self.log.step("reference data")
            if isinstance(validate, MetricCheck) and data.reference_score is not None:
                validate.reference_score = data.reference_score
                data.plan_subsets(allowed_drop(validate))
        figures: dict = {}
        result: OutputCheck
        score: float | None
        if self.subsets and data.plan is not None and isinstance(validate, MetricCheck):
            result, score, figures = self._on_data(lambda blob: data.judge_subset(
                blob, allowed_drop(validate), len(self.judged), stop_on_pass=kind != "check"),
                excluded, sym, params)
        else:
            result, score = self._on_data(lambda blob: data.judge(blob, len(self.judged)),
                                          excluded, sym, params)
        self._count()
        if isinstance(validate, MetricCheck) and figures:   # a subset's verdict
            self.log.partial.add(excluded)
            self.log.metric_values[excluded] = subset_figures(validate, figures)
            result = replace(result, criterion="metric", passed=figures["passed"])
        elif isinstance(validate, MetricCheck) and score is not None:
            validate.reference_score = data.reference_score
            result = replace(result, criterion="metric", passed=validate.compare(score))
            self.log.metric_values[excluded] = dict(validate.last or {})
        elif validate is not None:
            result = replace(result, criterion="validate")
        return result

    def _on_data(self, judge: Callable[[ModelBlob], Any], excluded: frozenset, sym: Symbol,
                 params: dict) -> Any:
        """``judge`` of the model: bound fused where the one-batch checks bind (the written
        model's path), decided here once: the blob carries it to every worker; a graph the
        executor cannot bind runs op by op from then on, said in the report."""
        zeros = self._zero_inputs()
        try:
            return judge(ModelBlob(("check", excluded, self.bound), sym, params,
                                   self.config.input_dtypes(), zeros, fused=self.bound))
        except RuntimeError as err:   # MXNetError, or a worker's WorkerError
            if not self.bound:
                raise
            self.bound, self.bind_error = False, error_text(err, 300)
            return judge(ModelBlob(("check", excluded, False), sym, params, self.config.input_dtypes(),
                                   zeros))

    def _zero_inputs(self) -> dict[str, tuple]:
        """The inputs the evaluation data does not feed (loss labels): their shape past the batch."""
        assert self.data is not None
        return {k: tuple(v.shape[1:]) for k, v in self.config.inputs.items()
                if k not in self.data.source.names}

    def reference_blob(self) -> ModelBlob:
        """The float32 model the evaluation data's reference pass runs (made once: the
        judged tensors must be known, :func:`~mxnet_amp.auto.search.reference_and_search`)."""
        if self._reference_blob is None:
            self._reference_blob = ModelBlob("float32", self._reference_symbol(),
                                             self.config.params(),
                                             self.config.input_dtypes(), self._zero_inputs())
        return self._reference_blob

    def _reference_symbol(self) -> Symbol:
        """The float32 model, its judged tensors (if any) as outputs before its heads."""
        if not self.judged:
            return self.config.sym
        graph = graph_from_symbol(self.config.sym)
        index = {n.name: i for i, n in enumerate(graph.nodes) if not n.is_variable}
        heads = tuple(Entry(index[name], k) for name, k in self.judged) + tuple(graph.heads)
        return graph_to_symbol(Graph(graph.nodes, heads, graph.attrs))

    def verdict_words(self, excluded: frozenset) -> str:
        """What the check of ``excluded`` measured, in the terms of the criterion that decided
        it: a metric's drop, the caller's validate(), else the relative error (allclose:
        its error in units of the bound) and the top-1 changes, never a figure it met."""
        result = self.log.results[excluded]
        metric = self.log.metric_values.get(excluded)
        if result.criterion == "metric" and metric:
            return f"{metric['name']} drop {metric['drop']:.3g}"
        if result.criterion == "validate":
            return f"validate() {'passed' if result.passed else 'failed'}"
        words = (f"allclose error {result.tolerance_ratio:.3g} x its bound"
                 if result.criterion == "allclose" else f"relative error {result.relative_error:.3g}")
        if result.top1_flips:
            words += f", top-1 changed on {result.top1_flips} of {result.top1_rows} rows"
        return words


def _finite_where(reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> bool:
    """Whether ``outputs`` are finite wherever ``reference`` is."""
    return all(o.shape == r.shape and np.isfinite(o[np.isfinite(r)]).all()
               for r, o in zip(reference, outputs))


def _judged_conversion(conversion: Conversion, judged: list[tuple[str, int]],
                       bound: bool = False) -> Conversion:
    """The conversion whose graph has the judged tensors first as outputs, then its own
    heads past a boundary op (checked for finiteness); its record is the conversion's (the
    nodes are the same). ``bound``: run through oneDNN's fusions, which would hand a judged
    convolution output that a BatchNorm also reads the normalised tensor instead: fusion
    barriers (:mod:`mxnet_amp.passes.fusion_barriers`) keep each judged tensor its own."""
    from dataclasses import replace as replace_field

    graph = conversion.graph
    folded = {bn: producer for bn, producer in conversion.folded_batchnorms}
    index = {n.name: i for i, n in enumerate(graph.nodes) if not n.is_variable}
    heads = [Entry(index[folded.get(name, name)], k) for name, k in judged]
    judged_graph = Graph(graph.nodes, tuple(heads) + tuple(graph.heads), graph.attrs)
    if bound:
        judged_graph = insert_fusion_barriers(judged_graph, conversion.result.tensor_dtypes).graph
    return replace_field(conversion, graph=judged_graph)


def context_of(ctx: object) -> Context:
    """``ctx`` checked (None: the CPU); TypeError for anything but an mx.Context."""
    import mxnet as mx
    if ctx is None:
        return mx.cpu()
    if not isinstance(ctx, mx.Context):
        raise ArgumentError(f"ctx must be an mx.Context (mx.cpu(), mx.gpu(0)), got {ctx!r}")
    check_contexts(ctx)   # a GPU this build or machine lacks
    return ctx


def execution_mode(target_dtype: str, ctx: Context, execution: str) -> tuple[str, str | None]:
    """``('native'|'emulated', note)``; ``execution='auto'`` picks native where it runs."""
    if execution not in ("auto", "native", "emulated"):
        raise ArgumentError(f"execution must be 'auto', 'native' or 'emulated', got {execution!r}")
    if execution == "native" and target_dtype == "float16" and ctx.device_type == "cpu":
        # refused here, not by MXNet's "FP16 gemm on cpu not implemented" mid-search
        raise TargetDtypeError(f"execution='native' cannot run float16 on {ctx}: MXNet has no "
                               "float16 CPU kernels (float16 runs natively only on a GPU); use "
                               "execution='emulated' to check it through mxnet_amp.emulation")
    if execution == "native" and ctx.device_type == "cpu":
        refuse_not_native(target_dtype, "execution='native'")
    if execution != "auto":
        return execution, None
    if target_dtype == "float16":
        if ctx.device_type == "gpu" and fp16_runs_natively(ctx):
            return "native", None
        return "emulated", (f"float16 does not execute on {ctx} in MXNet; the checks ran the "
                            "converted model through mxnet_amp.emulation")
    if ctx.device_type == "cpu" and bf16_runs_natively():
        return "native", None
    return "emulated", (f"bfloat16 matrix ops do not execute on this {ctx} (oneDNN needs "
                        "avx512); the checks ran the converted model through mxnet_amp.emulation")


def _searched(why: str) -> str:
    """``why`` as a :class:`~mxnet_amp.policy.Reason` of kind "search" (a reason that has a
    kind keeps it)."""
    return why if reason_kind(why) is not None else Reason(why, "search")
