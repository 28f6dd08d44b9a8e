"""Measuring: what a float32 tensor holds seen from a low precision dtype, and converted
outputs judged against the float32 reference."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np

from ..ir.graph import Graph
from ..policy import check_target_dtype
from .records import DTYPE_LIMITS, DtypeLimits, OutputCheck, TensorRange

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet.ndarray import NDArray


# The default check's bound on max|out - ref| / max|ref| per output. float16 keeps ~3.3
# significant digits (rounding error 4.9e-4 of a value), bfloat16 ~2.4 (3.9e-3): the bounds
# leave ~20x and ~13x that for the error to grow through the layers. Measured on the trained
# models of tests/support/trained_models.py (predictions unchanged; docs/trained_accuracy.md):
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


def tensor_range(x: np.ndarray | NDArray, limits: DtypeLimits,
                 chunk: int = 1 << 20) -> TensorRange:
    """The :class:`TensorRange` of array ``x`` (numpy or NDArray) against ``limits``.

    Worked through ``chunk`` values at a time: the temporaries stay small however large
    ``x`` is (a weight of a large model, say); an NDArray is copied out a chunk at a time."""
    max_abs, finite_max, nonzero, flushed, subnormal = 0.0, 0.0, 0, 0, 0
    for part in _float32_chunks(x, chunk):
        part = np.abs(part)
        max_abs = max(max_abs, float(np.max(part)), key=lambda v: (math.isnan(v), v))  # nan wins
        finite_max = max(finite_max, float(np.max(part, where=np.isfinite(part), initial=0.0)))
        part = part[part > 0]
        nonzero += part.size
        flushed += int(np.count_nonzero(part < limits.zero_below))
        subnormal += int(np.count_nonzero((part >= limits.zero_below) & (part < limits.min_normal)))
    if nonzero == 0:
        return TensorRange(max_abs, 0.0, 0.0, finite_max)
    return TensorRange(max_abs, flushed / nonzero, subnormal / nonzero, finite_max)


def _float32_chunks(x: np.ndarray | NDArray, chunk: int) -> Iterator[np.ndarray]:
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


def _close_ratio(diff: np.ndarray, ref_abs: np.ndarray, rtol: float, atol: float) -> float:
    """``max(diff / (atol + rtol * |ref|))``: an element that agrees counts 0 even where the
    bound is 0 (0/0 would be nan, and one nan would hide every other element: a relu
    output's zeros with ``atol=0``); one that differs where the bound is 0 counts inf."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(diff == 0, 0.0, diff / (atol + rtol * ref_abs))
    return float(ratio.max())


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
    Elements where the float32 reference is inf or nan are not judged (float32 lost them
    already); an output non-finite where the reference is finite fails either criterion.
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
        # where the float32 reference is itself inf or nan, nothing is judged: low
        # precision cannot be blamed for what float32 already lost
        unjudged = (r == o) | ~np.isfinite(r)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where(unjudged, 0.0, np.abs(o - r))
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
        close_ratio = max(close_ratio, _close_ratio(diff, ref_abs, rtol, atol))
        if r.ndim == 2 and r.shape[1] > 1:
            f, n = _top1_flips(r, o, tol * scale)
            flips, rows = flips + f, rows + n
    if allclose:
        return OutputCheck("allclose", close_ratio <= 1.0, close_ratio, max_abs, rel_max,
                           flips, rows)
    return OutputCheck("scale", scale_ratio <= 1.0 and flips == 0, scale_ratio, max_abs,
                       rel_max, flips, rows)


def offending_tensors(stats: Mapping[tuple[int, int], TensorRange], limits: DtypeLimits,
                      underflow_fraction: float) -> list[tuple[tuple[int, int], str, float]]:
    """``(key, reason, value)`` for each tensor out of range, in graph order."""
    found: list[tuple[tuple[int, int], str, float]] = []
    for key in sorted(stats):
        r = stats[key]
        # the finite values against the range: where the float32 run itself holds inf or
        # nan, float32 overflows too and keeping the node in it changes nothing
        top = r.max_abs if r.finite_max is None else r.finite_max
        if top > limits.max:
            found.append((key, "overflow", top))
        elif r.flushed > 0 and r.flushed >= underflow_fraction:
            found.append((key, "underflow", r.flushed))
    return found


def reference_ranges(original: Graph, keys: Sequence[tuple[int, int]], outs: Sequence[np.ndarray],
                      inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], limits: DtypeLimits
                      ) -> tuple[list[np.ndarray], dict[tuple[int, int], TensorRange]]:
    """The float32 reference outputs and the range of every float tensor (op outputs from
    the instrumented run, model inputs and weights as given)."""
    by_key = dict(zip(keys, outs))
    reference = [by_key[(e.node, e.output)] for e in original.heads]
    stats: dict[tuple[int, int], TensorRange] = {}
    for key, value in by_key.items():
        if value.dtype.kind == "f":
            stats[key] = tensor_range(value, limits)
    for i, node in enumerate(original.nodes):
        if node.is_variable:
            given = inputs[node.name] if node.name in inputs else params.get(node.name)
            if given is not None and np.dtype(given.dtype).kind == "f":
                stats[(i, 0)] = tensor_range(given, limits)
    return reference, stats
