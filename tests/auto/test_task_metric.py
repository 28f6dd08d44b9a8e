"""mxnet_amp.auto.task_metric: an MXNet EvalMetric as the score of a pass over the data."""
import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.auto.task_metric import task_metric
from mxnet_amp.errors import ArgumentError, InputValueError


def test_a_metric_name_is_created_and_scored_over_batches():
    """'acc' over two batches: 3 of 4 rows right is 0.75; the caller's metric is never updated."""
    metric = task_metric("acc")
    assert metric.name == "accuracy" and not metric.lower_is_better
    m = metric.fresh()
    metric.update(m, [np.array([0, 1])], [np.array([[0.9, 0.1], [0.2, 0.8]], dtype=np.float32)])
    metric.update(m, [np.array([0, 1])], [np.array([[0.9, 0.1], [0.7, 0.3]], dtype=np.float32)])
    assert metric.score(m) == pytest.approx(0.75)


def test_a_loss_metric_is_negated_so_higher_is_better():
    """MSE is a loss: its score is minus its value."""
    metric = task_metric(mx.metric.MSE())
    assert metric.lower_is_better
    m = metric.fresh()
    metric.update(m, [np.array([1.0, 1.0], dtype=np.float32)], [np.array([3.0, 1.0], dtype=np.float32)])
    assert metric.score(m) == pytest.approx(-2.0)


def test_metric_inputs_choose_the_arguments_of_update():
    """A metric_inputs callable gets the batch's labels and outputs as NDArray lists and
    returns what update() is called with: here the label 0 replaced by class 1, which the
    output picks, so accuracy is 1.0 where the label as given would score 0."""
    seen = []

    def inputs(labels, outputs):
        seen.append((len(labels), len(outputs), type(outputs[0]).__name__))
        return [labels[0] * 0 + 1], outputs
    metric = task_metric(mx.metric.Accuracy(), inputs)
    m = metric.fresh()
    metric.update(m, [np.array([0])], [np.array([[0.1, 0.9]], dtype=np.float32)])
    assert seen == [(1, 1, "NDArray")] and metric.score(m) == 1.0


def test_bad_metrics_are_typed_errors_and_a_callable_is_none():
    """An unknown name and metric_inputs without an EvalMetric are ArgumentErrors; a
    callable score function gives None; a metric without labels an InputValueError."""
    with pytest.raises(ArgumentError, match="not an MXNet metric name"):
        task_metric("no_such_metric")
    with pytest.raises(ArgumentError, match="metric_inputs"):
        task_metric(lambda a, b: 1.0, lambda labels, outputs: ())
    assert task_metric(lambda a, b: 1.0) is None
    metric = task_metric("acc")
    with pytest.raises(InputValueError, match="needs labels"):
        metric.update(metric.fresh(), [], [np.zeros((1, 2), dtype=np.float32)])
