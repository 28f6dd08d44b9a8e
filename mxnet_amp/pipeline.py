"""The conversion as lists of passes, each reading the record of the pass before it.

Every step is a :class:`~mxnet_amp.passes.kernel.GraphPass` run by
:func:`~mxnet_amp.passes.kernel.run_passes` (an error names its place in the list; the
order constraints are declared in :data:`ORDER`); a step hands the next one its record
(:class:`Prepared` before the casts, :class:`~mxnet_amp.passes.insert_casts.CastResult`
after), never a shared dict or an attribute of another pass object.

With params (:func:`~mxnet_amp.convert.convert_with_params`), :func:`prepare_passes`:

1. ``fold_batchnorm`` (:class:`FoldModel`, where the options ask): BatchNorms folded;
2. ``guard_weight_range`` (:class:`GuardWeightRange`): float16's out of range weights'
   readers kept float32;
3. ``tune`` (where ``tune=`` asks; :mod:`mxnet_amp.tune.timing`): kernels timed, the slower ones
   kept float32.

Then the conversion itself (:func:`conversion_passes`, run by :func:`convert_passes`, which
builds the :class:`~mxnet_amp.record.Conversion`):

4. ``slow_kernels`` (:class:`SlowKernels`): the ``[[slow_kernel]]`` rule's nodes kept float32;
5. ``insert_casts`` (:class:`CastRounds`): the cast pass, twice under
   ``cast_optional_params`` (round one finds the dtype each weight is stored in), and for
   bfloat16 once more with the reshapes oneDNN cannot run kept float32;
6. ``insert_fusion_barriers`` (:class:`GuardFusion`): bfloat16's identity casts that keep
   oneDNN's fusion off a shared convolution output;
7. ``tag_param_dtypes`` (:class:`TagStoredDtypes`): every weight's ``__dtype__``, so the
   symbol binds without a type_dict.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .errors import InferenceFailed, ParamError, TypeInferenceError
from .ir.dtypes import is_float
from .ir.graph import Entry, Graph
from .mx.io import graph_to_symbol
from .mx.optypes import OpTypes
from .mx.registry import infer_types
from .options import ConvertOptions
from .passes.fold_batchnorm import FoldBatchnorm, fold_batchnorm as fold_batchnorm_pass
from .passes.fusion_barriers import InsertFusionBarriers, insert_fusion_barriers
from .passes.insert_casts import FUSION_BARRIER, CastResult, InsertCasts, insert_casts
from .passes.kernel import GraphPass, PassResult, run_passes, this_before_that
from .passes.onednn_reshapes import blocked_reshapes
from .passes.tag_param_dtypes import TagParamDtypes
from .passes.weight_range import out_of_range_weights, readers_kept
from .policy import warn_unlisted
from .record import Conversion, ParamRecord, stored_why
from .warn import warn_user

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet.symbol import Symbol

__all__ = ["Prepared", "FoldModel", "GuardWeightRange", "SlowKernels", "CastRounds", "GuardFusion",
           "TagStoredDtypes", "TUNE", "ORDER", "prepare_passes", "conversion_passes", "convert_passes",
           "FoldedModel", "fold_model", "range_kept"]


@dataclass(frozen=True)
class Prepared:
    """What the steps before the cast pass decided: the record each of them reads from the
    one before and hands on (:func:`prepare_passes`, then :func:`conversion_passes`)."""

    options: ConvertOptions
    # the arg and aux params the graph reads (folded where folding ran; empty for a graph
    # converted without params)
    arg_params: Mapping[str, Any] = field(default_factory=dict)
    aux_params: Mapping[str, Any] = field(default_factory=dict)
    # (BatchNorm, producer) folded and (BatchNorm, why) kept by folding
    folded: tuple[tuple[str, str], ...] = ()
    kept: tuple[tuple[str, str], ...] = ()
    # what tune= timed and chose (mxnet_amp.tune.timing.TuneRecord), None without tune, and the
    # options before it chose (the whole-model check after the conversion converts them too)
    tuning: Any = None
    untuned: ConvertOptions | None = None


def _prepared(previous: PassResult[Any]) -> Prepared:
    if not isinstance(previous.decided, Prepared):
        raise TypeError(f"expected the Prepared record of the step before, got "
                        f"{type(previous.decided).__name__}")
    return previous.decided


class FoldModel(GraphPass[Prepared]):
    """BatchNorms folded into the op before them (:mod:`~mxnet_amp.passes.fold_batchnorm`),
    the params split back into arg and aux; a BatchNorm or producer the options keep
    float32 stays."""

    name = FoldBatchnorm.name   # the pass it runs, named there

    def call_after(self, previous: PassResult[Any]) -> PassResult[Prepared]:
        """Fold the graph of ``previous`` with its :class:`Prepared` params."""
        before = _prepared(previous)
        model = fold_model(previous.graph, before.arg_params, before.aux_params, before.options.fp32_nodes)
        decided = replace(before, arg_params=model.arg_params, aux_params=model.aux_params,
                          folded=model.folded, kept=model.kept)
        return PassResult(model.graph, decided, model.graph is not previous.graph)


class GuardWeightRange(GraphPass[Prepared]):
    """The readers of the weights float16 cannot hold kept float32 (:func:`range_kept`),
    the caller's own reasons first."""

    name = "guard_weight_range"

    def call_after(self, previous: PassResult[Any]) -> PassResult[Prepared]:
        """The options of ``previous`` with the readers kept."""
        before = _prepared(previous)
        options = before.options
        kept = range_kept(previous.graph, before.arg_params, before.aux_params, options)
        decided = replace(before, options=options.keeping({**kept, **options.fp32_nodes}))
        return PassResult(previous.graph, decided, False)


