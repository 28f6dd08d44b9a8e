"""Cheap searches, one full verdict (mxnet_amp.auto.subsets): the search's checks over
eval_data run on random subsets sized by a paired bound on the metric's drop, the returned
candidate is checked once on the whole set, and the search goes on where that fails."""
import math

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.auto import auto_convert_model
from mxnet_amp.auto.subsets import (Z_95, SubsetPlan, allowed_drop, decomposable, drop_bounds,
                                    per_sample_scores, subset_figures)
from mxnet_amp.auto.metrics import MetricCheck
from mxnet_amp.auto.task_metric import task_metric

from auto_models import nd, run


def planted(n=400, special=(), seed=0):
    """A 10-class classifier whose class is decided by ``fc_c``'s output ``2048 + s`` (s ~ 0.1:
    float16's spacing at 2048 is 2, so s is lost there) plus tanh layers float16 does not
    trouble; with ``special`` batch indices (of 10 rows), ``fc_d`` reads feature 15, which only
    those rows have, through the same cancellation. Returns ``(sym, args, batches)``, the labels
    the float32 model's top-1."""
    rng = np.random.RandomState(seed)
    d = mx.sym.var("data")
    args = {"fc_c_weight": rng.uniform(0, 0.01, (10, 16)), "fc_c_bias": np.full(10, 2048.0),
            "fc_d_weight": np.zeros((10, 16)), "fc_d_bias": np.full(10, 2048.0),
            "fc0_weight": rng.uniform(-0.3, 0.3, (16, 16)), "fc0_bias": np.zeros(16),
            "fc1_weight": rng.uniform(-0.3, 0.3, (10, 16)), "fc1_bias": np.zeros(10)}
    args["fc_c_weight"][:, 15] = 0
    args["fc_d_weight"][:, 15] = rng.uniform(0, 0.9, 10)
    c = mx.sym._internal._mul_scalar(mx.sym._internal._minus_scalar(
        mx.sym.FullyConnected(d, num_hidden=10, name="fc_c"), scalar=2048.0), scalar=100.0)
    dd = mx.sym._internal._mul_scalar(mx.sym._internal._minus_scalar(
        mx.sym.FullyConnected(d, num_hidden=10, name="fc_d"), scalar=2048.0), scalar=30.0)
    h = mx.sym.Activation(mx.sym.FullyConnected(d, num_hidden=16, name="fc0"), act_type="tanh")
    h = mx.sym.FullyConnected(h, num_hidden=10, name="fc1")
    out = mx.sym.elemwise_add(mx.sym.elemwise_add(c, dd), h, name="logits")
    args = nd(args)
    x = rng.uniform(0, 1, (n, 16)).astype(np.float32)
    x[:, 15] = 0
    for b in special:
        x[b * 10:(b + 1) * 10, 15] = 1
    y = run(out, args, {}, x).argmax(1).astype(np.float32)
    return out, args, [(x[i:i + 10], y[i:i + 10]) for i in range(0, n, 10)]


def test_drop_bounds_are_exact_on_the_whole_set_and_widen_on_a_subset():
    d = np.array([1.0] * 3 + [0.0] * 97)
    mean, low, high = drop_bounds(d, 100)
    assert mean == low == high == pytest.approx(0.03)     # the whole set: no width
    mean, low, high = drop_bounds(d, 1000)
    assert mean == pytest.approx(0.03) and low < 0.03 < high
    # one pseudo discordant pair: no discordance still has a width, z / n at most
    _, _, high = drop_bounds(np.zeros(50), 10 ** 9)
    assert high == pytest.approx(Z_95 / 50, rel=1e-6)
    assert drop_bounds(np.zeros(0), 10).upper == math.inf


def test_the_plan_nests_random_rounds_batch_zero_first_and_ends_with_every_batch():
    plan = SubsetPlan.of(40, 400, 0.05)
    assert plan.order[0] == 0 and sorted(plan.order) == list(range(40))
    assert plan.rounds[-1] == 40 and list(plan.rounds) == sorted(set(plan.rounds))
    # the first round holds twice the samples a subset with no discordance passes with
    assert plan.rounds[0] * 10 >= 2 * Z_95 / 0.05
    seen = set()
    for k in range(len(plan.rounds)):
        added = plan.round_batches(k)
        assert not added & seen
        seen |= added
    assert seen == set(range(40))
    assert SubsetPlan.of(40, 400, 0.0).rounds == (40,)     # nothing may drop: the whole set


