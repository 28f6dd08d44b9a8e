"""MXNet's metric conventions for the automatic mode: ``metric=`` as an ``EvalMetric``
(``mx.metric.Accuracy()``, gluoncv's ``VOC07MApMetric``, ...) or a name for
``mx.metric.create`` (``'acc'``, ``'top_k_accuracy'``, ``'mse'``), updated batch by batch
with (labels, outputs) as MXNet's ``Module.score`` does, and read once per pass over the data.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import ArgumentError, InputValueError

__all__ = ["TaskMetric", "task_metric", "LOWER_IS_BETTER"]

# EvalMetric classes whose value is a loss: the score is its negative (higher is better)
LOWER_IS_BETTER = ("MSE", "MAE", "RMSE", "CrossEntropy", "NegativeLogLikelihood", "Perplexity",
                   "Loss", "Torch", "Caffe")


def _is_eval_metric(value: Any) -> bool:
    return all(hasattr(value, a) for a in ("update", "get", "reset"))


@dataclass
class TaskMetric:
    """An ``EvalMetric`` as a score of a whole pass: :meth:`fresh` gives a reset copy, and
    :meth:`update` feeds it one batch; :meth:`score` reads it (higher is better: a loss
    metric's value is negated).

    ``metric_inputs(labels, outputs) -> tuple``: the arguments of ``metric.update`` for one
    batch (lists of NDArrays in, as the model and the data give them); default
    ``(labels, outputs)``, MXNet's own convention. A detector metric takes others (gluoncv's
    ``VOC07MApMetric.update(pred_bboxes, pred_labels, pred_scores, gt_bboxes, gt_labels)``).
    """

    metric: Any
    metric_inputs: Callable[[list, list], Sequence] | None = None

    @property
    def name(self) -> str:
        """The metric's name (its last one for a metric of several values)."""
        # the attribute, not get(): gluoncv's VOC metrics cannot get() before an update
        name = getattr(self.metric, "name", None) or type(self.metric).__name__
        return str(name[-1] if isinstance(name, (list, tuple)) else name)

    @property
    def lower_is_better(self) -> bool:
        """Whether the metric's value is a loss."""
        return type(self.metric).__name__ in LOWER_IS_BETTER

    def fresh(self) -> Any:
        """A reset copy of the metric (the caller's instance is never updated)."""
        metric = copy.deepcopy(self.metric)
        metric.reset()
        return metric

    def update(self, metric: Any, labels: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        """Feed ``metric`` one batch (numpy labels and outputs, made NDArrays)."""
        import mxnet as mx
        nd_labels = [mx.nd.array(x, dtype=x.dtype) for x in labels]
        nd_outputs = [mx.nd.array(x, dtype=x.dtype) for x in outputs]
        if self.metric_inputs is None:
            if not nd_labels:
                raise InputValueError(f"metric {self.name!r} needs labels: give each batch of "
                                      "eval_data with its labels ((data, label) tuples, a "
                                      "DataIter with labels, or a 'label' key)")
            metric.update(nd_labels, nd_outputs)
        else:
            metric.update(*self.metric_inputs(nd_labels, nd_outputs))

    def score(self, metric: Any) -> float:
        """The value of ``metric`` (the last of several, as gluoncv's mAP), signed so that
        higher is better."""
        value = metric.get()[1]
        value = value[-1] if isinstance(value, (list, tuple)) else value
        value = float(value)
        return -value if self.lower_is_better else value


def task_metric(metric: Any, metric_inputs: Callable | None = None) -> TaskMetric | None:
    """The :class:`TaskMetric` of ``metric`` (an EvalMetric or a name for
    ``mx.metric.create``); None for a callable (the one-batch score function).

    Raises
    ------
    ValueError
        A name ``mx.metric.create`` does not know, or ``metric_inputs`` without an
        EvalMetric.
    """
    if isinstance(metric, str):
        import mxnet as mx
        try:
            metric = mx.metric.create(metric)
        except (ValueError, KeyError, AssertionError) as err:
            raise ArgumentError(f"metric {metric!r} is not an MXNet metric name ('acc', "
                             f"'top_k_accuracy', 'mse', ...): {err}") from None
    if _is_eval_metric(metric):
        return TaskMetric(metric, metric_inputs)
    if metric_inputs is not None:
        raise ArgumentError("metric_inputs maps (labels, outputs) to an EvalMetric's update(): "
                         "give metric as an EvalMetric")
    return None
