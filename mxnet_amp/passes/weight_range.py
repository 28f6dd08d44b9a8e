"""Weights float16 cannot hold: which ones, and which nodes read them.

A float32 weight whose largest magnitude rounds past float16's range (65504) becomes inf in
float16, and one whose nonzero values mostly fall below float16's smallest subnormal
(5.96e-8) becomes (mostly) zero. A float16 conversion would write such a weight so, or feed
it so to a low precision reader, without a word. Read from the params (the symbol alone has
no values), this module says which weights do, and the conversion keeps their readers in
float32 (:func:`mxnet_amp.convert.convert_with_params`, through the pass's per-node
``kept_fp32`` decisions, each with the reason given here). bfloat16 has float32's exponent
range: nothing to check there.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..ir.graph import Graph
from ..policy import Reason

__all__ = ["out_of_range_weights", "readers_kept", "UNDERFLOW_SHARE"]

# a weight loses "most" of its values when more than this share of its nonzeros flush to 0
UNDERFLOW_SHARE = 0.5


def out_of_range_weights(params: Mapping[str, Any], target_dtype: str) -> dict[str, str]:
    """``{param name: why}`` for each float32 param float16 cannot hold: one that holds inf
    or flushes more than :data:`UNDERFLOW_SHARE` of its nonzero values to 0 once cast
    (empty for bfloat16: float32's range)."""
    if target_dtype != "float16":
        return {}
    found = {}
    for name, array in params.items():
        if getattr(array, "dtype", None) != np.float32:
            continue
        why = _why(np.asarray(array.asnumpy() if hasattr(array, "asnumpy") else array))
        if why:
            found[name] = f"weight {name} {why}"
    return found


# float16's extremes as float32 values round: from 65520 up to inf, up to 2**-25 down to 0
_OVERFLOW = 65520.0
_FLUSH = 2.0 ** -25


# values read per step: the temporaries stay that small (16 MB of float32, not three copies
# of a 268 MB weight), and Ctrl-C acts between steps (a 1 GB model's check held it seconds)
_STEP = 1 << 22


def _why(values: np.ndarray) -> str | None:
    flat = np.ravel(values)
    finite = flushed = nonzero = 0
    largest = 0.0
    for start in range(0, flat.size, _STEP):
        part = flat[start:start + _STEP]
        magnitude = np.abs(part[np.isfinite(part)])
        if magnitude.size == 0:
            continue
        finite += magnitude.size
        largest = max(largest, float(magnitude.max()))
        flushed += int(np.count_nonzero(magnitude[magnitude <= _FLUSH]))
        nonzero += int(np.count_nonzero(magnitude))
    if finite == 0:
        return None
    if largest >= _OVERFLOW:
        return f"is out of float16 range: max |w| {largest:.2g} (float16 holds up to 65504)"
    if flushed == 0:
        return None
    if flushed > UNDERFLOW_SHARE * nonzero:
        return (f"underflows float16: {flushed} of {nonzero} nonzero values flush to 0 "
                f"(max |w| {largest:.2g})")
    return None


def readers_kept(graph: Graph, weights: Mapping[str, str]) -> dict[str, str]:
    """``{node name: why}``: each op node reading one of ``weights`` (by variable name, with
    the weight's reason), to keep in float32."""
    index = {node.name: i for i, node in enumerate(graph.nodes) if node.is_variable}
    at = {index[name]: why for name, why in weights.items() if name in index}
    kept: dict[str, str] = {}
    for node in graph.nodes:
        reasons = [at[e.node] for e in node.inputs if e.node in at]
        if reasons and not node.is_variable:
            kept[node.name] = Reason("; ".join(dict.fromkeys(reasons)), "weight range")
    return kept
