"""The conversion as a list of passes: what :func:`~mxnet_amp.convert.convert_graph` runs.

:func:`conversion_passes` builds the list and :func:`convert_passes` runs it with
:func:`~mxnet_amp.passes.kernel.run_passes` (an error names its place in it) and builds the
:class:`~mxnet_amp.record.Conversion`:

1. ``insert_casts`` (:class:`CastRounds`): the cast pass, twice under
   ``cast_optional_params`` (round one finds the dtype each weight is stored in), and for
   bfloat16 once more with the reshapes oneDNN cannot run kept float32;
2. ``insert_fusion_barriers`` (:class:`GuardFusion`): bfloat16's identity casts that keep
   oneDNN's fusion off a shared convolution output;
3. ``tag_param_dtypes``: every weight's ``__dtype__``, so the symbol binds without a type_dict.

Before the list, with params (:func:`~mxnet_amp.convert.convert_with_params`):
:func:`fold_model` and :func:`range_kept`.
"""
from __future__ import annotations

import re
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping, Sequence

from .dtypes import is_float
from .errors import InferenceFailed, ParamError, TypeInferenceError
from .graph import Entry, Graph
from .io import graph_to_symbol
from .options import ConvertOptions
from .optypes import OpTypes
from .passes.fold_batchnorm import fold_batchnorm as fold_batchnorm_pass
from .passes.fusion_barriers import insert_fusion_barriers
from .passes.insert_casts import FUSION_BARRIER, CastResult, insert_casts
from .passes.kernel import GraphPass, PassResult, run_passes
from .passes.onednn_reshapes import blocked_reshapes
from .passes.tag_param_dtypes import TagParamDtypes
from .policy import warn_unlisted
from .record import Conversion, ParamRecord, stored_why
from .registry import infer_types
from .warn import warn_user
from .weight_range import out_of_range_weights, readers_kept

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet.symbol import Symbol

__all__ = ["CastRounds", "GuardFusion", "conversion_passes", "convert_passes", "fold_model",
           "range_kept"]


class CastRounds(GraphPass[CastResult]):
    """The cast pass in its rounds (module doc); ``stored`` (weight -> dtype) is updated to
    the dtype each weight is stored in, :attr:`fp32_nodes` to what the last round kept."""

    name = "insert_casts"

    def __init__(self, options: ConvertOptions, data_dtypes: Mapping[str, str],
                 stored: dict[str, str], output_dtype: str | None) -> None:
        # each round checks its own output (InsertCasts)
        super().__init__(verify=False)
        self.options, self.data_dtypes, self.stored = options, data_dtypes, stored
        self.output_dtype, self.fp32_nodes = output_dtype, options.fp32_nodes
        self.decided: CastResult | None = None

    def call(self, graph: Graph) -> PassResult[CastResult]:
        """Run the rounds on ``graph``."""
        given = dict(self.stored)
        result = self._rounds(graph)
        blocked = blocked_reshapes(result) if self.options.target_dtype == "bfloat16" else {}
        if blocked:
            # MXNet's oneDNN cannot run these reshapes in bfloat16: once more, with them in
            # float32 (passes/onednn_reshapes.py)
            self.stored.update(given)
            self.fp32_nodes = MappingProxyType({**self.fp32_nodes, **blocked})
            result = self._rounds(graph)
        if result.unlisted_ops:
            warn_unlisted(result.unlisted_ops, self.options.target_dtype)
        self.decided = result
        return PassResult(result.graph, result, True)

    def _rounds(self, graph: Graph) -> CastResult:
        """The cast pass, twice with ``cast_optional_params``."""
        stored, op_types = self.stored, OpTypes()

        def cast_round(param_dtypes: Mapping[str, str | None]) -> CastResult:
            return insert_casts(graph, self.options.policy, data_dtypes=self.data_dtypes,
                                param_dtypes=param_dtypes, fp32_nodes=self.fp32_nodes,
                                output_dtype=self.output_dtype, op_types=op_types)
        if not self.options.cast_optional_params:
            return cast_round(stored)
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
            return _with_weight_dtypes(first, stored)
        return cast_round(stored)


