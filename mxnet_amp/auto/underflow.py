"""Underflow judged by what it costs (step 2 of :mod:`mxnet_amp.auto`).

A tensor some of whose nonzero values flush to zero in the target dtype is a culprit only
when the values lost matter where it is used. For each flagged tensor this bounds the
change the loss causes, relative to the scale of what it feeds:

* a weight (a param of two or more dimensions): each output of a consumer sums one row of
  it (the first axis: output channels) times the consumer's other inputs, so the change is
  at most the largest row sum of the lost ``|w|`` times the largest ``|x|`` the consumer
  reads, over the largest ``|y|`` it outputs (a 3x3 kernel whose unused taps hold 1e-8
  while the used ones hold 0.1 loses nothing that shows);
* a bias (one dimension): it is added to the output: the largest lost value over ``|y|``
  (a convolution's 1e-9 bias before a BatchNorm is nothing beside its output);
* an activation: the largest lost value over the tensor's own largest value (a tensor
  whose values all sit near the dtype's smallest number loses everything; one that only
  has a few tiny entries beside normal ones loses nothing that shows).

The bound is in the units of the default check (a change relative to a scale); a tensor
counts when it reaches a tenth of the tolerance.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..ir.dtypes import array_values
from ..ir.graph import Graph
from .records import DtypeLimits, TensorRange

# a loss counts when its bound reaches this share of the tolerance
SHARE_OF_TOLERANCE = 0.1


def _row_loss(value: Any, limits: DtypeLimits) -> float:
    """The largest row sum (first axis) of the |values| the dtype flushes to zero."""
    w = np.abs(array_values(value))
    w = w.astype(np.float32, copy=False)
    lost = np.where((w > 0) & (w < limits.zero_below), w, 0.0)
    if lost.ndim <= 1:
        return float(lost.max(initial=0.0))
    return float(lost.reshape(lost.shape[0], -1).sum(axis=1).max(initial=0.0))


def underflow_cost(graph: Graph, key: tuple[int, int], stats: Mapping[tuple[int, int], TensorRange],
                   params: Mapping, limits: DtypeLimits) -> float:
    """Bound on the change flushing tensor ``key``'s tiny values causes, relative to the
    scale of what it feeds (module doc)."""
    node = graph.nodes[key[0]]
    value = params.get(node.name) if node.is_variable else None
    if value is None:   # an activation (or a model input): against its own scale
        own = stats[key]
        return 0.0 if own.max_abs == 0 else min(1.0, limits.zero_below / own.max_abs)
    lost = _row_loss(value, limits)
    cost = 0.0
    for j, _ in graph.consumers()[key[0]]:
        consumer = graph.nodes[j]
        out = stats.get((j, 0))
        if out is None or not out.max_abs > 0:
            continue
        others = [stats[(e.node, e.output)].max_abs for e in consumer.inputs
                  if (e.node, e.output) != key and (e.node, e.output) in stats]
        reach = max(others, default=1.0) if len(value.shape) >= 2 else 1.0
        cost = max(cost, lost * reach / out.max_abs)
    return cost
