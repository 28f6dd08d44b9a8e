"""The search (steps 1-4 of :mod:`mxnet_amp.auto`): the float32 reference run, the range
culprits it shows (:mod:`mxnet_amp.auto.ranges`), then the attribution or the bisection for
accuracy culprits (:mod:`mxnet_amp.auto.culprits.bisection`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import AMPError, DegenerateModelError, error_text
from ..ir.dtypes import LOW_PRECISION
from ..ir.graph import Graph
from ..mx.io import graph_to_symbol
from ..passes.dense_outputs import dense_outputs
from ..passes.expose_outputs import expose_outputs
from ..policy import Category
from ..record import Conversion
from .attribution import attribute
from .culprits.bisection import Prefixes, bisect, known_failing
from .culprits.shrink import Shrunk, shrink
from .degenerate import batchnorms, degenerate_params, nonfinite_origins
from .measure import reference_ranges
from .ranges import Stats, range_exclusions, tensor_name
from .records import DTYPE_LIMITS, AutoSettings, DtypeLimits, KeptNode, NodeError
from .runner import Runs

Tensors = Mapping[tuple[int, int], Any]

# the picks aim the error left in low precision, as the attribution measured it, at this share
# of the tolerance (errors of several nodes add only roughly in quadrature: a margin)
_AIM = 0.8
# at most this many node errors are kept in the report
_ATTRIBUTION_REPORTED = 200
# what the report says of nodes kept for their ranges (step 2): found without an execution
_RANGES_NOT_SHRUNK = ("the nodes kept for their float32 ranges (overflow/underflow, step 2) were "
                     "found from the reference run's tensors without an execution and are "
                     "not shrunk: each holds a value the dtype cannot")


@dataclass(frozen=True)
class SearchResult:
    """What the search found (:func:`reference_and_search`): the nodes to keep float32, why
    each is kept (the caller's first), the attribution's node errors (empty when it did not
    run) and whether the float32 reference outputs were finite."""

    excluded: frozenset
    kept: tuple[KeptNode, ...]
    errors: list[NodeError]
    reference_finite: bool = True


@dataclass(frozen=True)
class _Attributed:
    """What the attribution's picks gave (:func:`_attributed_search`): the exclusions (None
    when the picks did not validate), the culprits, the node errors and the failed picks."""

    found: frozenset | None
    culprits: dict[str, KeptNode]
    errors: list[NodeError]
    failed: frozenset


def low_nodes(conversion: Conversion) -> list[str]:
    """The original graph's nodes the conversion runs in low precision."""
    return [n.name for n in conversion.original.nodes if not n.is_variable
            and conversion.result.node_dtypes.get(n.name) in LOW_PRECISION]


def _accuracy_search(runs: Runs, original: Graph, base: frozenset, stats: Stats,
                     notes: list[str], errors: Sequence[NodeError] = (),
                     failed: frozenset = frozenset()) -> tuple[frozenset, dict[str, KeptNode]]:
    """The measured search for the nodes whose low precision breaks validation (module doc,
    step 4), over the low precision nodes in the attribution's order (``errors``: its
    ranking, largest estimate first; without one, the most subnormal first).

    ``failed``: the picks it validated, measured to fail. Put first, they are a prefix known
    to fail, from which the bisection (:func:`~mxnet_amp.auto.culprits.bisection.bisect`)
    starts: the attribution's order can make it cheaper (each culprit after the first is
    searched for among the nodes ranked before the last one found), never dearer than the
    bisection in any other order. :func:`_minimal` then shrinks what passed to a 1-minimal
    set. (The shortest passing prefix searched by doubling from the picks cost ``2 log2 m``
    where the last culprit is ranked m-th, beyond the bisection's ``log2 N + 1`` for one
    culprit ranked late; and kept every node before it: issue 41.)

    Returns the exclusion set to use (always one that was seen to pass, or ``base`` when
    nothing passed) and the accuracy culprits."""
    index = {n.name: i for i, n in enumerate(original.nodes)}
    used = original.num_used_outputs()

    def suspicion(name: str) -> float:
        i = index[name]
        return max((stats[(i, k)].subnormal for k in range(used[i]) if (i, k) in stats), default=0.0)

    rank = {e.name: i for i, e in enumerate(errors)}
    conversion = runs.convert(base).conversion
    cands = sorted(low_nodes(conversion),
                   key=lambda n: (rank.get(n, len(rank)), -suspicion(n), index[n]))
    # the failed picks first (the ops they left out as following their inputs' dtype, ranked
    # among them, had split them: no prefix was the configuration measured)
    cands = [n for n in cands if n in failed] + [n for n in cands if n not in failed]
    if failed:
        # the ranking past the picks, less the ops whose dtype their producers decide (a
        # slice of a culprit's output, ranked beside it: keeping it alone changes nothing)
        decided = _decided_by_producers(original, conversion.result.categories, set(cands))
        cands = [n for n in cands if n in failed or n not in decided]
    prefixes = Prefixes(runs, original, base, cands, notes)
    # the bisection in the ranking's order, from the failed picks (a prefix measured to
    # fail): no more executions than the bisection alone, whatever the ranking
    return bisect(prefixes, known_failing(prefixes, failed))


