"""Single-run error attribution (step 4 of :mod:`mxnet_amp.auto`).

One execution of the teacher-forced graph (:func:`mxnet_amp.passes.teacher_force`) gives,
for every node computing in low precision, its *local* error (its low precision output
computed from the exact float32 inputs, minus the reference) and, for every op, its error
*gain* (a finite difference: the change of its float32 output when each input tensor moves
by its own rounding error in the target dtype, over the size of that move; L2 norms:
:func:`rounding_direction`; the moves scaled past float32's own rounding, and taken over
``PROBES`` directions, the others of the rounding error's size with signs drawn from the
values: :func:`value_signs`). The contribution of a node at
the model outputs is its local error times its sensitivity (the gains after it, combined
in quadrature over the paths to the judged outputs, over their scale), scaled so that all
contributions add up in quadrature to the relative error the failed check measured: an
estimate, in the units of the default check (``max|out - ref| / max|ref|``), of how much
of the outputs' error the node causes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping

import numpy as np

from ..emulation import round_array, round_numpy
from ..graph import Graph
from ..io import graph_to_symbol
from ..passes.emulate import emulate_graph
from ..passes.teacher_force import ForcedGraph, teacher_force
from .records import DTYPE_LIMITS, NodeError, SearchStep
from .runner import Runs

if TYPE_CHECKING:
    from ..record import Conversion

# the relative size of the random-sign perturbation of a tensor that rounds exactly (nothing
# to follow): a few float16 roundings, far above float32's own noise (2**-24) and small
# enough to stay linear
PERTURBATION = 2.0 ** -10
_SEED = 0
_MAX_GAIN = 1e6
# the gains' finite differences move each tensor along its rounding error scaled to about
# this relative size (float16 x32, bfloat16 x4): at one rounding (2**-12 of a value) the
# float32 rounding of the perturbed copy itself drowned the move wherever an op adds a
# large term (``Q h + 2048``: float32's spacing at 2048 is 2.4e-4, the move of ``Q h``
# ~6e-5), and read gains of 1.2-1.7 for 0.7-1; compounded over a 5000-node chain, the
# culprits' estimates spread 25x and the picks stopped short. Small enough to stay linear.
_STEP = 2.0 ** -6
_UNIT_ROUNDOFF = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
# each op's gain is measured along this many perturbations of its inputs at once and
# taken over all of them: the rounding error itself, and PROBES - 1 moves of its size with
# signs drawn from the values (:func:`value_signs`). One direction, the rounding error
# alone, is as large as the values where it falls: an orthogonal half-map of a (4, 16)
# tensor read gains of 0.56-0.83 for 0.71 as its half held more or less of the large
# values; over the ~450 blocks of a 5000-node DAG the product of those drifted 100x, and a
# culprit early in it read 0.006 beside another's 0.7.
PROBES = 4


@dataclass(frozen=True)
class _Measured:
    local: dict[str, float]          # node -> max |forced - ref| over its outputs
    local_scale: dict[str, float]    # node -> max |ref| over its outputs
    gain: dict[str, float]           # node -> max |perturbed - ref| / max |perturbation|
    index: dict[str, tuple[int, int]]  # node -> its reference tensor's key (_ref_index)


def _ref_index(original: Graph, folded: tuple[tuple[str, str], ...]) -> dict[str, tuple[int, int]]:
    """Node name -> the key of the reference tensor that is its output 0. A producer that
    absorbed a folded BatchNorm outputs what that BatchNorm did."""
    index = {n.name: (i, 0) for i, n in enumerate(original.nodes)}
    for bn, producer in folded:
        if bn in index:
            index[producer] = index[bn]
    return index


def _tensor(tensors: Mapping, index: dict, name: str, k: int) -> np.ndarray:
    i, k0 = index[name]
    return np.asarray(tensors[(i, k0 + k)])


def _feeds(runs: Runs, fg: ForcedGraph, tensors: Mapping, index: dict, positions: dict,
           params: Mapping, conversion: Conversion, original: Graph
           ) -> tuple[dict, dict[str, float]]:
    """The arrays of every variable of the attribution graph, and the size of each
    perturbation (max |delta|) by feed name. The forced copies are nodes of the converted
    graph (a producer that absorbed a BatchNorm outputs what the BatchNorm did: ``index``);
    the perturbed ones are nodes of the original graph and read its own tensors
    (``positions``: a convolution's raw output, not the BatchNorm's after it; fed that,
    every folded BatchNorm normalised an already normalised tensor and measured a gain
    ~1000x too large)."""
    import mxnet as mx

    feeds: dict = {}
    stored = conversion.variable_dtypes
    for variable in fg.graph.variables():
        name = variable.name
        if name in fg.reference_feeds:
            feeds[name] = mx.nd.array(_tensor(tensors, index, *fg.reference_feeds[name]), ctx=runs.ctx)
        elif name in fg.param_aliases:
            src = fg.param_aliases[name]
            feeds[name] = runs.inputs.get(src, {**runs.arg_params, **runs.aux_params}.get(src))
        elif name in params:
            low = stored.get(name)
            # the stored low precision weight, rounded as the conversion's cast rounds it
            feeds[name] = round_array(params[name], low) if low in DTYPE_LIMITS else params[name]
    sizes: dict[str, float] = {}
    rng = np.random.RandomState(_SEED)
    step = np.float32(max(1.0, _STEP / _UNIT_ROUNDOFF[runs.target_dtype]))
    still, exact = _held_still(original, fg, tensors, positions, runs.target_dtype)
    for name, tensor in fg.perturbed_feeds.items():
        ref = _tensor(tensors, positions, *tensor)
        probe = fg.perturbed_probes[name]
        if tensor in still:
            delta = np.zeros_like(ref)
        else:
            delta = rounding_direction(ref, runs.target_dtype, rng)
            if tensor not in exact and probe:
                delta = value_signs(ref, probe, delta)
            delta = delta * step
        sizes[name] = float(np.dot(delta.ravel().astype(np.float64), delta.ravel()))
        feeds[name] = mx.nd.array(ref + delta, ctx=runs.ctx)
    return feeds, sizes


def _held_still(original: Graph, fg: ForcedGraph, tensors: Mapping, positions: dict,
                dtype: str) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
    """The perturbed tensors left unmoved: those that round exactly (no error of their own
    to follow) where every op reading them also reads a tensor that does not (its gain is
    measured along that one). A random-sign move there measured a direction no rounding
    takes: ``FC([h, 2048], [Q, 1])`` (a folded BatchNorm's constant beside the signal) read a
    gain of 4 along the constant's move of ~2 instead of 1 along ``h``'s rounding, and
    every node upstream of such a block had its estimate multiplied by 4 (a 5000-node
    chain with 3 of them ranked its culprits 25x apart, the picks stopped short). Returns
    ``(held still, exact)``."""
    fed = set(fg.perturbed_feeds.values())
    exact = {t for t in fed if not _rounds(_tensor(tensors, positions, *t), dtype)}
    still = set(exact)
    for node in original.nodes:
        read = {(original.nodes[e.node].name, e.output) for e in node.inputs} & fed
        if read & exact and not read - exact:
            still -= read   # nothing else to follow into this op: its exact inputs move
    return still, exact


def _rounds(ref: np.ndarray, dtype: str) -> bool:
    """Whether rounding ``ref`` to ``dtype`` changes any finite element."""
    from ..emulation import round_numpy
    finite = np.isfinite(ref)
    with np.errstate(invalid="ignore", over="ignore"):
        delta = np.where(finite, round_numpy(np.where(finite, ref, 0.0), dtype) - ref, 0.0)
    return bool(np.any(np.isfinite(delta) & (delta != 0)))


def rounding_direction(ref: np.ndarray, dtype: str, rng: np.random.RandomState) -> np.ndarray:
    """The perturbation of a reference tensor for the gains: its own rounding error in
    ``dtype`` (``round(ref) - ref``), the error low precision really puts there. Random
    signs overstated the gain of an op that cancels structured inputs (``a - b`` of paired
    channels, a weight ``[S, -S]`` on ``[x; x]``): rounding changes equal values equally, so
    it never breaks that structure and the cancellation removes it; random signs do break
    it, and a harmless node upstream read as a culprit. Where the tensor rounds exactly
    (zeros, small integers: nothing to follow), a random-sign move of relative size
    ``PERTURBATION``; where its rounding is not finite (beyond the dtype's range: a range
    culprit, excluded before), nothing."""
    finite = np.isfinite(ref)
    with np.errstate(invalid="ignore", over="ignore"):
        delta = np.where(finite, round_numpy(np.where(finite, ref, 0.0), dtype) - ref, 0.0)
    delta = np.where(np.isfinite(delta), delta, 0.0).astype(np.float32)
    if np.any(delta):
        return delta
    mag = np.abs(np.where(finite, ref, 0.0))
    floor = 1e-3 * float(mag.max(initial=0.0)) + 1e-30
    delta = (PERTURBATION * (mag + floor)).astype(np.float32)
    signs: np.ndarray = rng.choice(np.array([-1.0, 1.0], dtype=np.float32), size=ref.shape)
    return np.asarray(delta * signs, dtype=np.float32)


def value_signs(ref: np.ndarray, probe: int, rounding: np.ndarray) -> np.ndarray:
    """A move of ``ref`` as large as its rounding error ``rounding`` (the root mean square of
    its nonzero elements) on every element that does not round exactly, with a sign drawn
    from the element's value (its float32 bits, hashed with ``probe``): equal values move
    equally, so a later ``a - b`` of paired channels still cancels it (as it cancels their
    rounding), while the move's size no longer follows where the large values are."""
    moved = rounding != 0
    if not moved.any():
        return rounding
    size = np.sqrt(np.mean(np.square(rounding[moved], dtype=np.float64)))
    bits = np.ascontiguousarray(ref, dtype=np.float32).view(np.uint32).astype(np.uint64)
    mixed = ((bits + np.uint64(probe) * np.uint64(0x9E3779B9)) * np.uint64(0x85EBCA6B)) \
        & np.uint64(0xFFFFFFFF)
    signs = np.where((mixed >> np.uint64(15)) & np.uint64(1), 1.0, -1.0)
    return np.where(moved, signs * size, 0.0).astype(np.float32)


def _sq_diff(a: np.ndarray, b: np.ndarray) -> float:
    """``sum((a - b)**2)`` over the elements where the reference ``b`` is finite (where
    float32 itself is inf or nan, low precision changes nothing that could be blamed on
    it); inf where ``a`` is not finite there."""
    if a.shape != b.shape:
        return math.inf
    judged = np.isfinite(b)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.where(judged, a.astype(np.float64) - b, 0.0)
    if not np.isfinite(d).all():
        return math.inf
    return float(np.dot(d.ravel(), d.ravel()))


def _measure(runs: Runs, original: Graph, excluded: frozenset, tensors: Mapping) -> _Measured:
    """Build, emulate and run the attribution graph once; local errors and gains."""
    _, args, auxs, conversion = runs.convert(excluded)
    dtypes = conversion.result.node_dtypes
    forced = [n.name for n in conversion.graph.nodes
              if not n.subgraphs and dtypes.get(n.name) in DTYPE_LIMITS]
    fg = teacher_force(conversion.graph, original, forced, conversion.result.tensor_dtypes,
                       conversion.result.inserted_casts, PROBES)
    var_dtypes = {**conversion.variable_dtypes, **runs.input_dtypes(),
                  **fg.var_dtypes}
    # emulated: the rounding rules are the emulation's own, whatever runs the checks
    sym = graph_to_symbol(emulate_graph(fg.graph, {k: d for k, d in var_dtypes.items() if d}))
    index = _ref_index(original, conversion.folded_batchnorms)
    positions = {n.name: i for i, n in enumerate(original.nodes)}
    feeds, sizes = _feeds(runs, fg, tensors, index, {n: (i, 0) for n, i in positions.items()},
                          {**args, **auxs}, conversion, original)
    outs = runs.forward(sym, feeds, {})
    runs.steps.append(SearchStep("attribution", len(excluded), None, None, None))
    del feeds
    local: dict[str, float] = {}     # squared norms first
    scale: dict[str, float] = {}
    change: dict[str, float] = {}    # summed over the probes
    for (kind, name, k), out in zip(fg.outputs, outs):
        if kind == "forced":
            ref = _tensor(tensors, index, name, k)
            local[name] = local.get(name, 0.0) + _sq_diff(out, ref)
            scale[name] = max(scale.get(name, 0.0), float(np.abs(ref).max(initial=0.0)))
        else:
            ref = tensors[(positions[name], k)]
            change[name] = change.get(name, 0.0) + _sq_diff(out, ref)
    size = _perturbed_sizes(original, fg, sizes)
    # the gain over all probes: their changes over their moves (a ratio of sums, steadier
    # than a mean of ratios). One beyond _MAX_GAIN (inf or nan where a perturbed copy
    # overflowed) is no linear estimate: capped, so one such op cannot turn every
    # contribution into inf or nan
    gain = {n: (min(math.sqrt(c / size[n]), _MAX_GAIN) if size.get(n) and not math.isnan(c)
                else 0.0) for n, c in change.items()}
    return _Measured({n: math.sqrt(v) for n, v in local.items()}, scale, gain, index)


def _perturbed_sizes(original: Graph, fg: ForcedGraph, sizes: dict[str, float]) -> dict[str, float]:
    """Node -> the squared norm of the perturbation of all its inputs together: each input
    tensor once, however many times the node reads it (``Concat(h, h)`` moves when ``h``
    does, by one perturbation of ``h``; counted twice, its gain read 1 instead of sqrt(2),
    and a chain of 370 such blocks hid a culprit behind a factor ~4000)."""
    by_tensor: dict[tuple[str, int], float] = {}   # summed over the probes
    for name, tensor in fg.perturbed_feeds.items():
        by_tensor[tensor] = by_tensor.get(tensor, 0.0) + sizes[name]
    out: dict[str, float] = {}
    for node in original.nodes:
        read = {(original.nodes[e.node].name, e.output) for e in node.inputs}
        for key in read & by_tensor.keys():
            out[node.name] = out.get(node.name, 0.0) + by_tensor[key]
    return out


def _sensitivity(original: Graph, gain: Mapping[str, float], tensors: Mapping,
                 judged: list[tuple[int, int]]) -> list[float]:
    """For each node, how much an error of norm 1 on its output grows into the outputs'
    error per element over their scale: at an output ``1 / (max|ref| sqrt(size))``; through
    a consumer times its gain; summed in quadrature over consumers (errors reaching an
    output along different paths add like independent ones). Iterative, in reverse graph
    order (no recursion on deep graphs)."""
    floor = DTYPE_LIMITS["float16"].min_normal
    at_head: dict[int, float] = {}
    for key in judged:
        ref = tensors[key]
        finite = np.abs(ref[np.isfinite(ref)])   # inf/nan in the float32 run: not a scale
        scale = max(float(finite.max(initial=0.0)), floor) * math.sqrt(max(finite.size, 1))
        at_head[key[0]] = at_head.get(key[0], 0.0) + scale ** -2
    users = original.consumers()
    sq = [0.0] * len(original.nodes)
    for j in range(len(original.nodes) - 1, -1, -1):
        s = at_head.get(j, 0.0)
        for c in {c for c, _ in users[j]}:
            s += gain.get(original.nodes[c].name, 0.0) ** 2 * sq[c]
        sq[j] = min(s, 1e300) if not math.isnan(s) else 0.0
    return [math.sqrt(v) for v in sq]


def attribute(runs: Runs, original: Graph, excluded: frozenset,
              tensors: Mapping[tuple[int, int], np.ndarray],
              measured_error: float | None = None) -> list[NodeError]:
    """Each low precision node's local error and estimated contribution at the outputs,
    largest contribution first (one execution).

    ``measured_error``: the outputs' relative error ``max|out - ref| / max|ref|`` measured for
    ``excluded`` (the failed check). The contributions are scaled so that they add up (in
    quadrature) to it: the propagation model gives their proportions, the measurement their
    size in the check's units."""
    measured = _measure(runs, original, excluded, tensors)
    positions = {n.name: i for i, n in enumerate(original.nodes)}
    judged = [(positions[n], k) for n, k in runs.judged] or \
        [(e.node, e.output) for e in original.heads]
    sens = _sensitivity(original, measured.gain, tensors, judged)
    ops = {n.name: n.op for n in original.nodes}
    errors = []
    for name, local in measured.local.items():
        scale = measured.local_scale[name]
        if name not in measured.index:
            continue
        s = sens[measured.index[name][0]]
        contribution = min(local * s, math.inf) if local and s else 0.0
        errors.append(NodeError(name, ops.get(name, ""), local,
                                local / scale if scale else (0.0 if not local else math.inf),
                                contribution))
    finite = [e.contribution for e in errors if math.isfinite(e.contribution)]
    top = max(finite, default=0.0)
    total = top * math.sqrt(sum((c / top) ** 2 for c in finite)) if top > 0 else 0.0
    if measured_error is not None and math.isfinite(measured_error) and total > 0:
        factor = measured_error / total
        errors = [replace(e, contribution=e.contribution * factor) for e in errors]
    errors.sort(key=lambda e: (-e.contribution, e.name))
    return errors
