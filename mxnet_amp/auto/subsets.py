"""Cheap searches, one full verdict: the search's checks over evaluation data run on random
subsets of its batches, sized by a paired test against the float32 pass.

With a metric that is a mean of per-sample scores in [0, 1] (``mx.metric.Accuracy``,
``TopKAccuracy``: per-sample correctness), the float32 pass over the whole set records each
sample's score. A configuration is then run on a growing random subset of the batches
(:class:`SubsetPlan`: rounds of a fixed random batch order, the first sized so that a
configuration changing nothing can pass, each next one twice as large, up to the whole set),
and after each round the paired differences ``d_i = float32_i - candidate_i`` (for accuracy:
the discordant pairs, as McNemar's test counts them) bound the drop the whole set would show
(:func:`drop_bounds`): a one-sided 95% bound each way (normal approximation, corrected for the
finite population, one pseudo discordant pair added so that a subset with none still has a
width). The configuration passes once the upper bound is within the allowed drop, fails once
the lower bound is beyond it, and is judged exactly once the subset is the whole set.

A subset verdict is a statistical one; the search's returned candidate is therefore checked
once more on the whole set (:meth:`~mxnet_amp.auto.runner.Runs.full_check`), and the search
goes on from it on the whole set where that fails (:func:`mxnet_amp.auto.search`).
Other metrics (mAP, F1, RMSE, a ``metric_inputs`` mapping, closeness without a metric) are not
per-sample means here: every check runs on the whole set, and the report says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import numpy as np

__all__ = ["SubsetPlan", "DropBounds", "drop_bounds", "per_sample_scores", "decomposable", "Z_95",
           "allowed_drop", "subset_figures"]

# one-sided 95% normal quantile: each subset verdict's confidence
Z_95 = 1.6448536269514722
# metrics whose value is the mean of a per-sample score in [0, 1]
_PER_SAMPLE = ("Accuracy", "TopKAccuracy")
# the first round is at least this share of the batches: below it, the rounds a configuration
# near the bound needs cost more passes than they save
_FIRST_SHARE = 1 / 16


def decomposable(task: Any) -> bool:
    """Whether the task metric (:class:`~mxnet_amp.auto.task_metric.TaskMetric`) is a mean of
    per-sample scores in [0, 1] that :func:`per_sample_scores` can read."""
    return (task is not None and task.metric_inputs is None
            and type(task.metric).__name__ in _PER_SAMPLE)


def per_sample_scores(task: Any, labels: Sequence[np.ndarray], outputs: Sequence[np.ndarray]
                      ) -> np.ndarray:
    """Each row's score: the metric (MXNet's own ``update``, so its conventions hold) fed
    that row alone."""
    rows = int(np.asarray(outputs[0]).shape[0])
    metric = task.fresh()
    scores = np.empty(rows, dtype=np.float64)
    for i in range(rows):
        metric.reset()
        task.update(metric, [lab[i:i + 1] for lab in labels], [o[i:i + 1] for o in outputs])
        scores[i] = float(np.nan_to_num(metric.get()[1], nan=0.0))
    return scores


class DropBounds(NamedTuple):
    """The whole set's mean drop and its confidence bounds (unpacks as ``(mean, lower, upper)``)."""

    mean: float
    lower: float
    upper: float


def drop_bounds(diffs: np.ndarray, population: int, z: float = Z_95) -> DropBounds:
    """The mean drop and its bounds, of the whole set's mean drop from the paired differences
    ``diffs`` of a random subset of ``population`` samples (module doc). At the whole set the
    bounds are the mean itself."""
    n = len(diffs)
    mean = float(np.mean(diffs)) if n else 0.0
    if n == 0:
        return DropBounds(mean, -math.inf, math.inf)
    # the variance of d, one pseudo discordant pair added (a subset with none has a width)
    var = float(np.mean((diffs - mean) ** 2)) + 1.0 / n
    fpc = max(0.0, 1.0 - n / population) if population else 0.0
    half = z * math.sqrt(var / n * fpc)
    return DropBounds(mean, mean - half, mean + half)


def allowed_drop(check: Any) -> float:
    """The drop in score units a :class:`~mxnet_amp.auto.metrics.MetricCheck` allows (a
    relative drop as a share of the float32 score)."""
    assert check.reference_score is not None
    if check.drop == "relative":
        return float(check.max_drop * abs(check.reference_score))
    return float(check.max_drop)


def subset_figures(check: Any, figures: dict) -> dict:
    """The report's metric figures of a subset verdict (``figures`` of
    :meth:`~mxnet_amp.auto.evaluation.DataJudge.judge_subset`) under ``check``: the mean drop
    measured on the subset (in the criterion's units, as ``MetricCheck.last``; ``value`` the
    float32 score less it: an estimate), its bounds in score units and the samples read."""
    reference = float(check.reference_score)
    drop = figures["drop"]
    if check.drop == "relative":
        drop = drop / abs(reference) if reference else (0.0 if drop <= 0 else math.inf)
    return {"name": check.name, "reference": reference, "value": reference - figures["drop"],
            "drop": drop, "max_drop": check.max_drop, "criterion": check.drop,
            "passed": figures["passed"], "subset_samples": figures["samples"],
            "drop_bounds": (figures["lower"], figures["upper"]),
            "allowed_drop": figures["allowed"]}


@dataclass(frozen=True)
class SubsetPlan:
    """The batches of each round: a fixed random order of the ``batches`` (the same for every
    configuration, so that their subsets are paired too), the first round holding at least
    ``first`` samples' worth of batches, each next one twice as many, the last the whole set."""

    order: tuple[int, ...]
    rounds: tuple[int, ...]     # batches covered after each round, the last = len(order)

    @classmethod
    def of(cls, batches: int, samples: int, allowed: float, seed: int = 0) -> SubsetPlan:
        """The plan for ``batches`` batches of ``samples`` rows, a drop of ``allowed`` allowed:
        the first round twice the samples with which no discordance passes (``z / allowed``)."""
        # batch 0 first: the report's closeness figures are the first batch's
        rest = 1 + np.random.RandomState(seed).permutation(max(batches - 1, 0))
        order = (0,) + tuple(int(i) for i in rest)
        need = 2 * Z_95 / allowed if allowed > 0 else math.inf
        share = min(1.0, max(_FIRST_SHARE, need / max(samples, 1)))
        count = max(1, math.ceil(share * batches))
        rounds = []
        while count < batches:
            rounds.append(count)
            count *= 2
        rounds.append(batches)
        return cls(order, tuple(rounds))

    def round_batches(self, k: int) -> frozenset[int]:
        """The batch indices round ``k`` adds."""
        start = self.rounds[k - 1] if k else 0
        return frozenset(self.order[start:self.rounds[k]])

    @property
    def first_share(self) -> float:
        """The share of the batches the first round runs."""
        return self.rounds[0] / len(self.order)