def _decided_by_producers(original: Graph, categories: Mapping[str, Category],
                          cands: set[str]) -> set[str]:
    """The candidates that are no target op and read only other candidates' outputs: their
    dtype follows their producers', so keeping the producers in float32 keeps them too."""
    nodes = original.nodes
    return {n.name for n in nodes
            if n.name in cands and categories.get(n.name) is not Category.TARGET
            and all(nodes[e.node].name in cands for e in n.inputs if not nodes[e.node].is_variable)
            and any(not nodes[e.node].is_variable for e in n.inputs)}


def _select(errors: Sequence[NodeError], tolerance: float, scale: float = 1.0) -> list[NodeError]:
    """The nodes to keep in float32 by their measured contribution (times ``scale``): each
    one at least half the tolerance, then the next ones down to a twentieth of it while the
    rest still add up to more than ``_AIM`` of it; at least the first. Contributions add in
    quadrature, as :func:`~mxnet_amp.auto.attribution.attribute` scales them (added up
    linearly, a hundred nodes of 0.002 each, 0.02 together, read as 0.2 and were all kept)."""
    picks = [e for e in errors if e.contribution * scale >= tolerance / 2]
    rest = list(errors[len(picks):])
    left = sum((e.contribution * scale) ** 2 for e in rest)
    for e in rest:
        c = e.contribution * scale
        if math.sqrt(max(left, 0.0)) <= _AIM * tolerance or c < tolerance / 20:
            break
        picks.append(e)
        left -= c * c
    return picks or list(errors[:1])


def _attributed_search(runs: Runs, original: Graph, base: frozenset, tensors: Tensors,
                       notes: list[str]) -> _Attributed:
    """Step 4 of the module doc: one attribution run, the top nodes kept in float32,
    validated (then shrunk to a 1-minimal set by :func:`_minimal`); its exclusions None
    when the picks did not validate: the
    bisection in the attribution's order from the failed picks takes over
    (:func:`_accuracy_search`). No
    second round of picks: each would add an execution to what that search then spends
    (with up to three re-picks, a 400-node DAG of benchmarks/planted_culprits_structured.py
    with 3 culprits failed four validations before its bisection: 31 executions)."""
    try:
        errors = attribute(runs, original, base, tensors, runs.log.results[base].relative_error,
                           runs.config.settings.error_bound)
    except (AMPError, RuntimeError, ValueError) as err:   # MXNetError is a RuntimeError
        # MXNet's message is a traceback whose last line holds the cause (error_text)
        notes.append(f"the attribution run failed ({error_text(err, 200)}); "
                     "the accuracy search bisected")
        return _Attributed(None, {}, [], frozenset())
    tolerance = runs.config.settings.error_bound
    # the ops' own categories (nothing but ``base`` excluded), read once: every pick below
    # is judged against them
    categories = runs.convert(base).conversion.result.categories
    picks = [e.name for e in _select(errors, tolerance)]
    if not runs.budget_left:
        return _Attributed(None, {}, errors, frozenset())
    config = base | frozenset(_needed(runs, base, categories, picks))
    if runs.check(config, "validate").passed:
        kept = [e.name for e in errors if e.name in config and e.name in picks]
        return _Attributed(config, _attributed(errors, {n: None for n in kept}, runs, base), errors, frozenset())
    notes.append(f"the {len(picks)} nodes the attribution ranked first did not validate "
                 f"({runs.verdict_words(config)}); the accuracy search bisected in the "
                 "attribution's order, from them")
    return _Attributed(None, {}, errors, config - base)