class SlowKernels(GraphPass[Prepared]):
    """The ``[[slow_kernel]]`` rule, once per node of the graph converted (after folding;
    bodies included): :meth:`~mxnet_amp.options.ConvertOptions.with_slow_kernels`."""

    name = "slow_kernels"

    def call_after(self, previous: PassResult[Any]) -> PassResult[Prepared]:
        """The options of ``previous`` with the slow kernels' nodes kept."""
        before = _prepared(previous)
        decided = replace(before, options=before.options.with_slow_kernels(previous.graph))
        return PassResult(previous.graph, decided, False)


class CastRounds(GraphPass[CastResult]):
    """The cast pass in its rounds (module doc), under the options of the :class:`Prepared`
    record before it: its :class:`CastResult` carries the dtype each weight is stored in
    (``stored_dtypes``) and the nodes the last round kept float32 (``fp32_nodes``)."""

    name = InsertCasts.name

    def __init__(self, data_dtypes: Mapping[str, str], stored: Mapping[str, str],
                 output_dtype: str | None) -> None:
        # each round checks its own output (InsertCasts)
        super().__init__(verify=False)
        self.data_dtypes, self.given, self.output_dtype = data_dtypes, stored, output_dtype

    def call_after(self, previous: PassResult[Any]) -> PassResult[CastResult]:
        """Run the rounds on ``previous``'s graph."""
        graph, options = previous.graph, _prepared(previous).options
        fp32_nodes = options.fp32_nodes
        result = self._rounds(graph, options, fp32_nodes)
        blocked = blocked_reshapes(result) if options.target_dtype == "bfloat16" else {}
        if blocked:
            # MXNet's oneDNN cannot run these reshapes in bfloat16: once more, with them in
            # float32 (passes/onednn_reshapes.py)
            fp32_nodes = MappingProxyType({**fp32_nodes, **blocked})
            result = self._rounds(graph, options, fp32_nodes)
        if result.unlisted_ops:
            warn_unlisted(result.unlisted_ops, options.target_dtype)
        return PassResult(result.graph, replace(result, fp32_nodes=fp32_nodes), True)

    def _rounds(self, graph: Graph, options: ConvertOptions, fp32_nodes: Mapping[str, str]) -> CastResult:
        """The cast pass, twice with ``cast_optional_params``; the result's
        ``stored_dtypes`` say where each weight is stored."""
        stored, op_types = dict(self.given), OpTypes()

        def cast_round(param_dtypes: Mapping[str, str | None]) -> CastResult:
            return insert_casts(graph, options.policy, data_dtypes=self.data_dtypes,
                                param_dtypes=param_dtypes, fp32_nodes=fp32_nodes,
                                output_dtype=self.output_dtype, op_types=op_types)
        if not options.cast_optional_params:
            return replace(cast_round(stored), stored_dtypes=MappingProxyType(stored))
        # round one leaves float32 weights to their consumers; a weight every consumer wants
        # in the same dtype is stored in it, the others stay as stored and get casts (a
        # weight declared float16/bfloat16 keeps its declared dtype)
        first = cast_round({k: (None if v == "float32" else v) for k, v in stored.items()})
        # round one is final when each float32 weight is wanted in exactly one dtype: every
        # consumer already reads it in the dtype it is now stored in, and no dtype was left
        # undecided (a weight no consumer gives a dtype leaves its readers' dtypes open)
        final = all(len(first.param_wants.get(name, ())) == 1
                    for name, dt in stored.items() if dt == "float32")
        for name, want in first.param_wants.items():
            if len(want) == 1 and stored[name] == "float32":
                stored[name] = next(iter(want))
        if final:
            # round two would rebuild the same graph (tag_param_dtypes writes the weights'
            # __dtype__ attributes); round one left the weights' own dtypes open
            return replace(_with_weight_dtypes(first, stored), stored_dtypes=MappingProxyType(stored))
        return replace(cast_round(stored), stored_dtypes=MappingProxyType(stored))