def test_per_sample_scores_are_the_metrics_own_per_row():
    task = task_metric(mx.metric.Accuracy())
    out = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]], dtype=np.float32)
    labels = [np.array([1, 1, 1], dtype=np.float32)]
    assert per_sample_scores(task, labels, [out]).tolist() == [1.0, 0.0, 1.0]
    assert decomposable(task) and decomposable(task_metric(mx.metric.TopKAccuracy(top_k=3)))
    assert not decomposable(task_metric("mse")) and not decomposable(None)
    check = MetricCheck(lambda o: 0.0, 0.1, "relative", reference_score=0.5)
    assert allowed_drop(check) == pytest.approx(0.05)
    figures = subset_figures(check, {"drop": 0.04, "lower": 0.01, "upper": 0.07, "samples": 30,
                                     "passed": False, "allowed": 0.05})
    # the drop in the criterion's units (relative: 0.04 of 0.5), the value an estimate
    assert figures["drop"] == pytest.approx(0.08) and figures["value"] == pytest.approx(0.46)
    assert figures["subset_samples"] == 30 and figures["drop_bounds"] == (0.01, 0.07)


def test_a_planted_culprit_is_found_on_subsets_and_checked_once_on_the_whole_set():
    sym, args, batches = planted()
    n = 400
    _, _, _, report = auto_convert_model(sym, args, {}, target_dtype="float16", eval_data=batches,
                                         metric=mx.metric.Accuracy(), max_drop=0.05, workers=1,
                                         quiet=True)
    assert [k.name for k in report.kept_fp32] == ["fc_c"] and report.validated
    kinds = [s.kind for s in report.steps]
    assert kinds.count("final") == 1 and kinds[-1] == "final"
    assert report.metric["value"] == pytest.approx(1.0) and "subset_samples" not in report.metric
    # the float32 pass, the final check and the subset searches: well under 3.5 N
    assert report.sample_evaluations <= 3.5 * n
    assert report.sample_evaluations < (report.executions - 1) * n   # the checks read subsets
    assert any("checked once on the whole set: passed" in note for note in report.notes)


def test_a_candidate_passing_on_subsets_but_failing_on_the_whole_set_is_searched_on():
    plan = SubsetPlan.of(40, 400, 0.02)
    special = [b for b in plan.order if b not in plan.round_batches(0)][:3]
    sym, args, batches = planted(special=special)
    _, _, _, report = auto_convert_model(sym, args, {}, target_dtype="float16", eval_data=batches,
                                         metric=mx.metric.Accuracy(), max_drop=0.02, workers=1,
                                         quiet=True)
    assert sorted(k.name for k in report.kept_fp32) == ["fc_c", "fc_d"] and report.validated
    assert [s.kind for s in report.steps].count("final") == 1
    assert any("failed on the whole set" in note and "went on from it" in note
               for note in report.notes)
    assert report.metric["drop"] <= 0.02 and "subset_samples" not in report.metric


def test_a_metric_no_per_sample_mean_runs_every_check_on_the_whole_set():
    """A metric fed through metric_inputs is not known to be a per-sample mean: every check
    reads all the data, no final check, and the report says so."""
    sym, args, batches = planted(n=100)
    _, _, _, report = auto_convert_model(sym, args, {}, target_dtype="float16", eval_data=batches,
                                         metric=mx.metric.Accuracy(),
                                         metric_inputs=lambda labels, outs: (labels, outs),
                                         max_drop=0.05, workers=1, quiet=True)
    assert [k.name for k in report.kept_fp32] == ["fc_c"]
    assert "final" not in [s.kind for s in report.steps]
    # every pass over the data (the float32 one and each check's) is a whole one
    checks = [s for s in report.steps if s.passed is not None]
    assert len(report.pass_seconds) == len(checks) + 1
    assert report.sample_evaluations == len(report.pass_seconds) * 100
    assert any("not a mean of per-sample scores" in note for note in report.notes)