def _needed(runs: Runs, base: frozenset, categories: Mapping[str, Category],
            picks: Sequence[str]) -> list[str]:
    """``picks`` less the nodes that compute in float32 anyway once the others are excluded:
    an op that follows its inputs' dtype (relu, pooling, reshape, ...) runs in float32 when
    its producer does, so excluding it too changes nothing (the same conversion) and it is
    no culprit. On a random SSD the attribution picked each relu beside its convolution
    (it re-rounds its input, so it shows that rounding as its own local error): 31 nodes
    kept where the 18 convolutions gave the same outputs. ``categories``: each node's own
    category in the conversion excluding ``base``."""
    core = [n for n in picks if categories.get(n) is Category.TARGET]
    if len(core) == len(picks):
        return list(picks)
    _, _, _, conversion = runs.convert(base | frozenset(core))
    dtypes = conversion.result.node_dtypes
    return [n for n in picks if n in core or dtypes.get(n) in LOW_PRECISION]


def _attributed(errors: Sequence[NodeError], rounds: Mapping[str, float | None],
                runs: Runs, base: frozenset) -> dict[str, KeptNode]:
    """The :class:`KeptNode` of each culprit the attribution found (``rounds``: its name ->
    None for a first pick, else the error measured with the picks before it). An estimate
    beyond the tolerance is the reason only where the check of ``base`` failed on its
    error; else (a metric's drop, validate(), top-1 changes) that failure is."""
    tolerance = runs.config.settings.error_bound
    first = [e for e in errors if e.name in rounds and rounds[e.name] is None]
    together = math.sqrt(sum(e.contribution ** 2 for e in first))
    failed = runs.log.results[base]
    on_error = failed.criterion in ("scale", "allclose") and failed.relative_error > tolerance
    kept = {}
    for e in errors:
        if e.name not in rounds:
            continue
        estimate = (f"relative error ~{e.contribution:.3g} at outputs (measured: its local "
                    f"error {e.local_error:.3g}, {e.relative_local_error:.3g} of its output, "
                    "carried through the float32 graph)")
        if rounds[e.name] is not None:
            why = (f"; added when the picks before it measured {rounds[e.name]:.3g} > "
                   f"tolerance {tolerance:g} (the nodes left scaled to that)")
        elif on_error and e.contribution > tolerance:
            why = f" > tolerance {tolerance:g}"
        elif on_error and together > tolerance:
            why = f"; with the other first picks ~{together:.3g} > tolerance {tolerance:g}"
        else:
            why = (f"; ranked first where the check failed ({runs.verdict_words(base)}; "
                   f"{runs.config.criterion_words()})")
        kept[e.name] = KeptNode(e.name, e.op, runs.config.accuracy_reason, e.contribution, e.name,
                                estimate + why + "; validated without it in low precision")
    return kept


def _minimal(runs: Runs, original: Graph, base: frozenset, config: frozenset,
             kept: dict[str, KeptNode], ranked: Sequence[str], notes: list[str]
             ) -> tuple[frozenset, dict[str, KeptNode]]:
    """``config`` (measured to pass; ``base`` measured to fail) shrunk to a 1-minimal set
    (:func:`~mxnet_amp.auto.culprits.shrink.shrink`, in the attribution's order ``ranked``,
    then graph order): ``(exclusions, kept nodes)``, how minimality was shown in ``notes``
    and ``runs.log``. Left as it is where nothing passed or the budget ran out."""
    proposed = config - base
    result = runs.log.results.get(config)
    if (not proposed or result is None or not result.passed
            or any(k.reason == "budget" for k in kept.values())):
        return config, kept
    position = {n.name: i for i, n in enumerate(original.nodes)}
    rank = {n: i for i, n in enumerate(ranked)}
    shrunk = shrink(runs, base, sorted(proposed, key=lambda n: (rank.get(n, len(rank)),
                                                                position.get(n, -1))))
    runs.log.minimality = shrunk.text()
    notes.append(shrunk.text())
    return base | frozenset(shrunk.kept), {n: _alone(k, shrunk) for n, k in kept.items()
                                           if n in shrunk.kept}


def _alone(k: KeptNode, shrunk: Shrunk) -> KeptNode:
    """``k`` saying that returning it alone to low precision was measured to fail."""
    if not shrunk.shown:
        return k
    return replace(k, detail=f"{k.detail or ''}; returning it alone to low precision fails the "
                             "check (measured)")