class GuardFusion(GraphPass[CastResult]):
    """bfloat16 graphs run on oneDNN, whose conv fusion misconnects a shared convolution
    output: the barriers go in (``passes/fusion_barriers.py``), the :class:`CastResult` of
    the pass before carried over to the new graph. float16 runs on GPUs, where MXNet fuses
    nothing of the kind."""

    name = InsertFusionBarriers.name

    def __init__(self, target_dtype: str) -> None:
        super().__init__(verify=False)   # insert_fusion_barriers checks its output
        self.target_dtype = target_dtype

    def call_after(self, previous: PassResult[Any]) -> PassResult[CastResult]:
        """Put the barriers into the graph of ``previous``, the cast pass's result."""
        result = _cast_result(previous)
        graph = previous.graph
        if self.target_dtype != "bfloat16":
            return PassResult(graph, result, False)
        guarded = insert_fusion_barriers(graph, result.tensor_dtypes)
        if not guarded.changed:
            return PassResult(graph, result, False)
        moved = guarded.decided.entries
        dtypes = {moved.get(Entry(e.node, e.output), e)._replace(version=e.version): dt
                  for e, dt in result.tensor_dtypes.items()}
        dtypes.update(guarded.decided.barrier_dtypes)
        casts = {moved[Entry(i)].node: kind for i, kind in result.inserted_casts.items()}
        casts.update((e.node, FUSION_BARRIER) for e in guarded.decided.barrier_dtypes)
        moved_result = replace(result, graph=guarded.graph, tensor_dtypes=MappingProxyType(dtypes),
                               inserted_casts=MappingProxyType(casts),
                               fusion_barriers=guarded.decided.guarded)
        return PassResult(guarded.graph, moved_result, True)


class TagStoredDtypes(GraphPass[CastResult]):
    """Every weight tagged ``__dtype__`` with the dtype the :class:`CastResult` before it
    stores it in (:mod:`~mxnet_amp.passes.tag_param_dtypes`); the record passes on as it
    is (its graph the untagged one, whose entries its dtypes key)."""

    name = TagParamDtypes.name

    def call_after(self, previous: PassResult[Any]) -> PassResult[CastResult]:
        """Tag the graph of ``previous``."""
        result = _cast_result(previous)
        tagged = TagParamDtypes(result.stored_dtypes, verify=False)(previous.graph)
        return PassResult(tagged.graph, result, tagged.changed)


def _cast_result(previous: PassResult[Any]) -> CastResult:
    if not isinstance(previous.decided, CastResult):
        raise TypeError(f"expected the CastResult of the pass before, got "
                        f"{type(previous.decided).__name__}")
    return previous.decided


