"""Validation-driven automatic mixed precision: convert, measure, keep in float32 what breaks.

:func:`auto_convert_model` converts a model with the shipped op lists and then checks the
result on sample inputs against the float32 model, keeping in float32 the nodes whose low
precision breaks it. The work is driven by one instrumented float32 run:

1. **Reference run** (one model execution). The float32 graph is bound once with every op
   output as a graph output, which gives the reference outputs and, for each tensor, the
   largest magnitude and the share of nonzero values the target dtype would flush to zero.
2. **Range culprits** (no execution). A tensor whose float32 values exceed the target
   dtype's range (65504 for float16) becomes inf wherever the converted graph holds it in
   low precision; one whose values mostly flush to zero loses them. For every such tensor
   the nodes *holding* it in low precision are kept in float32: its producer when it
   computes in low precision, and each consumer that reads it through a cast to low
   precision (a target op). Converting is cheap, so this repeats on the converted graph
   until no flagged tensor is held in low precision anywhere.
3. **Converted check** (one execution). The converted model runs on the same inputs (natively
   where this machine can, else through :mod:`mxnet_amp.emulation`) and is compared with the
   reference: by default each output's error relative to its scale,
   ``max|out - ref| / max|ref| <= tolerance``, and the same top-1 class on every row of a
   classifier-shaped output (:func:`check_outputs`); or ``allclose`` with ``rtol``/``atol``,
   or the caller's ``validate``. A model that converts cleanly is done here: two executions.
4. **Accuracy search**, only when the ranges do not explain a failed check. Over the
   candidate low precision nodes (ordered by how much of their output falls in the
   dtype's subnormal range, then topologically) a binary search finds the shortest prefix
   whose exclusion validates; its last node is a culprit. Repeating on the prefix before
   it finds each of ``k`` culprits in ``ceil(log2 N) + 1`` executions: ``O(k log N)``.
   The search never returns a configuration it has not seen validate.

Every model execution is counted in the report (:class:`AutoReport`).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Mapping, Sequence

import numpy as np

from .convert import Conversion, convert_model_full
from .dtypes import LOW_PRECISION
from .errors import GraphError, ParamError
from .graph import CAST_OPS, Entry, Graph
from .io import graph_from_symbol, graph_to_symbol
from .params import check_param_shapes, param_dict, recast_params
from .policy import Category, check_target_dtype

__all__ = ["auto_convert_model", "auto_convert_block", "AutoReport", "KeptNode", "SearchStep",
           "TensorRange", "OutputCheck", "DTYPE_LIMITS", "check_outputs",
           "default_scale_tolerance", "default_tolerances"]


@dataclass(frozen=True)
class DtypeLimits:
    """The range of a low precision dtype as rounding from float32 sees it."""

    max: float          # largest finite value; beyond it values overflow to inf
    zero_below: float   # |x| below it rounds to zero
    min_normal: float   # below it (and from zero_below) values are subnormal: fewer digits


DTYPE_LIMITS = {
    # 2**-25 itself ties to even, i.e. to zero: the first value kept is the next float32
    "float16": DtypeLimits(65504.0, float(np.nextafter(np.float32(2.0 ** -25), np.float32(1))),
                           2.0 ** -14),
    # MXNet's cast (as AVX512-BF16's) flushes what would be bfloat16 subnormals to zero
    "bfloat16": DtypeLimits((2 - 2 ** -7) * 2.0 ** 127, 2.0 ** -126, 2.0 ** -126),
}

# The default check's bound on max|out - ref| / max|ref| per output. float16 keeps ~3.3
# significant digits (rounding error 4.9e-4 of a value), bfloat16 ~2.4 (3.9e-3): the bounds
# leave ~20x and ~13x that for the error to grow through the layers. Measured on the trained
# models of tests/trained_models.py (predictions unchanged; docs/trained_accuracy.md):
# float16 0.0004-0.0007, bfloat16 0.003-0.007.
_SCALE_TOLERANCES = {"float16": 1e-2, "bfloat16": 5e-2}
# allclose tolerances, used when the caller gives rtol or atol
_TOLERANCES = {"float16": (1e-2, 1e-3), "bfloat16": (5e-2, 1e-2)}


def default_scale_tolerance(target_dtype: str) -> float:
    """The bound on ``max|out - ref| / max|ref|`` of the default check (``tolerance``)."""
    return _SCALE_TOLERANCES[check_target_dtype(target_dtype)]


def default_tolerances(target_dtype: str) -> tuple[float, float]:
    """``(rtol, atol)`` of the allclose check, for the one of the two the caller leaves out."""
    return _TOLERANCES[check_target_dtype(target_dtype)]


@dataclass(frozen=True)
class TensorRange:
    """What one float32 tensor holds, seen from a low precision dtype."""

    max_abs: float      # largest |value| (inf/nan when the float32 run had them)
    flushed: float      # fraction of its nonzero values the dtype rounds to zero
    subnormal: float    # fraction of its nonzero values that become subnormal


@dataclass(frozen=True)
class KeptNode:
    """A node the auto mode kept in float32, and why.

    ``reason`` is ``'overflow'`` (``value``: the largest |value| of ``tensor`` in the float32
    run), ``'underflow'`` (``value``: the fraction of its nonzero values flushed to zero),
    ``'accuracy'`` (``value``: how much excluding it lowered the error, in units of the
    tolerance: see :attr:`AutoReport.tolerance_ratio`), ``'budget'`` (a candidate the accuracy
    search had not cleared when ``max_executions`` ran out; ``value`` None) or ``'user'``
    (named in excluded_sym_names).
    """

    name: str
    op: str
    reason: str
    value: float | None = None
    tensor: str | None = None   # the offending tensor (a node output) for range reasons

    def to_dict(self) -> dict:
        """A JSON-ready dict of the fields."""
        return asdict(self)


@dataclass(frozen=True)
class SearchStep:
    """One model execution of the auto mode."""

    kind: str                  # 'reference', 'check', 'all-fp32', 'bisect'
    excluded: int              # nodes kept in float32 in the executed configuration
    passed: bool | None        # None for the reference run
    tolerance_ratio: float | None
    max_abs_error: float | None
    relative_error: float | None = None   # max|out - ref| / max|ref| (OutputCheck)
    top1_flips: int | None = None

    def to_dict(self) -> dict:
        """A JSON-ready dict of the fields."""
        return asdict(self)


@dataclass(frozen=True)
class AutoReport:
    """What :func:`auto_convert_model` decided and measured.

    Attributes
    ----------
    target_dtype : str
    execution : {'native', 'emulated'}
        How the converted model ran for the checks: on the hardware in ``target_dtype``, or
        through :mod:`mxnet_amp.emulation` in float32 with low precision rounding.
    context : str
        The MXNet context the model ran on.
    kept_fp32 : tuple of KeptNode
        Every node excluded from low precision (what ``excluded_sym_names`` gets), in graph
        order, with its reason. Nodes that *follow* an excluded node's float32 output (relu
        after a float32 FullyConnected, say) compute in float32 too without being listed.
    executions : int
        Model executions (forward passes over the sample inputs), the reference included.
    validated : bool
        Whether the returned configuration passed the check.
    tolerance_ratio : float
        For the returned configuration, the error in units of the tolerance (``<= 1``
        passes the error bound; inf where an output is non-finite and the reference is
        not): ``max|out - ref| / max|ref|`` over ``tolerance`` for the ``'scale'`` criterion,
        ``max |out - ref| / (atol + rtol * |ref|)`` for ``'allclose'``.
    max_abs_error : float
        ``max |out - ref|`` over all outputs (finite values only).
    rtol, atol : float or None
        The allclose tolerances, when the check is ``'allclose'``; else None.
    op_nodes : int
        Op nodes in the float32 graph.
    low_precision_nodes : int
        Op nodes computing in ``target_dtype`` in the returned model.
    criterion : {'scale', 'allclose', 'validate'}
        What decided ``validated`` (:class:`OutputCheck`; ``'validate'``: the caller's function).
    tolerance : float or None
        The bound on ``max|out - ref| / max|ref|`` of the ``'scale'`` criterion.
    relative_error : float
        ``max|out - ref| / max|ref|`` of the returned model, the largest over the outputs
        (measured whatever the criterion).
    top1_flips, top1_rows : int
        Rows of ``(batch, classes)`` outputs whose top-1 class the returned model changed
        (near-ties aside, see :func:`check_outputs`), out of ``top1_rows``.
    steps : tuple of SearchStep
        One entry per execution, in order.
    notes : tuple of str
        Anything the caller should know (emulation used, search budget ran out...).
    reference_finite : bool
        False when the float32 reference outputs hold inf or nan on the sample inputs: the
        check then compared only the finite part, or nothing.
    """

    target_dtype: str
    execution: str
    context: str
    kept_fp32: tuple[KeptNode, ...]
    executions: int
    validated: bool
    tolerance_ratio: float
    max_abs_error: float
    rtol: float | None
    atol: float | None
    op_nodes: int
    low_precision_nodes: int
    criterion: str = "scale"
    tolerance: float | None = None
    relative_error: float = math.nan
    top1_flips: int = 0
    top1_rows: int = 0
    steps: tuple[SearchStep, ...] = ()
    notes: tuple[str, ...] = ()
    reference_finite: bool = True
    # the Conversion record of the returned model (what the pass decided, node by node)
    conversion: Conversion | None = field(default=None, repr=False, compare=False)

    @property
    def excluded_sym_names(self) -> list[str]:
        """Names of every node kept in float32 (pass them to ``convert_model``)."""
        return [k.name for k in self.kept_fp32]

    def by_reason(self, reason: str) -> list[KeptNode]:
        """The kept nodes with ``reason``."""
        return [k for k in self.kept_fp32 if k.reason == reason]

    def to_dict(self) -> dict:
        """A JSON-ready dict (plain types only), nested records included."""
        d = asdict(replace(self, conversion=None))
        del d["conversion"]
        d["kept_fp32"] = [k.to_dict() for k in self.kept_fp32]
        d["steps"] = [s.to_dict() for s in self.steps]
        d["notes"] = list(self.notes)
        return d

    def criterion_text(self) -> str:
        """The check and how the returned model measured against it, in words."""
        flips = (f", top-1 changed on {self.top1_flips} of {self.top1_rows} rows"
                 if self.top1_rows else "")
        scale = f"max|out-ref|/max|ref| {self.relative_error:.3g}"
        if self.criterion == "scale":
            return f"{scale} (tolerance {self.tolerance:g}){flips}"
        if self.criterion == "allclose":
            return (f"allclose(rtol={self.rtol:g}, atol={self.atol:g}): error "
                    f"{self.max_abs_error:.3g}, {self.tolerance_ratio:.3g} x tolerance; {scale}{flips}")
        return f"validate(); {scale}{flips}"

    def summary(self) -> str:
        """A few human readable lines."""
        lines = [f"auto {self.target_dtype} ({self.execution}, {self.context}): "
                 f"{self.low_precision_nodes}/{self.op_nodes} op nodes in {self.target_dtype}, "
                 f"{len(self.kept_fp32)} kept in float32, {self.executions} executions, "
                 f"{'validated' if self.validated else 'NOT validated'} "
                 f"({self.criterion_text()})"]
        for k in self.kept_fp32:
            val = "" if k.value is None else f" {k.value:.4g}"
            on = f" on {k.tensor}" if k.tensor and k.tensor != k.name else ""
            lines.append(f"  {k.name} ({k.op}): {k.reason}{val}{on}")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# measuring

def tensor_range(x: np.ndarray, limits: DtypeLimits, chunk: int = 1 << 20) -> TensorRange:
    """The :class:`TensorRange` of array ``x`` (numpy or NDArray) against ``limits``.

    Worked through ``chunk`` values at a time: the temporaries stay small however large
    ``x`` is (a weight of a large model, say); an NDArray is copied out a chunk at a time."""
    max_abs, nonzero, flushed, subnormal = 0.0, 0, 0, 0
    for part in _float32_chunks(x, chunk):
        part = np.abs(part)
        max_abs = max(max_abs, float(np.max(part)), key=lambda v: (math.isnan(v), v))  # nan wins
        part = part[part > 0]
        nonzero += part.size
        flushed += int(np.count_nonzero(part < limits.zero_below))
        subnormal += int(np.count_nonzero((part >= limits.zero_below) & (part < limits.min_normal)))
    if nonzero == 0:
        return TensorRange(max_abs, 0.0, 0.0)
    return TensorRange(max_abs, flushed / nonzero, subnormal / nonzero)


def _float32_chunks(x, chunk: int):
    """``x`` (numpy array or NDArray) flattened, as float32 numpy pieces of ``chunk`` values;
    an NDArray is never copied out whole (``asnumpy`` of a large weight is a transient copy
    of it beside the model: 0.1x the params of a 10-layer model, measured in auto mode)."""
    if isinstance(x, np.ndarray) or not hasattr(x, "asnumpy"):
        flat = np.asarray(x, dtype=np.float32).ravel()
        for start in range(0, flat.size, chunk):
            yield flat[start:start + chunk]
        return
    flat = x.reshape((-1,))   # a view: first-axis slices of it are views too
    for start in range(0, flat.size, chunk):
        yield flat[start:start + chunk].asnumpy().astype(np.float32, copy=False)


@dataclass(frozen=True)
class OutputCheck:
    """Converted outputs against the float32 reference (:func:`check_outputs`).

    ``passed`` is the criterion's verdict: ``'scale'`` (the default) passes when every
    output's ``max|out - ref| / max|ref|`` is at most ``tolerance`` and no classifier-shaped
    output changes a top-1 prediction; ``'allclose'`` when ``|out - ref| <= atol + rtol |ref|``
    everywhere. Outputs non-finite where the reference is finite fail both.
    """

    criterion: str          # 'scale' or 'allclose'
    passed: bool
    tolerance_ratio: float  # the error in units of the tolerance (<= 1 passes)
    max_abs_error: float    # max finite |out - ref| over all outputs
    relative_error: float   # max over outputs of max|out - ref| / max|ref|
    top1_flips: int         # rows of (batch, classes) outputs whose argmax changed, ties aside
    top1_rows: int          # rows of (batch, classes) outputs checked

    def to_dict(self) -> dict:
        """A JSON-ready dict of the fields."""
        return asdict(self)


def _top1_flips(r: np.ndarray, o: np.ndarray, tie: float) -> tuple[int, int]:
    """``(flipped rows, rows)`` of a ``(batch, classes)`` output; rows whose float32 top-2
    margin is at most ``tie`` are near-ties the error bound already allows to swap."""
    rows = np.isfinite(r).all(axis=1)
    r, o = r[rows], o[rows]
    if not r.size:
        return 0, 0
    top2 = np.sort(r, axis=1)[:, -2:]
    decided = (top2[:, 1] - top2[:, 0]) > tie
    with np.errstate(invalid="ignore"):
        changed = (np.argmax(np.nan_to_num(o, nan=-np.inf), axis=1) != np.argmax(r, axis=1)) \
            | ~np.isfinite(o).all(axis=1)
    return int(np.count_nonzero(changed & decided)), int(r.shape[0])


def check_outputs(reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray],
                  target_dtype: str = "float16", tolerance: float | None = None,
                  rtol: float | None = None, atol: float | None = None) -> OutputCheck:
    """Judge converted ``outputs`` against the float32 ``reference`` (lists of arrays).

    Without ``rtol``/``atol`` the criterion is ``'scale'``: each output's error relative to
    its own scale, ``max|out - ref| / max|ref|`` (``max|ref|`` floored at the dtype's smallest
    normal value), must be at most ``tolerance`` (default :func:`default_scale_tolerance`),
    and every 2-D ``(batch, classes)`` output must keep each row's top-1 class, except rows
    whose float32 top-2 margin is within ``tolerance * max|ref|`` (near-ties). With ``rtol``
    or ``atol`` (the other from :func:`default_tolerances`) it is elementwise ``'allclose'``.
    """
    target_dtype = check_target_dtype(target_dtype)
    allclose = rtol is not None or atol is not None
    d_rtol, d_atol = default_tolerances(target_dtype)
    rtol = d_rtol if rtol is None else float(rtol)
    atol = d_atol if atol is None else float(atol)
    tol = default_scale_tolerance(target_dtype) if tolerance is None else float(tolerance)
    floor = DTYPE_LIMITS[target_dtype].min_normal
    close_ratio = scale_ratio = rel_max = max_abs = 0.0
    flips = rows = 0
    for r, o in zip(reference, outputs):
        r = np.asarray(r, dtype=np.float64)
        o = np.asarray(o, dtype=np.float64)
        if r.shape != o.shape:
            return OutputCheck("allclose" if allclose else "scale", False, math.inf, math.inf,
                               math.inf, flips, rows)
        same = (r == o) | (np.isnan(r) & np.isnan(o))   # inf == inf counts as agreement
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where(same, 0.0, np.abs(o - r))
        diff = np.where(np.isnan(diff), np.inf, diff)
        if not diff.size:
            continue
        finite = diff[np.isfinite(diff)]
        if finite.size:
            max_abs = max(max_abs, float(finite.max()))
        ref_abs = np.abs(np.nan_to_num(r, nan=0.0, posinf=0.0, neginf=0.0))
        scale = max(float(ref_abs.max()), floor)
        rel = float(diff.max()) / scale
        rel_max = max(rel_max, rel)
        scale_ratio = max(scale_ratio, rel / tol)
        with np.errstate(invalid="ignore"):
            close_ratio = max(close_ratio, float(np.max(diff / (atol + rtol * ref_abs))))
        if r.ndim == 2 and r.shape[1] > 1:
            f, n = _top1_flips(r, o, tol * scale)
            flips, rows = flips + f, rows + n
    if allclose:
        return OutputCheck("allclose", close_ratio <= 1.0, close_ratio, max_abs, rel_max,
                           flips, rows)
    return OutputCheck("scale", scale_ratio <= 1.0 and flips == 0, scale_ratio, max_abs,
                       rel_max, flips, rows)


# ---------------------------------------------------------------------------------------
# the graph side

def _tensor_name(graph: Graph, key: tuple[int, int]) -> str:
    node = graph.nodes[key[0]]
    return node.name if key[1] == 0 else f"{node.name}[{key[1]}]"


def _instrumented(graph: Graph) -> tuple[Graph, list[tuple[int, int]]]:
    """``graph`` with every used op output (and every head) as an output, and their keys."""
    used = graph.num_used_outputs()
    keys: list[tuple[int, int]] = []
    for i, node in enumerate(graph.nodes):
        if not node.is_variable:
            keys.extend((i, k) for k in range(used[i]))
    seen = set(keys)
    keys.extend((e.node, e.index) for e in graph.heads if (e.node, e.index) not in seen)
    heads = tuple(Entry(i, k) for i, k in keys)
    return Graph(graph.nodes, heads, graph.attrs), keys


def _descendants(graph: Graph, starts: set[int]) -> set[int]:
    users = graph.consumers()
    seen, stack = set(starts), list(starts)
    while stack:
        for j, _ in users[stack.pop()]:
            if j not in seen:
                seen.add(j)
                stack.append(j)
    return seen


def _low_holders(original: Graph, converted: Graph,
                 dtypes: list[tuple[str | None, ...]],
                 categories: Mapping[str, Category]) -> dict[tuple[str, int], set[str]]:
    """For each original tensor ``(node name, output)``, the original op nodes that would hold
    it in low precision even if its producer computed in float32: the producer itself when
    it computes in low precision, and every consumer that casts it to low precision (a
    target op, reading it through a cast or already in low precision)."""
    names = {n.name for n in original.nodes}
    holders: dict[tuple[str, int], set[str]] = {}

    def source(e: Entry):
        node = converted.nodes[e.node]
        if node.op in CAST_OPS and node.name not in names:
            src = node.inputs[0] if node.op == "amp_cast" else node.inputs[e.index]
            return (converted.nodes[src.node].name, src.index), dtypes[e.node][e.index], True
        return (node.name, e.index), dtypes[e.node][e.index], False

    for j, node in enumerate(converted.nodes):
        if node.is_variable or node.name not in names:
            continue
        for k, d in enumerate(dtypes[j]):
            if d in LOW_PRECISION:
                holders.setdefault((node.name, k), set()).add(node.name)
        for e in node.inputs:
            key, d, via_cast = source(e)
            if d in LOW_PRECISION and (via_cast or categories.get(node.name) is Category.TARGET):
                holders.setdefault(key, set()).add(node.name)
    return holders


# ---------------------------------------------------------------------------------------
# running

class _Runs:
    """Executes configurations, counts executions, caches check results per exclusion set."""

    def __init__(self, *, sym, arg_params, aux_params, inputs, ctx, target_dtype, execution,
                 convert_kwargs, tolerance, rtol, atol, validate, max_executions, progress):
        self.sym, self.arg_params, self.aux_params = sym, arg_params, aux_params
        self.inputs, self.ctx = inputs, ctx
        self.target_dtype, self.execution = target_dtype, execution
        self.convert_kwargs = convert_kwargs
        self.tolerance, self.rtol, self.atol, self.validate = tolerance, rtol, atol, validate
        self.max_executions = max_executions
        self.progress = progress
        self.executions = 0
        self.steps: list[SearchStep] = []
        self.results: dict[frozenset, OutputCheck] = {}
        self.conversions: dict[frozenset, tuple] = {}
        self.reference: list[np.ndarray] | None = None

    @property
    def budget_left(self) -> bool:
        return self.max_executions is None or self.executions < self.max_executions

    def convert(self, excluded: frozenset):
        """The conversion keeping ``excluded`` in float32. Emulated checks get its params
        uncast (float32, rounded in the graph: no low precision copy beside the caller's
        originals while a check runs); :meth:`final` casts them."""
        hit = self.conversions.get(excluded)
        if hit is None:
            hit = convert_model_full(self.sym, self.arg_params, self.aux_params,
                                     target_dtype=self.target_dtype,
                                     excluded_sym_names=sorted(excluded), sequential_casts=True,
                                     # checked once, with the sample inputs' shapes
                                     check_shapes=False, cast_params=self.execution == "native",
                                     **self.convert_kwargs)
            self.conversions = {excluded: hit}   # only the latest: conversions hold param copies
        return hit

    def final(self, excluded: frozenset):
        """The returned model: :meth:`convert`'s, its params cast now, after the last check
        (so the low precision copies never coexist with a check's temporaries)."""
        sym, args, auxs, conversion = self.convert(excluded)
        self.conversions = {}
        if self.execution == "emulated":
            args = recast_params(args, conversion.arg_dtypes, sequential=True)
            auxs = recast_params(auxs, conversion.aux_dtypes, sequential=True)
        return sym, args, auxs, conversion

    def forward(self, sym, arg_params, aux_params) -> list[np.ndarray]:
        """One model execution. Through a CachedOp, as Gluon runs models: ``Symbol.bind``
        applies MXNet 1.9's MKLDNN subgraph fusion, which returns wrong values for a fused
        FullyConnected+relu when both outputs are graph outputs (the instrumented run)."""
        import mxnet as mx
        values = {k: v.as_in_context(self.ctx) for k, v in {**arg_params, **aux_params}.items()}
        values.update(self.inputs)
        names = sym.list_inputs()
        missing = [n for n in names if n not in values]
        if missing:
            raise ParamError(f"no value for the model inputs {missing[:10]}")
        op = mx.nd.CachedOp(sym)
        with mx.autograd.pause(train_mode=False):
            outs = op(*[values[n] for n in names])
        if isinstance(outs, mx.nd.NDArray):
            outs = [outs]
        result = [o.asnumpy() if o.dtype == np.float32 else o.astype("float32").asnumpy()
                  for o in outs]
        self._count()
        return result

    def _count(self) -> None:
        self.executions += 1
        self.progress.update(1)

    def run_reference(self, instrumented_sym) -> list[np.ndarray]:
        outs = self.forward(instrumented_sym, self.arg_params, self.aux_params)
        self.steps.append(SearchStep("reference", 0, None, None, None))
        return outs

    def check(self, excluded: frozenset, kind: str) -> tuple[bool, float, float]:
        """Run the converted model without ``excluded`` in low precision; cached."""
        hit = self.results.get(excluded)
        if hit is not None:
            return hit.passed, hit.tolerance_ratio, hit.max_abs_error
        sym, args, auxs, conversion = self.convert(excluded)
        if self.execution == "emulated":
            from .emulation import emulate_model
            # no param copies: each check emulates once and runs once, so rounding weights
            # in the graph costs what rounding them ahead would, without holding a copy
            sym, args, auxs = emulate_model(sym, args, auxs, input_dtypes=self.input_dtypes(),
                                            stored_dtypes={**conversion.arg_dtypes,
                                                           **conversion.aux_dtypes})
        outs = self.forward(sym, args, auxs)
        result = check_outputs(self.reference, outs, self.target_dtype, self.tolerance,
                               self.rtol, self.atol)
        if self.validate is not None:
            result = replace(result, criterion="validate",
                             passed=bool(self.validate([r.copy() for r in self.reference], outs)))
        self.results[excluded] = result
        self.steps.append(SearchStep(kind, len(excluded), result.passed, result.tolerance_ratio,
                                     result.max_abs_error, result.relative_error,
                                     result.top1_flips))
        self.progress.set_postfix(kept_fp32=len(excluded), ok=result.passed, refresh=False)
        return result.passed, result.tolerance_ratio, result.max_abs_error

    def input_dtypes(self) -> dict[str, str]:
        from .dtypes import dtype_name
        return {k: dtype_name(v.dtype) for k, v in self.inputs.items()}


def _context(ctx):
    import mxnet as mx
    if ctx is None:
        return mx.cpu()
    if not isinstance(ctx, mx.Context):
        raise TypeError(f"ctx must be an mx.Context (mx.cpu(), mx.gpu(0)), got {ctx!r}")
    return ctx


def _execution_mode(target_dtype: str, ctx, execution: str) -> tuple[str, str | None]:
    """``('native'|'emulated', note)``; ``execution='auto'`` picks native where it runs."""
    from .hardware import bf16_runs_natively, fp16_runs_natively
    if execution not in ("auto", "native", "emulated"):
        raise ValueError(f"execution must be 'auto', 'native' or 'emulated', got {execution!r}")
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


def _sample_inputs(sample_inputs, data_names: Sequence[str], ctx) -> dict:
    import mxnet as mx
    if isinstance(sample_inputs, Mapping):
        given = dict(sample_inputs)
    elif isinstance(sample_inputs, (list, tuple)):
        if len(sample_inputs) != len(data_names):
            raise GraphError(f"sample_inputs holds {len(sample_inputs)} arrays but the model "
                             f"has {len(data_names)} inputs {list(data_names)}")
        given = dict(zip(data_names, sample_inputs))
    elif len(data_names) == 1:
        given = {data_names[0]: sample_inputs}
    else:
        raise GraphError(f"the model has inputs {list(data_names)}: pass sample_inputs as a "
                         "dict of name to array")
    missing = [n for n in data_names if n not in given]
    extra = sorted(set(given) - set(data_names))
    if missing or extra:
        raise GraphError(f"sample_inputs must give exactly the model inputs {list(data_names)}"
                         + (f"; missing {missing}" if missing else "")
                         + (f"; not inputs of the model: {extra}" if extra else ""))
    out = {}
    for name in data_names:
        value = given[name]
        if isinstance(value, mx.nd.NDArray):
            out[name] = value.copyto(ctx)   # never bind the caller's array
        else:
            arr = np.asarray(value)
            out[name] = mx.nd.array(arr, ctx=ctx, dtype=arr.dtype if arr.dtype.kind in "iuf" else np.float32)
    return out


def _offending(stats: Mapping[tuple[int, int], TensorRange], limits: DtypeLimits,
               underflow_fraction: float):
    """``(key, reason, value)`` for each tensor out of range, in graph order."""
    found = []
    for key in sorted(stats):
        r = stats[key]
        if r.max_abs > limits.max:       # inf and nan from the float32 run count too
            found.append((key, "overflow", r.max_abs))
        elif r.flushed > 0 and r.flushed >= underflow_fraction:
            found.append((key, "underflow", r.flushed))
    return found


def _range_exclusions(runs: _Runs, original: Graph, stats, limits, underflow_fraction,
                      user_excluded: frozenset) -> tuple[frozenset, dict[str, KeptNode]]:
    """Grow the exclusion set until no out of range tensor is held in low precision."""
    offending = _offending(stats, limits, underflow_fraction)
    excluded = set(user_excluded)
    kept: dict[str, KeptNode] = {}
    ops = {n.name: n.op for n in original.nodes}
    index = {n.name: i for i, n in enumerate(original.nodes)}
    while offending:
        _, _, _, conversion = runs.convert(frozenset(excluded))
        holders = _holders_of(conversion)
        selected: dict[str, KeptNode] = {}
        tainted: set[int] = set()
        for key, reason, value in offending:
            if key[0] in tainted:
                # downstream of a node chosen this round: its dtype may change; next round
                continue
            name = original.nodes[key[0]].name
            now = holders.get((name, key[1]), set()) - excluded
            if not now:
                continue
            tensor = _tensor_name(original, key)
            for holder in sorted(now):
                selected.setdefault(holder, KeptNode(holder, ops[holder], reason, value, tensor))
            tainted |= _descendants(original, {index[h] for h in now})
        if not selected:
            break
        excluded |= set(selected)
        kept.update(selected)
    return frozenset(excluded), kept


def _holders_of(conversion: Conversion):
    # the dtype of every tensor of the converted graph, as the pass gave it
    tensor = conversion.result.tensor_dtypes
    used = conversion.graph.num_used_outputs()
    dtypes = [tuple(tensor.get(Entry(i, k)) for k in range(used[i]))
              for i in range(len(conversion.graph.nodes))]
    return _low_holders(conversion.original, conversion.graph, dtypes, conversion.result.categories)


def _low_nodes(conversion: Conversion) -> list[str]:
    return [n.name for n in conversion.original.nodes if not n.is_variable
            and conversion.result.node_dtypes.get(n.name) in LOW_PRECISION]


def _accuracy_search(runs: _Runs, original: Graph, base: frozenset, stats,
                     notes: list[str]) -> tuple[frozenset, dict[str, KeptNode]]:
    """Bisect for the nodes whose low precision breaks validation (module doc, step 4).

    Returns the exclusion set to use (always one that was seen to pass, or ``base`` when
    nothing passed) and the accuracy culprits."""
    index = {n.name: i for i, n in enumerate(original.nodes)}
    used = original.num_used_outputs()

    def suspicion(name: str) -> float:
        i = index[name]
        return max((stats[(i, k)].subnormal for k in range(used[i]) if (i, k) in stats), default=0.0)

    _, _, _, conversion = runs.convert(base)
    cands = sorted(_low_nodes(conversion), key=lambda n: (-suspicion(n), index[n]))
    ops = {n.name: n.op for n in original.nodes}
    kept: dict[str, KeptNode] = {}
    found: list[str] = []

    def config(prefix: int) -> frozenset:
        return base | frozenset(found) | frozenset(cands[:prefix])

    def undecided(prefix: int):
        """Out of budget: keep the candidates not yet cleared in float32 (that passed)."""
        notes.append(f"the execution budget ({runs.max_executions}) ran out during the accuracy "
                     f"search; kept {prefix} undecided candidates in float32")
        for name in cands[:prefix]:
            kept[name] = KeptNode(name, ops[name], "budget")
        return config(prefix), kept

    if not runs.budget_left:
        notes.append("the execution budget ran out before the accuracy search could start")
        return base, kept
    ok, _, _ = runs.check(config(len(cands)), "all-fp32")
    if not ok:
        notes.append("even with every low precision node kept in float32 the check fails: "
                     "validate or the tolerances reject the float32 model itself")
        return base, kept
    lo, hi = 0, len(cands)     # config(lo) fails, config(hi) passes (both measured)
    while True:
        while hi - lo > 1 and runs.budget_left:
            mid = (lo + hi) // 2
            ok, _, _ = runs.check(config(mid), "bisect")
            lo, hi = (lo, mid) if ok else (mid, hi)
        if hi - lo > 1:
            return undecided(hi)
        culprit = cands[hi - 1]
        contribution = (runs.results[config(lo)].tolerance_ratio
                        - runs.results[config(hi)].tolerance_ratio)
        kept[culprit] = KeptNode(culprit, ops[culprit], "accuracy", float(contribution), culprit)
        found.append(culprit)
        cands = cands[:hi - 1]
        # config(len(cands)) is the configuration that just passed
        if not cands:
            return config(0), kept
        if not runs.budget_left:
            return undecided(len(cands))
        ok, _, _ = runs.check(config(0), "bisect")
        if ok:
            return config(0), kept
        lo, hi = 0, len(cands)


def _checked_limits(target_dtype: str, rtol, atol, tolerance, max_executions,
                    underflow_fraction) -> tuple[float | None, float | None, float]:
    """``(rtol, atol, tolerance)`` with defaults filled in; ValueError for bad values."""
    if rtol is not None or atol is not None:
        d_rtol, d_atol = default_tolerances(target_dtype)
        rtol = d_rtol if rtol is None else float(rtol)
        atol = d_atol if atol is None else float(atol)
        if not (rtol >= 0 and atol >= 0 and math.isfinite(rtol) and math.isfinite(atol)):
            raise ValueError(f"rtol and atol must be finite and >= 0, got rtol={rtol}, atol={atol}")
    tolerance = default_scale_tolerance(target_dtype) if tolerance is None else float(tolerance)
    if not (tolerance > 0 and math.isfinite(tolerance)):
        raise ValueError(f"tolerance must be finite and positive, got {tolerance}")
    if max_executions is not None and max_executions < 2:
        raise ValueError(f"max_executions must be at least 2 (reference and check), got {max_executions}")
    if not 0 < underflow_fraction <= 1:
        raise ValueError(f"underflow_fraction must be in (0, 1], got {underflow_fraction}")
    return rtol, atol, tolerance


def _reference_ranges(original: Graph, keys, outs, inputs, params, limits):
    """The float32 reference outputs and the range of every float tensor (op outputs from
    the instrumented run, model inputs and weights as given)."""
    by_key = dict(zip(keys, outs))
    reference = [by_key[(e.node, e.index)] for e in original.heads]
    stats: dict[tuple[int, int], TensorRange] = {}
    for key, value in by_key.items():
        if value.dtype.kind == "f":
            stats[key] = tensor_range(value, limits)
    for i, node in enumerate(original.nodes):
        if node.is_variable:
            value = inputs[node.name] if node.name in inputs else params.get(node.name)
            if value is not None and np.dtype(value.dtype).kind == "f":
                stats[(i, 0)] = tensor_range(value, limits)
    return reference, stats


def _search(runs: _Runs, original: Graph, stats, limits, underflow_fraction: float,
            user_excluded: frozenset, notes: list[str]) -> tuple[frozenset, tuple[KeptNode, ...]]:
    """Steps 2-4 of the module doc: the exclusion set to return and why each node is in it."""
    # 2. nodes holding out of range tensors in low precision: float32 (no execution)
    excluded, kept = _range_exclusions(runs, original, stats, limits, underflow_fraction,
                                       user_excluded)
    # 3. one converted check
    ok, _, _ = runs.check(excluded, "check")
    # 4. only when the ranges do not explain the error: bounded search
    if not ok:
        excluded, found = _accuracy_search(runs, original, excluded, stats, notes)
        kept.update(found)
    ops = {n.name: n.op for n in original.nodes}
    kept_nodes = [KeptNode(n, ops[n], "user") for n in sorted(user_excluded)]
    kept_nodes += [kept[n] for n in sorted(kept, key=lambda n: original.index_of(n))]
    return excluded, tuple(kept_nodes)


def auto_convert_model(sym, arg_params: Mapping, aux_params: Mapping, sample_inputs,
                       target_dtype: str = "float16", rtol: float | None = None,
                       atol: float | None = None,
                       validate: Callable[[list, list], bool] | None = None, *,
                       tolerance: float | None = None,
                       ctx=None, execution: str = "auto",
                       excluded_sym_names: Sequence[str] | None = None,
                       target_dtype_ops: Sequence[str] | None = None,
                       fp32_ops: Sequence[str] | None = None,
                       widest_dtype_ops: Sequence[str] | None = None,
                       conditional_fp32_ops=None,
                       data_names: Sequence[str] | None = None,
                       cast_optional_params: bool = True,
                       fold_batchnorm: bool = False,
                       underflow_fraction: float = 0.1,
                       max_executions: int | None = None,
                       quiet: bool = False):
    """Convert an fp32 model to mixed precision, keeping in float32 what fails validation.

    Parameters
    ----------
    sym : Symbol
        The fp32 model (not modified).
    arg_params, aux_params : dict of str to NDArray
        Its params (not modified).
    sample_inputs : NDArray, array, list of arrays, or dict of name to array
        One batch of representative inputs: a dict by input name, a list in the order of
        the model's inputs, or one array for a single-input model.
    target_dtype : {'float16', 'bfloat16'}
    rtol, atol : float, optional
        Given (either), the check is elementwise ``allclose(converted, fp32, rtol, atol)``
        instead of the default; the one left out is :func:`default_tolerances`'
        ((1e-2, 1e-3) for float16, (5e-2, 1e-2) for bfloat16).
    validate : callable, optional
        ``validate(reference_outputs, converted_outputs) -> bool`` on lists of float32
        numpy arrays (model output order), replacing the check: a task metric, say.
    tolerance : float, optional
        The default check's bound on each output's ``max|out - fp32| / max|fp32|``
        (:func:`check_outputs`; it also asks that no ``(batch, classes)`` output changes a
        top-1 prediction). Default :func:`default_scale_tolerance`: 1e-2 for float16,
        5e-2 for bfloat16.
    ctx : Context, optional
        Where the model runs (default ``mx.cpu()``). With a GPU context float16 runs natively.
    execution : {'auto', 'native', 'emulated'}
        How the converted model runs for the checks. ``'auto'``: natively where the
        hardware executes ``target_dtype`` (float16 on a GPU, bfloat16 on an avx512 CPU),
        else through :mod:`mxnet_amp.emulation`. The report says which.
    excluded_sym_names, target_dtype_ops, fp32_ops, widest_dtype_ops, conditional_fp32_ops,
    data_names, cast_optional_params, fold_batchnorm
        As in :func:`mxnet_amp.convert_model`; user-excluded nodes stay excluded (and a
        BatchNorm excluded, or after an excluded op, is not folded).
    underflow_fraction : float, default 0.1
        A tensor is an underflow culprit when at least this fraction of its nonzero float32
        values flush to zero in ``target_dtype``.
    max_executions : int, optional
        Upper bound on model executions (at least 2). When the accuracy search hits it, the
        undecided candidates stay float32 (the last configuration seen to pass).
    quiet : bool, default False
        No progress bar.

    Returns
    -------
    (Symbol, dict, dict, AutoReport)
        The converted model, as :func:`mxnet_amp.convert_model` returns it with the chosen
        exclusions, and the report.

    Raises
    ------
    GraphError, ParamError
        Bad sample inputs, or params that do not fit the symbol.

    Notes
    -----
    A model that converts cleanly costs 2 executions (reference with per-node ranges, then
    the converted check); one whose problems the ranges explain costs the same. ``k``
    accuracy culprits among ``N`` low precision nodes cost at most
    ``3 + k * (ceil(log2 N) + 1)``.
    """
    from tqdm.auto import tqdm
    target_dtype = check_target_dtype(target_dtype)
    rtol, atol, tolerance = _checked_limits(target_dtype, rtol, atol, tolerance, max_executions,
                                            underflow_fraction)
    ctx = _context(ctx)
    mode, mode_note = _execution_mode(target_dtype, ctx, execution)
    if data_names is None:
        data_names = [n for n in sym.list_arguments() if n not in arg_params]
    elif isinstance(data_names, str):
        data_names = [data_names]
    data_names = list(data_names)
    inputs = _sample_inputs(sample_inputs, data_names, ctx)
    arg_params, aux_params = param_dict(arg_params, "arg_params"), param_dict(aux_params, "aux_params")
    # the sample inputs' shapes reach every weight: a wrong one is named before any run
    check_param_shapes(sym, arg_params, aux_params, {k: v.shape for k, v in inputs.items()},
                       shapes_from="sample_inputs")
    limits = DTYPE_LIMITS[target_dtype]
    original = graph_from_symbol(sym)
    user_excluded = frozenset(excluded_sym_names or ())
    unknown = sorted(user_excluded - {n.name for n in original.nodes})
    if unknown:
        raise GraphError(f"excluded_sym_names {unknown} name no node of the symbol")
    convert_kwargs = dict(target_dtype_ops=target_dtype_ops, fp32_ops=fp32_ops,
                          widest_dtype_ops=widest_dtype_ops,
                          conditional_fp32_ops=conditional_fp32_ops, data_names=data_names,
                          cast_optional_params=cast_optional_params,
                          fold_batchnorm=fold_batchnorm)
    notes = [mode_note] if mode_note else []
    progress = tqdm(desc=f"auto {target_dtype}", unit="run", disable=quiet, leave=False)
    try:
        runs = _Runs(sym=sym, arg_params=arg_params, aux_params=aux_params, inputs=inputs,
                     ctx=ctx, target_dtype=target_dtype, execution=mode,
                     convert_kwargs=convert_kwargs, tolerance=tolerance, rtol=rtol, atol=atol,
                     validate=validate,
                     max_executions=max_executions, progress=progress)
        # the first conversion checks params against the symbol (typed errors) before a run
        runs.convert(user_excluded)

        # 1. one float32 run with every op output: reference and per-tensor ranges
        probe, keys = _instrumented(original)
        outs = runs.run_reference(graph_to_symbol(probe))
        runs.reference, stats = _reference_ranges(original, keys, outs, inputs,
                                                  {**arg_params, **aux_params}, limits)
        del outs
        reference_finite = all(np.isfinite(r).all() for r in runs.reference)
        if not reference_finite:
            notes.append("the float32 reference outputs hold inf/nan on these sample inputs")

        excluded, kept = _search(runs, original, stats, limits, underflow_fraction,
                                 user_excluded, notes)
        result = runs.results.get(excluded) or OutputCheck(
            "scale" if rtol is None else "allclose", False, math.inf, math.inf, math.inf, 0, 0)
        new_sym, new_args, new_auxs, conversion = runs.final(excluded)
    finally:
        progress.close()
    report = AutoReport(
        target_dtype=target_dtype, execution=mode, context=str(ctx),
        kept_fp32=kept, executions=runs.executions, validated=result.passed,
        tolerance_ratio=result.tolerance_ratio, max_abs_error=result.max_abs_error,
        rtol=rtol, atol=atol, op_nodes=sum(1 for n in original.nodes if not n.is_variable),
        low_precision_nodes=len(_low_nodes(conversion)), criterion=result.criterion,
        tolerance=tolerance if result.criterion == "scale" else None,
        relative_error=result.relative_error, top1_flips=result.top1_flips,
        top1_rows=result.top1_rows, steps=tuple(runs.steps), notes=tuple(notes),
        reference_finite=reference_finite, conversion=conversion)
    if not report.validated:
        import warnings
        warnings.warn("auto_convert_model: the returned model did not validate "
                      f"({report.criterion_text()}); see report.notes", stacklevel=2)
    return new_sym, new_args, new_auxs, report


def auto_convert_block(block, sample_inputs, target_dtype: str = "float16",
                       rtol: float | None = None, atol: float | None = None,
                       validate: Callable[[list, list], bool] | None = None, *,
                       input_names: Sequence[str] | None = None, ctx=None,
                       **kwargs):
    """:func:`auto_convert_model` for a Gluon block: returns ``(SymbolBlock, AutoReport)``.

    Parameters
    ----------
    block : HybridBlock or SymbolBlock
        The fp32 model, params initialised (not modified).
    sample_inputs : NDArray, list of NDArray, or dict
        One batch: an array per positional input of the block (or a dict by input name).
    input_names : list of str, optional
        As in :func:`mxnet_amp.gluon.convert_hybrid_block`.
    ctx : Context, optional
        Where the checks run and the converted block's params live (default: the block's).
    **kwargs
        Any other keyword of :func:`auto_convert_model`.

    Returns
    -------
    (SymbolBlock, AutoReport)
        The block :func:`mxnet_amp.gluon.convert_hybrid_block` would build with the chosen
        ``excluded_sym_names`` (the model :func:`auto_convert_model` returned), and the report.
    """
    from .gluon import block_model, converted_symbol_block
    if "data_names" in kwargs:
        raise TypeError("auto_convert_block takes no 'data_names'; use input_names")
    sym, arg_params, aux_params, names = block_model(block, input_names)
    run_ctx = ctx if ctx is not None else _block_context(block)
    new_sym, new_args, new_auxs, report = auto_convert_model(
        sym, arg_params, aux_params, sample_inputs, target_dtype, rtol, atol, validate,
        ctx=run_ctx, data_names=names, **kwargs)
    # the returned model itself, not a second conversion with the same exclusions
    return converted_symbol_block(block, names, new_sym, new_args, new_auxs, ctx), report


def _block_context(block):
    import mxnet as mx
    for param in block.collect_params().values():
        if param._data is not None:
            return param.list_ctx()[0]
    return mx.cpu()