def _search(runs: Runs, original: Graph, stats: Stats, limits: DtypeLimits, underflow_fraction: float,
            user_excluded: frozenset, notes: list[str], tensors: Tensors | None = None
            ) -> SearchResult:
    """Steps 2-4 of the module doc: the exclusion set to return, why each node is in it,
    and the attribution's node errors (empty when it did not run)."""
    # 2. nodes holding out of range tensors in low precision: float32 (no execution)
    excluded, kept = range_exclusions(runs, original, stats, limits, underflow_fraction,
                                       user_excluded, notes)
    # 3. one converted check
    ok = runs.check(excluded, "check").passed
    errors: list[NodeError] = []
    # 4. only when the ranges do not explain the error: attribution, then bisection
    if not ok:
        found_set = None
        failed: frozenset = frozenset()
        if tensors is not None and runs.budget_left and runs.config.settings.search == "attribution":
            attributed = _attributed_search(runs, original, excluded, tensors, notes)
            found_set, found = attributed.found, attributed.culprits
            errors, failed = attributed.errors, attributed.failed
        if found_set is None:
            found_set, found = _accuracy_search(runs, original, excluded, stats, notes, errors,
                                                failed)
        ranges = bool(kept)
        excluded, found = _minimal(runs, original, excluded, found_set, found,
                                   [e.name for e in errors], notes)
        kept.update(found)
        if ranges:
            notes.append(_RANGES_NOT_SHRUNK)
        excluded = _whole_set(runs, original, excluded, kept, stats, notes)
    elif kept:
        notes.append(_RANGES_NOT_SHRUNK)
    ops = {n.name: n.op for n in original.nodes}
    kept_nodes = [KeptNode(n, ops[n], "user") for n in sorted(user_excluded)]
    position = {n.name: i for i, n in enumerate(original.nodes)}
    kept_nodes += [kept[n] for n in sorted(kept, key=lambda n: position.get(n, -1))]
    return SearchResult(excluded, tuple(kept_nodes), errors[:_ATTRIBUTION_REPORTED])


def _whole_set(runs: Runs, original: Graph, excluded: frozenset, kept: dict[str, KeptNode],
               stats: Stats, notes: list[str]) -> frozenset:
    """The search's candidate, its verdict a subset's (:mod:`mxnet_amp.auto.subsets`),
    checked once on the whole evaluation data; where that fails, the search goes on from it
    on the whole set (bisection, then shrinking of what it adds; ``kept`` updated). Returns
    the exclusion set to use."""
    data = runs.data
    if data is None or data.metric is None:
        return excluded
    if data.plan is None:
        notes.append(f"the metric {data.metric.name!r} is not a mean of per-sample scores "
                     "(accuracy, top-k accuracy), so every check ran on the whole evaluation data")
        return excluded
    plan = data.plan
    said = (f"the search's checks ran on random subsets of the evaluation data's batches "
            f"(first {plan.rounds[0]} of {len(plan.order)} batches, doubling until a paired "
            "one-sided 95% bound on the metric's drop decided: mxnet_amp.auto.subsets)")
    if excluded not in runs.log.partial or not runs.log.results[excluded].passed:
        notes.append(said)
        return excluded
    result = runs.full_check(excluded)
    words = runs.verdict_words(excluded)
    if result.passed:
        notes.append(f"{said}; the candidate they returned was checked once on the whole "
                     f"set: passed ({words})")
        return excluded
    notes.append(f"{said}; the candidate they returned failed on the whole set ({words}), so "
                 "the search went on from it with every check on the whole set")
    runs.subsets = False
    runs.log.forget_partial()
    found_set, found = _accuracy_search(runs, original, excluded, stats, notes)
    final, found = _minimal(runs, original, excluded, found_set, found, [], notes)
    kept.update(found)
    return final


def _judge_dense(runs: Runs, original: Graph, tensors: Tensors,
                 notes: list[str]) -> list[np.ndarray] | None:
    """Outputs after NMS / top-k / sorting / comparisons: the checks judge the dense
    tensors feeding the first such op instead (:mod:`mxnet_amp.passes.dense_outputs`), and
    only ask the outputs to stay finite. Returns the reference those checks judge (None:
    the model has no such outputs, its heads are the reference)."""
    split = dense_outputs(original)
    if not split.after:
        return None
    keys = [(original.heads[k].node, original.heads[k].output) for k in split.dense]
    keys += [(e.node, e.output) for e in split.feeds if (e.node, e.output) not in keys]
    keys = [k for k in keys if k in tensors and tensors[k].dtype.kind == "f"]
    runs.judge_dense([(original.nodes[i].name, k) for i, k in keys],
                     [tensors[(e.node, e.output)] for e in original.heads])
    shown = ", ".join(tensor_name(original, k) for k in keys[:6]) + (", ..." if len(keys) > 6 else "")
    notes.append(f"{len(split.after)} of the {len(original.heads)} outputs follow "
                 f"{', '.join(sorted({original.nodes[original.index_of(n)].op for n in split.ops}))}"
                 f" ({', '.join(split.ops[:4])}): selections and orderings that any rounding "
                 f"changes where scores tie, so the checks judged the {len(keys)} dense tensors "
                 f"before them instead ({shown}) and only asked the outputs to stay finite; "
                 "pass validate= to judge the final outputs your own way")
    return [tensors[k] for k in keys]