class GuardFusion(GraphPass[CastResult]):
    """bfloat16 graphs run on oneDNN, whose conv fusion misconnects a shared convolution
    output: the barriers go in (``passes/fusion_barriers.py``), the cast record of
    ``casts`` (the pass before) carried over to the new graph. float16 runs on GPUs, where
    MXNet fuses nothing of the kind."""

    name = "insert_fusion_barriers"

    def __init__(self, casts: CastRounds) -> None:
        super().__init__(verify=False)   # insert_fusion_barriers checks its output
        self.casts = casts
        self.guarded: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def call(self, graph: Graph) -> PassResult[CastResult]:
        """Put the barriers into ``graph``, the cast pass's output."""
        result = self.casts.decided
        assert result is not None and result.graph is graph, "GuardFusion runs after its CastRounds"
        if self.casts.options.target_dtype != "bfloat16":
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
        self.guarded = guarded.decided.guarded
        moved_result = replace(result, graph=guarded.graph, tensor_dtypes=MappingProxyType(dtypes),
                               inserted_casts=MappingProxyType(casts))
        return PassResult(guarded.graph, moved_result, True)


def conversion_passes(options: ConvertOptions, data_dtypes: Mapping[str, str],
                      stored: dict[str, str], output_dtype: str | None
                      ) -> tuple[CastRounds, GuardFusion, TagParamDtypes]:
    """The conversion's passes, in order (module doc); ``stored`` as :class:`CastRounds`'s."""
    casts = CastRounds(options, data_dtypes, stored, output_dtype)
    # the tags are read when the pass runs: the dtypes the cast rounds stored
    return casts, GuardFusion(casts), TagParamDtypes(stored)


def convert_passes(graph: Graph, options: ConvertOptions, names: Sequence[str],
                   data_dtypes: Mapping[str, str], stored: dict[str, str],
                   output_dtype: str | None) -> Conversion:
    """Run :func:`conversion_passes` on ``graph``; the :class:`~mxnet_amp.record.Conversion`,
    its params' dtypes checked against MXNet's type inference of the result."""
    given = dict(stored)
    passes = conversion_passes(options, data_dtypes, stored, output_dtype)
    *_, guarded, tagged = run_passes(graph, passes)
    casts, fusion, _ = passes
    sym = graph_to_symbol(tagged.graph)
    try:
        bound = _inferred_variable_dtypes(sym, stored, data_dtypes)
    except TypeInferenceError as err:
        raise _non_float_param_error(tagged.graph, stored, err) or err from None
    params = {k: ParamRecord(given=given[k], stored=dt, bound=bound.get(k), why=stored_why(given[k], dt))
              for k, dt in stored.items()}
    return Conversion(graph=tagged.graph, original=graph, result=guarded.decided, policy=options.policy,
                      data_names=tuple(names), params=MappingProxyType(params),
                      input_dtypes=MappingProxyType({k: dt for k, dt in bound.items() if k not in stored}),
                      arguments=tuple(sym.list_arguments()),
                      auxiliary_states=tuple(sym.list_auxiliary_states()),
                      symbol=sym, fp32_nodes=casts.fp32_nodes, fusion_barriers=fusion.guarded)


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


def fold_model(graph: Graph, arg_params: Mapping, aux_params: Mapping,
               keep: Mapping[str, str] = MappingProxyType({})
               ) -> tuple[Graph, dict, dict, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """:func:`~mxnet_amp.passes.fold_batchnorm.fold_batchnorm` on a model: returns the new
    graph, arg params, aux params, the ``(BatchNorm, producer)`` pairs folded and the
    ``(BatchNorm, why)`` pairs kept. ``keep``: node names kept float32, each with its reason
    (a BatchNorm named, or after one named, stays). Inputs are not modified; arrays that do
    not change are shared."""
    result = fold_batchnorm_pass(graph, {**arg_params, **aux_params}, keep=keep)
    new_aux = {k: v for k, v in result.params.items() if k in aux_params}
    new_args = {k: v for k, v in result.params.items() if k not in new_aux}
    return result.graph, new_args, new_aux, result.folded, result.skipped


def range_kept(graph: Graph, arg_params: Mapping, aux_params: Mapping,
               options: ConvertOptions) -> dict[str, str]:
    """The readers of the weights float16 cannot hold (:mod:`mxnet_amp.weight_range`), to
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
