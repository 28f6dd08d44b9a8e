"""The user's own metric as the automatic mode's check (``auto_convert_model(metric=...)``,
``mxnet-amp auto --eval-data``): a configuration passes when the task score it gets on
labelled data drops by at most ``max_drop`` from the float32 model's, absolute or relative
(as Intel Neural Compressor's ``accuracy_criterion``)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import ArgumentError

__all__ = ["MetricCheck", "builtin_metric", "METRICS", "DROPS", "validate_passed"]

METRICS = ("top1", "top5", "mse")
DROPS = ("absolute", "relative")


def _top(k: int, labels: np.ndarray) -> Callable[[list], float]:
    labels = np.asarray(labels).astype(np.int64).ravel()

    def score(outputs: list) -> float:
        logits = np.asarray(outputs[0]).reshape(len(labels), -1)
        best = np.argsort(-np.nan_to_num(logits, nan=-np.inf), axis=1)[:, :k]
        return 100.0 * float(np.mean((best == labels[:, None]).any(axis=1)))
    score.__name__ = f"top{k}"
    return score


def _mse(targets: np.ndarray) -> Callable[[list], float]:
    targets = np.asarray(targets, dtype=np.float64)

    def score(outputs: list) -> float:
        out = np.asarray(outputs[0], dtype=np.float64).reshape(targets.shape)
        return -float(np.mean((out - targets) ** 2))   # higher is better: minus the loss
    score.__name__ = "mse"
    return score


def builtin_metric(name: str, labels: np.ndarray) -> Callable[[list], float]:
    """``'top1'`` / ``'top5'`` (percent of rows whose label is among the first output's top
    k classes) or ``'mse'`` (minus the mean squared error of the first output to
    ``labels``), as a score function of the model outputs (higher is better)."""
    if name == "top1":
        return _top(1, labels)
    if name == "top5":
        return _top(5, labels)
    if name == "mse":
        return _mse(labels)
    raise ArgumentError(f"metric must be one of {METRICS} or a callable, got {name!r}")


@dataclass
class MetricCheck:
    """``validate(reference, outputs)`` from a score function: passes when the score of
    ``outputs`` is at most ``max_drop`` below the reference's (``drop='relative'``: that
    fraction of it). ``last`` holds the figures of the latest call."""

    metric: Callable[[list], float]
    max_drop: float
    drop: str = "absolute"
    name: str = "metric"
    reference_score: float | None = None
    last: dict | None = None
    # an EvalMetric scoring whole passes over eval_data (mxnet_amp.auto.task_metric), when
    # the metric is one: ``metric`` is then not called on outputs
    task: Any = None

    def __post_init__(self) -> None:
        if self.drop not in DROPS:
            raise ArgumentError(f"drop must be one of {DROPS}, got {self.drop!r}")
        if not (self.max_drop >= 0 and math.isfinite(self.max_drop)):
            raise ArgumentError(f"max_drop must be finite and >= 0, got {self.max_drop}")

    def __call__(self, reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> bool:
        if self.reference_score is None:
            self.reference_score = float(self.metric(list(reference)))
        return self.compare(float(self.metric(list(outputs))))

    def compare(self, value: float) -> bool:
        """Whether ``value`` passes against ``reference_score`` (set first); ``last`` holds
        the figures."""
        assert self.reference_score is not None, "the float32 score first"
        drop = self.reference_score - value
        if self.drop == "relative":
            drop = drop / abs(self.reference_score) if self.reference_score else \
                (0.0 if drop <= 0 else math.inf)
        passed = bool(math.isfinite(value) and drop <= self.max_drop)
        self.last = {"name": self.name, "reference": self.reference_score, "value": value,
                     "drop": drop, "max_drop": self.max_drop, "criterion": self.drop,
                     "passed": passed}
        return passed


def validate_passed(value: object) -> bool:
    """What a caller's ``validate()`` returned, as the pass/fail it means: a bool (Python's
    or numpy's), or a finite number read as one. ``bool(nan)`` is True, so a NaN (a score
    computed from NaN outputs) would pass; it, None and anything else is an
    :class:`ArgumentError` saying what came back."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, float, np.integer, np.floating)) and math.isfinite(float(value)):
        return bool(value)
    raise ArgumentError(f"validate() must return True or False, got {value!r}"
                        + (" (a NaN score is no pass: check the outputs it was given for NaN)"
                           if isinstance(value, (float, np.floating)) else ""))