# the name of the timed choice's step (convert._Tune, which runs mxnet_amp.tune.timing)
TUNE = "tune"
# the order every list of these passes keeps, declared (torch.fx's
# this_before_that_pass_constraint) and checked by run_passes
ORDER = (this_before_that(FoldModel.name, GuardWeightRange.name),
         this_before_that(GuardWeightRange.name, TUNE),
         this_before_that(FoldModel.name, SlowKernels.name),
         this_before_that(TUNE, SlowKernels.name),
         this_before_that(SlowKernels.name, CastRounds.name),
         this_before_that(CastRounds.name, GuardFusion.name),
         this_before_that(GuardFusion.name, TagStoredDtypes.name))


def prepare_passes(options: ConvertOptions, tune: GraphPass[Prepared] | None = None
                   ) -> list[GraphPass[Prepared]]:
    """The steps before the cast pass on a model with params: folding (where the options
    ask), the weight-range guard, and ``tune`` (the timed choice, where given)."""
    steps: list[GraphPass[Prepared]] = [FoldModel()] if options.fold_batchnorm else []
    steps.append(GuardWeightRange())
    return steps + ([tune] if tune is not None else [])


def conversion_passes(target_dtype: str, data_dtypes: Mapping[str, str],
                      stored: Mapping[str, str], output_dtype: str | None) -> list[GraphPass[Any]]:
    """The conversion's passes, in order (module doc), each reading the record of the one
    before."""
    return [SlowKernels(), CastRounds(data_dtypes, stored, output_dtype), GuardFusion(target_dtype),
            TagStoredDtypes()]


def convert_passes(graph: Graph, options: ConvertOptions, names: Sequence[str],
                   data_dtypes: Mapping[str, str], stored: Mapping[str, str],
                   output_dtype: str | None) -> Conversion:
    """Run :func:`conversion_passes` on ``graph``; the :class:`~mxnet_amp.record.Conversion`,
    its params' dtypes checked against MXNet's type inference of the result."""
    passes = conversion_passes(options.target_dtype, data_dtypes, stored, output_dtype)
    run = run_passes(PassResult(graph, Prepared(options), False), passes, ORDER)
    result: CastResult = run.results[-1].decided
    final = result.stored_dtypes
    sym = graph_to_symbol(run.graph)
    try:
        bound = _inferred_variable_dtypes(sym, final, data_dtypes)
    except TypeInferenceError as err:
        raise _non_float_param_error(run.graph, final, err) or err from None
    params = {k: ParamRecord(given=stored[k], stored=dt, bound=bound.get(k), why=stored_why(stored[k], dt))
              for k, dt in final.items()}
    return Conversion(graph=run.graph, original=graph, result=result, policy=options.policy,
                      data_names=tuple(names), params=MappingProxyType(params),
                      input_dtypes=MappingProxyType({k: dt for k, dt in bound.items() if k not in final}),
                      arguments=tuple(sym.list_arguments()),
                      auxiliary_states=tuple(sym.list_auxiliary_states()),
                      symbol=sym, fp32_nodes=result.fp32_nodes, fusion_barriers=result.fusion_barriers)


def _non_float_param_error(graph: Graph, stored: Mapping[str, str],
                           err: TypeInferenceError) -> ParamError | None:
    """The type check failed at a node reading a param that is no float (an int32 weight):
    a :class:`ParamError` naming that param, its dtype and its reader (None: no such param
    there, ``err`` stands)."""
    found = re.search(r"Error in operator (\S+?):", str(err))
    if found is None:
        return None
    try:
        node = graph.nodes[graph.index_of(found.group(1))]
    except KeyError:
        return None
    for k, e in enumerate(node.inputs):
        name = graph.nodes[e.node].name
        dtype = stored.get(name)
        if graph.nodes[e.node].is_variable and dtype is not None and not is_float(dtype):
            said = re.search(r"expected \w+, got \w+", str(err))
            return ParamError(f"param {name} is {dtype}, but {node.name} ({node.op}) reads it "
                              f"as input {k} in a float dtype"
                              + (f" (MXNet: {said.group(0)})" if said else "")
                              + f"; give it as float32 (e.g. arg_params[{name!r}]"
                              ".astype('float32'))", param=name)
    return None