def _refuse_degenerate(runs: Runs, original: Graph) -> None:
    """:class:`~mxnet_amp.errors.DegenerateModelError` before any run when a BatchNorm's
    statistics are degenerate (``moving_var + eps <= 0`` or not finite): MXNet's kernels
    return finite garbage there, not nan (an SSD-512 with half its running variances
    negative: a finite float32 reference, and 94 executions, 138 s of a search judged
    against it)."""
    bad = degenerate_params(original, runs.config.params(),
                            batchnorms(original))
    if bad:
        raise DegenerateModelError(
            f"the float32 model is degenerate: {len(bad)} BatchNorm"
            f"{'s have' if len(bad) > 1 else ' has'} statistics no trained BatchNorm has "
            f"({_first_five(bad)}); what it computes there is no "
            "reference to judge a conversion against. Train or calibrate the BatchNorm "
            "statistics first", nodes=tuple(bad))


def _degenerate_reference(runs: Runs, original: Graph, tensors: Tensors) -> list[str]:
    """The nodes where the float32 reference first turns non-finite; raises
    :class:`~mxnet_amp.errors.DegenerateModelError` (no search: each configuration would be
    judged against nan) when params of those nodes explain it."""
    origins = nonfinite_origins(original, tensors)
    bad = degenerate_params(original, runs.config.params(), origins)
    if bad:
        raise DegenerateModelError(
            f"the float32 model itself computes inf/nan on the sample inputs, from its params "
            f"at {len(bad)} node{'s' if len(bad) > 1 else ''} ({_first_five(bad)}): nothing converted can be judged against it. "
            "Train or calibrate the BatchNorm statistics (or fix the params) first",
            nodes=tuple(bad))
    return origins


def reference_and_search(runs: Runs, original: Graph, settings: AutoSettings, notes: list[str]
                          ) -> SearchResult:
    """Steps 1-4 of the module doc."""
    limits = DTYPE_LIMITS[runs.config.options.target_dtype]
    _refuse_degenerate(runs, original)
    # 1. one float32 run with every op output: reference and per-tensor ranges
    probe, keys = expose_outputs(original)
    outs = runs.run_reference(graph_to_symbol(probe))
    # every tensor is kept for the attribution run (it feeds them back as inputs)
    tensors = dict(zip(keys, outs))
    dense = _judge_dense(runs, original, tensors, notes) \
        if runs.config.settings.validate is None else None
    if runs.data is not None:
        # the workers load MXNet and the float32 model while this process reads the ranges
        # (not during the reference run, which uses every core)
        runs.data.pool.preload(runs.reference_blob())
    heads, stats = reference_ranges(original, keys, outs, runs.config.inputs,
                                    runs.config.params(), limits)
    del outs
    # the heads, unless the dense tensors before NMS / top-k are the reference
    reference = dense if dense is not None else heads
    runs.set_reference(reference)
    reference_finite = all(np.isfinite(r).all() for r in reference)
    if not reference_finite:
        origins = _degenerate_reference(runs, original, tensors)
        notes.append("the float32 reference outputs hold inf/nan on these sample inputs: "
                     "those elements were not judged (float32 itself lost them; first at "
                     f"{', '.join(origins[:5]) + (', ...' if len(origins) > 5 else '')})")
    found = _search(runs, original, stats, limits, settings.underflow_fraction,
                    runs.config.options.excluded, notes, tensors)
    return replace(found, reference_finite=reference_finite)


def _first_five(bad: Mapping[str, str]) -> str:
    """``node: why`` of the first five degenerate nodes, '; ...' after them where there are more."""
    return "; ".join(f"{name}: {why}" for name, why in list(bad.items())[:5]) + ("; ..." if len(bad) > 5 else "")
