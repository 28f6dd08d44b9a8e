"""Error attribution (step 4 of :mod:`mxnet_amp.auto`): what running each node in low
precision does at the outputs, measured.

* **Local error**, one execution of the teacher-forced graph
  (:func:`mxnet_amp.passes.teacher_force`, emulated): every node computing in low precision
  recomputed on its own from the float32 reference values of its inputs, with its weights
  rounded as the conversion stores them; its output minus the float32 one is the node's
  local error, an array, nothing accumulated upstream in it.
* **Propagation**, measured on the float32 graph (:mod:`mxnet_amp.auto.propagation`): the
  change of the outputs that this very error makes, ``|J e|``, for all nodes from one
  recorded forward pass and a few backward passes. No per-op gains multiplied along paths:
  an error that a later subtraction of paired channels, a softmax's shift invariance or a
  normalisation removes is measured removed, and one that survives is measured whole.

A node's *contribution* is that norm (in units of the outputs' scale per element), scaled
so that all contributions add up in quadrature to the relative error the failed check
measured (``max|out - ref| / max|ref|``): the measurement gives their proportions, the check
their size in its units.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping

import numpy as np

from ..emulation import round_array, round_numpy
from ..ir.graph import Graph
from ..mx.io import graph_to_symbol
from ..passes.emulate import emulate_graph
from ..passes.teacher_force import ForcedGraph, teacher_force
from .propagation import propagated, push_limit, pushed
from .records import DTYPE_LIMITS, NodeError, SearchStep
from .runner import Runs

if TYPE_CHECKING:
    from ..record import Conversion

__all__ = ["attribute", "local_errors", "LocalErrors"]


@dataclass(frozen=True)
class LocalErrors:
    """What the teacher-forced run measured, per low precision node (by name).

    Attributes
    ----------
    errors : dict of str to (tuple of int, ndarray)
        The original graph's tensor ``(node, output)`` the node's output stands for (a
        producer that absorbed a folded BatchNorm outputs what the BatchNorm did), and its
        local error there (forced minus reference; 0 where the reference is not finite).
    nonfinite : set of str
        Nodes whose low precision result is inf or nan where the reference is finite (an
        error no linear measurement can carry: ranked first).
    norm : dict of str to float
        L2 norm of each node's local error (inf for the non-finite ones).
    scale : dict of str to float
        ``max|ref|`` of each node's output.
    """

    errors: dict[str, tuple[tuple[int, int], np.ndarray]]
    nonfinite: set[str]
    norm: dict[str, float]
    scale: dict[str, float]


def _ref_index(original: Graph, folded: tuple[tuple[str, str], ...]) -> dict[str, tuple[int, int]]:
    """Node name -> the key of the reference tensor that is its output 0. A producer that
    absorbed a folded BatchNorm outputs what that BatchNorm did."""
    index = {n.name: (i, 0) for i, n in enumerate(original.nodes)}
    for bn, producer in folded:
        if bn in index:
            index[producer] = index[bn]
    return index


def _held(conversion: Conversion) -> dict[tuple[str, int], str]:
    """``(node name, output)`` -> the low precision dtype the conversion holds that tensor
    in (its producer computes in it); float32 tensors are absent."""
    graph, dtypes = conversion.graph, conversion.result.tensor_dtypes
    held: dict[tuple[str, int], str] = {}
    for node in graph.nodes:
        for e in node.inputs:
            dtype = dtypes.get(e)
            if dtype in DTYPE_LIMITS and not graph.nodes[e.node].is_variable:
                held[(graph.nodes[e.node].name, e.output)] = dtype
    for bn, producer in conversion.folded_batchnorms:
        if (producer, 0) in held:   # the producer outputs what the BatchNorm did
            held[(bn, 0)] = held[(producer, 0)]
    return held


def _feeds(runs: Runs, fg: ForcedGraph, tensors: Mapping, index: dict, positions: dict,
           params: Mapping, conversion: Conversion) -> dict:
    """The arrays of the teacher-forced graph's variables: the reference tensors its forced
    copies read (rounded where the producer holds them in low precision); the params, the low precision ones rounded as the conversion's cast rounds
    them; and for the float32 twins, each tensor *as it arrives* (rounded where its
    producer holds it in low precision) and the float32 params (the model inputs come from
    ``runs``)."""
    import mxnet as mx

    feeds: dict = {}
    stored = conversion.variable_dtypes
    held = _held(conversion)
    for variable in fg.graph.variables():
        name = variable.name
        if name in fg.reference_feeds:
            i, k0 = index[fg.reference_feeds[name][0]]
            ref = np.asarray(tensors[(i, k0 + fg.reference_feeds[name][1])])
            if fg.var_dtypes.get(name) in DTYPE_LIMITS:   # as its producer holds it
                with np.errstate(invalid="ignore", over="ignore"):
                    ref = round_numpy(ref, fg.var_dtypes[name])
            feeds[name] = mx.nd.array(ref, ctx=runs.config.ctx)
        elif name in fg.perturbed_feeds:
            tensor = fg.perturbed_feeds[name]
            ref = np.asarray(tensors[(positions[tensor[0]], tensor[1])])
            if tensor in held:
                with np.errstate(invalid="ignore", over="ignore"):
                    ref = round_numpy(ref, held[tensor])
            feeds[name] = mx.nd.array(ref, ctx=runs.config.ctx)
        elif name in fg.param_aliases:
            src = fg.param_aliases[name]
            feeds[name] = runs.config.inputs.get(src, runs.config.params().get(src))
        elif name in params:
            low = stored.get(name)
            feeds[name] = round_array(params[name], low) if low in DTYPE_LIMITS else params[name]
    return feeds


def local_errors(runs: Runs, original: Graph, excluded: frozenset,
                 tensors: Mapping[tuple[int, int], np.ndarray]) -> LocalErrors:
    """Build, emulate and run the teacher-forced graph of the conversion excluding
    ``excluded`` once (one execution, a step ``attribution``); each low precision node's
    local error: its low precision result minus its float32 one, both from its inputs as
    they arrive (a tensor its producer holds in low precision is rounded: that rounding is
    the producer's error, and an op that merely passes it on, a slice of it, adds none).
    The float32 result is the node's *twin* (its float32 copy in the teacher-forced graph,
    :func:`~mxnet_amp.passes.teacher_force.teacher_force`'s perturbed copy fed so); a node
    with no twin (reading only variables) or that absorbed a folded BatchNorm (its twin
    would not include it) is judged against the float32 reference."""
    converted = runs.convert(excluded)
    args, auxs, conversion = converted.arg_params, converted.aux_params, converted.conversion
    dtypes = conversion.result.node_dtypes
    forced = [n.name for n in conversion.graph.nodes
              if not n.subgraphs and dtypes.get(n.name) in DTYPE_LIMITS]
    fg = teacher_force(conversion.graph, original, forced, conversion.result.tensor_dtypes,
                       conversion.result.inserted_casts, probes=1)
    var_dtypes = {**conversion.variable_dtypes, **runs.config.input_dtypes(), **fg.var_dtypes}
    # emulated: the rounding rules are the emulation's own, whatever runs the checks
    sym = graph_to_symbol(emulate_graph(fg.graph, {k: d for k, d in var_dtypes.items() if d}))
    index = _ref_index(original, conversion.folded_batchnorms)
    positions = {n.name: i for i, n in enumerate(original.nodes)}
    outs = runs.forward(sym, _feeds(runs, fg, tensors, index, positions, {**args, **auxs},
                                    conversion), {})
    runs.log.steps.append(SearchStep("attribution", len(excluded), None, None, None))
    folded = {producer for _, producer in conversion.folded_batchnorms}
    twins = {(name, k): out for (kind, name, k), out in zip(fg.outputs, outs)
             if kind == "perturbed" and name not in folded}
    measured = LocalErrors({}, set(), {}, {})
    for (kind, name, k), out in zip(fg.outputs, outs):
        if kind != "forced" or name not in index:
            continue   # a node of the converted graph only (a cast it inserted)
        key = (index[name][0], index[name][1] + k)
        ref = np.asarray(tensors[key])
        if out.shape != ref.shape or ref.dtype.kind != "f":
            continue
        judged = np.isfinite(ref)
        twin = twins.get((name, k), ref)
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.where(judged, out.astype(np.float64) - twin, 0.0)
        sq = measured.norm.get(name, 0.0)
        if not np.isfinite(err).all():
            measured.nonfinite.add(name)
            sq = math.inf
        else:
            measured.errors[name if k == 0 else f"{name}\0{k}"] = (key, err.astype(np.float32))
            sq += float(np.dot(err.ravel(), err.ravel()))
        measured.norm[name] = sq
        top = float(np.abs(ref[judged]).max(initial=0.0))
        measured.scale[name] = max(measured.scale.get(name, 0.0), top)
    return replace(measured, norm={n: math.sqrt(v) for n, v in measured.norm.items()})


def _to_push(measured: LocalErrors, reach: Mapping[str, float], limit: int) -> list[str]:
    """The nodes whose error :func:`~mxnet_amp.auto.propagation.pushed` carries through the
    float32 graph itself, at most ``limit``
    (:func:`~mxnet_amp.auto.propagation.push_limit`): half the largest by the linear measure
    (the picks come from there), then the largest local errors (a first order reading errs
    by terms in ``|e|^2``: the larger a node's own error, the less its linear reading
    holds; on 5000-node DAGs the culprits ~800 normalisations from the outputs read 100x too
    small and ranked past 200th, their local errors among the largest), then down the
    linear ranking again. Nodes with no error, or a non-finite one (ranked first already),
    are not pushed."""
    finite = [n for n, v in measured.norm.items() if n not in measured.nonfinite and v > 0]
    by_reach = sorted(finite, key=lambda n: (-reach.get(n, 0.0), n))
    by_size = sorted(finite, key=lambda n: (-measured.norm[n], n))
    chosen = dict.fromkeys(by_reach[:limit // 2])
    for name in by_size + by_reach:
        if len(chosen) >= limit:
            break
        chosen.setdefault(name)
    return list(chosen)


def attribute(runs: Runs, original: Graph, excluded: frozenset,
              tensors: Mapping[tuple[int, int], np.ndarray],
              measured_error: float | None = None, tolerance: float | None = None
              ) -> list[NodeError]:
    """Each low precision node's local error and its measured contribution at the outputs,
    largest contribution first (one execution: the teacher-forced run; the propagation is
    one recorded float32 pass and a few backward ones, the push a few forward ones, module
    doc).

    ``measured_error``: the outputs' relative error ``max|out - ref| / max|ref|`` measured for
    ``excluded`` (the failed check). The contributions are scaled so that they add up (in
    quadrature) to it: the measurement gives their proportions, the check their size in the
    check's units. With ``tolerance`` (the bound that error is read against) the scale is
    measured instead (:func:`_calibrated`): every error pushed through the float32 graph
    together gives the check's error, and the nodes below half the tolerance are scaled
    together to what pushing just their errors measures."""
    measured = local_errors(runs, original, excluded, tensors)
    positions = {n.name: i for i, n in enumerate(original.nodes)}
    judged = [(positions[n], k) for n, k in runs.judged] or \
        [(e.node, e.output) for e in original.heads]
    # an integer output (indices, counts) carries no gradient and is judged for equality
    judged = [key for key in judged if np.asarray(tensors[key]).dtype.kind == "f"]
    reach = propagated(runs, original, measured.errors, judged,
                       [np.asarray(tensors[key]) for key in judged]) \
        if measured.errors and judged else {}
    by_node: dict[str, float] = {}
    for key, value in reach.items():   # a node's outputs beyond the first: 'name\0k'
        name = key.split("\0")[0]
        by_node[name] = math.hypot(by_node.get(name, 0.0), value)
    points: dict[str, list] = {}
    for key, point in measured.errors.items():
        points.setdefault(key.split("\0")[0], []).append(point)
    chosen = _to_push(measured, by_node, push_limit(runs.config.inputs))
    if chosen and judged:
        # the linear reading of the nodes it may misread most, replaced by the push
        by_node.update(pushed(runs, original, {n: points[n] for n in chosen if n in points},
                              judged, [np.asarray(tensors[key]) for key in judged]))
    ops = {n.name: n.op for n in original.nodes}
    errors = []
    for name, local in measured.norm.items():
        scale = measured.scale[name]
        contribution = math.inf if name in measured.nonfinite else by_node.get(name, 0.0)
        errors.append(NodeError(name, ops.get(name, ""), local,
                                local / scale if scale else (0.0 if not local else math.inf),
                                contribution))
    finite = [e.contribution for e in errors if math.isfinite(e.contribution)]
    top = max(finite, default=0.0)
    total = top * math.sqrt(sum((c / top) ** 2 for c in finite)) if top > 0 else 0.0
    if measured_error is not None and math.isfinite(measured_error) and total > 0:
        calibrated = _calibrated(runs, original, errors, points, judged,
                                 [np.asarray(tensors[key]) for key in judged], measured_error,
                                 tolerance) if tolerance is not None and judged else None
        errors = calibrated if calibrated is not None else \
            [replace(e, contribution=e.contribution * measured_error / total) for e in errors]
    errors.sort(key=lambda e: (-e.contribution, e.name))
    return errors


def _calibrated(runs: Runs, original: Graph, errors: list[NodeError],
                points: Mapping[str, list], judged: list[tuple[int, int]],
                references: list[np.ndarray], measured_error: float, tolerance: float
                ) -> list[NodeError] | None:
    """``errors`` scaled by measurement, not by adding them up (None where the push cannot
    say: every error together changes nothing, or turns the outputs non-finite).

    Every node's error pushed through the float32 graph at once stands for the failed check:
    its change at the outputs over ``measured_error`` converts the push's units into the
    check's. The nodes that reach half the tolerance are the strong ones; the others, the
    tail, are scaled together so that they add up, in quadrature, to what pushing just their
    errors measures. Added in quadrature instead, thousands of small errors read as ~3x what
    they do together (a 5000-node DAG: 0.21 against 0.066 measured with the one culprit in
    float32), so the picks took 80 nodes where the culprit alone validates."""
    everything = [point for group in points.values() for point in group]
    together = pushed(runs, original, {"all": everything}, judged, references)["all"]
    if not math.isfinite(together) or together <= 0:
        return None
    factor = measured_error / together
    finite = [e for e in errors if math.isfinite(e.contribution)]
    strong = {e.name for e in finite if e.contribution * factor >= tolerance / 2}
    strong.add(max(finite, key=lambda e: e.contribution).name)
    rest = [point for name, group in points.items() if name not in strong for point in group]
    left = pushed(runs, original, {"rest": rest}, judged, references)["rest"] if rest else 0.0
    tail = math.sqrt(sum(e.contribution ** 2 for e in finite if e.name not in strong))
    if not math.isfinite(left) or tail <= 0:
        return [replace(e, contribution=e.contribution * factor) for e in errors]
    return [replace(e, contribution=e.contribution * (factor if e.name in strong or
                                                      not math.isfinite(e.contribution)
                                                      else factor * left / tail))
            for e in errors]