def _inferred_variable_dtypes(sym: Symbol, stored: Mapping[str, str], data_dtypes: Mapping[str, str]
                              ) -> dict[str, str | None]:
    """Each argument and auxiliary state of the converted symbol -> its dtype by MXNet's type
    inference, which must agree with the weights' tags."""
    try:
        # weights pass as stored: one read only by amp_cast is otherwise left undecided
        args, _, auxs = infer_types(sym, {**stored, **data_dtypes})
    except InferenceFailed as err:
        raise TypeInferenceError(f"the converted graph does not type-check: {err}") from None
    arg_dtypes = dict(zip(sym.list_arguments(), args))
    aux_dtypes = dict(zip(sym.list_auxiliary_states(), auxs))
    undecided = [k for k, v in {**arg_dtypes, **aux_dtypes}.items() if v is None]
    if undecided:
        warn_user(f"type inference leaves {undecided[:10]} undecided; they stay as stored")
    _check_tags(stored, {**arg_dtypes, **aux_dtypes})
    return {**arg_dtypes, **aux_dtypes}


def _with_weight_dtypes(result: CastResult, stored: Mapping[str, str]) -> CastResult:
    """``result`` with each weight variable's tensor dtype set to its stored dtype."""
    dtypes = dict(result.tensor_dtypes)
    for i, node in enumerate(result.graph.nodes):
        if node.op == "null" and node.name in stored:
            dtypes[Entry(i)] = stored[node.name]
    return replace(result, tensor_dtypes=MappingProxyType(dtypes))


def _check_tags(tags: Mapping[str, str], inferred: Mapping[str, str | None]) -> None:
    """The ``__dtype__`` tags must be the dtypes type inference gives the params (the
    params are recast to the latter); MXNet keeps given input dtypes, so this holds unless
    a pass breaks it."""
    wrong = {k: (v, inferred[k]) for k, v in tags.items()
             if inferred.get(k) is not None and inferred[k] != v}
    if wrong:
        raise TypeInferenceError(f"type inference gives params other dtypes than their "
                                 f"__dtype__ tags (tag, inferred): {dict(list(wrong.items())[:10])}")


@dataclass(frozen=True)
class FoldedModel:
    """What :func:`fold_model` returns: the new graph, its arg and aux params, the
    ``(BatchNorm, producer)`` pairs folded and the ``(BatchNorm, why)`` pairs kept."""

    graph: Graph
    arg_params: dict
    aux_params: dict
    folded: tuple[tuple[str, str], ...]
    kept: tuple[tuple[str, str], ...]


def fold_model(graph: Graph, arg_params: Mapping, aux_params: Mapping,
               keep: Mapping[str, str] = MappingProxyType({})) -> FoldedModel:
    """:func:`~mxnet_amp.passes.fold_batchnorm.fold_batchnorm` on a model. ``keep``: node
    names kept float32, each with its reason (a BatchNorm named, or after one named,
    stays). Inputs are not modified; arrays that do not change are shared, folded ones are
    float32 numpy arrays until the recast writes them."""
    result = fold_batchnorm_pass(graph, {**arg_params, **aux_params}, keep=keep)
    new_aux = {k: v for k, v in result.params.items() if k in aux_params}
    new_args = {k: v for k, v in result.params.items() if k not in new_aux}
    return FoldedModel(result.graph, new_args, new_aux, result.folded, result.skipped)


def range_kept(graph: Graph, arg_params: Mapping, aux_params: Mapping,
               options: ConvertOptions) -> dict[str, str]:
    """The readers of the weights float16 cannot hold (:mod:`mxnet_amp.passes.weight_range`), to
    keep in float32 with the reason; with ``guard_weight_range`` off, none, and a warning
    naming the weights."""
    found = out_of_range_weights({**arg_params, **aux_params}, options.target_dtype)
    if not found:
        return {}
    if not options.guard_weight_range:
        warn_user("; ".join(found.values()) + ": converted to float16 anyway "
                  "(guard_weight_range off), where it holds inf or zeros")
        return {}
    return readers_kept(graph, found)
