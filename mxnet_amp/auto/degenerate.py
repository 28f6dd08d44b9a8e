"""Degenerate models: a float32 reference that its own params make non-finite.

A model whose BatchNorm holds a negative running variance (a ``moving_var`` set by hand, a
net initialised and never trained) computes nan in float32 wherever that channel reaches.
The checks judge only the elements float32 kept finite, so such a model still ran a whole
search: an SSD with negative variances, ``--no-fold-bn``, took 301 executions, 187 s and
6 GB before the CLI refused its result. After the reference run the search now names the
nodes where the non-finite values start (:func:`nonfinite_origins`) and stops with
:class:`~mxnet_amp.errors.DegenerateModelError` when a param explains them
(:func:`degenerate_params`). A BatchNorm with ``moving_var + eps <= 0`` is refused before
any run: MXNet's kernels return finite values for it (no nan to find), none of them
meaningful.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..ir.graph import Graph

_BN_OPS = frozenset({"BatchNorm", "_contrib_SyncBatchNorm"})
_BN_EPS_DEFAULT = 1e-3


def nonfinite_origins(graph: Graph, tensors: Mapping[tuple[int, int], np.ndarray]) -> list[str]:
    """The op nodes with a non-finite output whose op inputs are all finite (in graph order):
    where float32 itself first loses values. ``tensors``: the reference run's tensors by
    ``(node, output)``; a tensor not in it counts as finite."""
    bad = {key for key, value in tensors.items()
           if getattr(value, "dtype", None) is not None and value.dtype.kind == "f"
           and not np.isfinite(value).all()}
    origins = []
    for i, node in enumerate(graph.nodes):
        if node.is_variable or not any(key[0] == i for key in bad):
            continue
        if not any((e.node, e.output) in bad for e in node.inputs):
            origins.append(node.name)
    return origins


def batchnorms(graph: Graph) -> list[str]:
    """The BatchNorm nodes of ``graph``, in graph order."""
    return [n.name for n in graph.nodes if n.op in _BN_OPS]


def degenerate_params(graph: Graph, params: Mapping[str, Any], names: Sequence[str]
                      ) -> dict[str, str]:
    """Of the nodes ``names``, those whose params make float32 non-finite, each with why: a
    BatchNorm whose ``moving_var + eps`` is not positive or whose statistics are not finite,
    any op with a non-finite param."""
    index = {n.name: n for n in graph.nodes}
    found: dict[str, str] = {}
    for name in names:
        node = index[name]
        inputs = [graph.nodes[e.node].name for e in node.inputs if graph.nodes[e.node].is_variable]
        # a BatchNorm's inputs: data, gamma, beta, moving_mean, moving_var
        is_bn = node.op in _BN_OPS and len(node.inputs) == 5
        variance = graph.nodes[node.inputs[4].node].name if is_bn else None
        # under fix_gamma (MXNet's default) the kernel reads gamma as 1, whatever it holds
        ignored = (graph.nodes[node.inputs[1].node].name
                   if is_bn and node.attrs.get("fix_gamma", "True").strip().lower() in ("true", "1")
                   else None)
        for param in inputs:
            if param not in params or param == ignored:
                continue
            values = np.asarray(params[param].asnumpy() if hasattr(params[param], "asnumpy")
                                else params[param], dtype=np.float64).ravel()
            bad = ~np.isfinite(values)
            if param == variance:
                bad |= values + float(node.attrs.get("eps", _BN_EPS_DEFAULT)) <= 0
            if bad.any():
                where = np.flatnonzero(bad)
                shown = ", ".join(f"[{j}]={values[j]:g}" for j in where[:3].tolist())
                found[name] = (f"{param} has {where.size} of {values.size} entries "
                               f"{'with moving_var + eps <= 0 or ' if node.op in _BN_OPS else ''}"
                               f"non-finite ({shown}{', ...' if where.size > 3 else ''})")
                break
    return found
