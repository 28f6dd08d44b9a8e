"""Judging a model over evaluation data of any size (``auto_convert_model(eval_data=...)``).

The float32 model runs over the data once (:meth:`DataJudge.reference`): its metric score is
kept, and, when the check compares outputs, its outputs of every batch are written to a
temporary folder (``.npy`` files read back memory-mapped, one batch at a time) and deleted
after; only the first batch's stay in memory. Each configuration tried then runs over the
data (:meth:`DataJudge.judge`): the metric accumulates batch by batch, and closeness is
checked batch by batch against the stored reference. Memory holds the model, its params and
a fixed number of batches, however many there are.
"""
from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np

from ..errors import ArgumentError
from ..files.progress import stage_bar
from .dask_pool import DaskPool
from .measure import check_outputs
from .metrics import validate_passed
from .records import OutputCheck
from .subsets import SubsetPlan, decomposable, drop_bounds, per_sample_scores
from .workers import InProcess, ModelBlob, ProcessPool

if TYPE_CHECKING:
    from mxnet import Context

    from .batches import Batch, BatchSource
    from .task_metric import TaskMetric

__all__ = ["SubsetJudgement", "DataJudge", "merge_checks", "batch_pool", "usable_cores"]


def batch_pool(workers: int | None, ctx: Context | None, client: Any = None,
               batches: int | None = None) -> Any:
    """The pool that runs the batches: a Dask ``client``'s cluster when given, else
    ``workers`` processes here (None: one per core), or this process for one worker or a
    GPU context (a GPU is one device: its batches run here).

    No more processes start than there are cores or ``batches`` (the data's batch count,
    where it is known ahead): each runs whole batches on its own cores, so more only add
    start-up time and memory. ``workers`` above four times the cores is an
    :class:`ArgumentError` (``--workers 1000`` would spawn until the machine gives out)."""
    if client is not None:
        return DaskPool(client)
    cores = usable_cores()
    if workers is None:
        workers = cores
    if workers < 1:
        raise ArgumentError(f"workers must be at least 1, got {workers}")
    if workers > 4 * cores:
        raise ArgumentError(f"workers={workers} on a machine with {cores} cores: each worker "
                            f"process runs batches on cores of its own, so give at most {cores} "
                            "(or leave it out: one per core)")
    workers = min(workers, cores, batches or workers)
    if workers == 1 or (ctx is not None and ctx.device_type != "cpu"):
        return InProcess(ctx)
    return ProcessPool(workers)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system says, which a
    container or ``taskset`` narrows; else every core)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


def merge_checks(checks: Sequence[OutputCheck]) -> OutputCheck:
    """The check of several batches: passes when every batch passes; the largest error
    figures, the top-1 flips and rows summed."""
    if not checks:
        return OutputCheck("scale", False, math.inf, math.inf, math.inf, 0, 0)
    return OutputCheck(checks[0].criterion, all(c.passed for c in checks),
                       max(c.tolerance_ratio for c in checks), max(c.max_abs_error for c in checks),
                       max(c.relative_error for c in checks), sum(c.top1_flips for c in checks),
                       sum(c.top1_rows for c in checks))


class SubsetJudgement(NamedTuple):
    """What :meth:`DataJudge.judge_subset` returns (unpacks as ``(check, score, figures)``)."""

    check: OutputCheck   # the closeness of batch 0
    score: float | None  # the whole set's score; None where a subset decided
    figures: dict        # the subset's figures (``passed``: its verdict); empty for the whole set


class DataJudge:
    """Runs models over a :class:`~mxnet_amp.auto.batches.BatchSource` through ``pool`` and
    judges them (module doc).

    ``metric``: the task metric (its score decides); without it, closeness to the float32
    outputs on every batch decides (``check_outputs``, or the caller's ``validate`` batch
    by batch), and the reference outputs are stored on disk.
    """

    def __init__(self, source: BatchSource, pool: Any, *, target_dtype: str, tolerance: float,
                 rtol: float | None, atol: float | None, metric: TaskMetric | None = None,
                 validate: Callable[[list, list], bool] | None = None,
                 quiet: bool = False) -> None:
        self.source, self.pool = source, pool
        self.target_dtype, self.tolerance, self.rtol, self.atol = target_dtype, tolerance, rtol, atol
        self.metric, self.validate, self.quiet = metric, validate, quiet
        self.keep_all = metric is None
        self.spill_dir: str | None = None
        self.first_reference: list[np.ndarray] | None = None
        self.reference_score: float | None = None
        self.has_reference = False
        self.pass_seconds: list[float] = []
        # samples run through a model, every pass counted (the float32 reference's included)
        self.sample_evaluations = 0
        # a per-sample metric (mxnet_amp.auto.subsets): the float32 score of each row by batch,
        # and the random subsets the search's checks run on (None: every check on all data)
        self.row_scores: dict[int, np.ndarray] = {}
        self.plan: SubsetPlan | None = None

    @property
    def per_sample(self) -> bool:
        """Whether the metric is a mean of per-sample scores (checks can run on subsets)."""
        return decomposable(self.metric)

    def _pass(self, blob: ModelBlob, stage: str, only: frozenset[int] | None = None
              ) -> Iterator[tuple[Batch, list]]:
        batches: Any = self.source
        total = self.source.samples
        if only is not None:
            batches = (b for b in self.source if b.index in only)
            total = None
        bar = stage_bar(stage, total, enabled=not self.quiet)
        start = time.perf_counter()
        try:
            for batch, outs in self.pool.map(blob, batches):
                bar.update(batch.size)
                self.sample_evaluations += batch.size
                yield batch, outs
        finally:
            bar.close()
        self.pass_seconds.append(round(time.perf_counter() - start, 3))

    def _path(self, index: int, k: int) -> str:
        assert self.spill_dir is not None
        return os.path.join(self.spill_dir, f"ref-{index:08d}-{k}.npy")

    def reference(self, blob: ModelBlob, judged: int = 0) -> None:
        """Run the float32 model over the data once: its score, first batch and (checking
        closeness) its outputs per batch on disk. ``judged``: outputs before the heads."""
        metric = self.metric.fresh() if self.metric is not None else None
        if self.keep_all:
            self.spill_dir = tempfile.mkdtemp(prefix="mxnet-amp-reference-")
        for batch, outs in self._pass(blob, "auto: float32 reference"):
            if metric is not None and self.metric is not None:
                self.metric.update(metric, batch.labels, outs[judged:])
                if self.per_sample:
                    self.row_scores[batch.index] = per_sample_scores(self.metric, batch.labels,
                                                                     outs[judged:])
            if batch.index == 0:
                self.first_reference = outs
            if self.keep_all:
                for k, out in enumerate(outs):
                    np.save(self._path(batch.index, k), out)
        if metric is not None and self.metric is not None:
            self.reference_score = self.metric.score(metric)
        self.has_reference = True

    def stored_reference(self, index: int, count: int) -> list[np.ndarray]:
        """The float32 outputs of batch ``index``, memory-mapped from disk."""
        return [np.load(self._path(index, k), mmap_mode="r") for k in range(count)]

    def stored_files(self) -> int:
        """How many reference files are on disk now."""
        return len(os.listdir(self.spill_dir)) if self.spill_dir else 0

    def judge(self, blob: ModelBlob, judged: int = 0, stage: str = "auto: check"
              ) -> tuple[OutputCheck, float | None]:
        """Run ``blob`` over the data: ``(closeness check, metric score or None)``. The
        check covers every batch when closeness decides, else the first (its figures only)."""
        assert self.has_reference and self.first_reference is not None, "reference first"
        metric = self.metric.fresh() if self.metric is not None else None
        checks: list[OutputCheck] = []
        for batch, outs in self._pass(blob, stage):
            if metric is not None and self.metric is not None:
                self.metric.update(metric, batch.labels, outs[judged:])
            if self.keep_all:
                checks.append(self._closeness(self.stored_reference(batch.index, len(outs)),
                                              outs, judged))
            elif batch.index == 0:
                checks.append(self._closeness(self.first_reference, outs, judged))
        score = self.metric.score(metric) if metric is not None and self.metric else None
        return merge_checks(checks), score

    def plan_subsets(self, allowed: float) -> SubsetPlan | None:
        """After the reference pass: the rounds of random batches the search's checks run on
        (:class:`~mxnet_amp.auto.subsets.SubsetPlan`), a drop of ``allowed`` allowed; None
        where the metric is no per-sample mean (every check then reads all the data)."""
        assert self.has_reference and self.source.batches is not None
        if self.per_sample and self.source.samples:
            self.plan = SubsetPlan.of(self.source.batches, self.source.samples, allowed)
        return self.plan

    def judge_subset(self, blob: ModelBlob, allowed: float, judged: int = 0,
                     stop_on_pass: bool = True, stage: str = "auto: check on a subset"
                     ) -> SubsetJudgement:
        """Run ``blob`` round by round over :attr:`plan`'s subsets until the paired bound
        decides (module doc of :mod:`mxnet_amp.auto.subsets`): the closeness of batch 0,
        the whole set's score or None, the figures; the figures' ``passed`` is the verdict,
        ``samples`` how many it read (the whole set: the score decides instead).
        ``stop_on_pass`` False: only a failure stops early (a pass is the whole set's)."""
        assert self.plan is not None and self.metric is not None and self.first_reference is not None
        plan, task = self.plan, self.metric
        metric = task.fresh()
        diffs: list[np.ndarray] = []
        checks: list[OutputCheck] = []
        figures: dict = {}
        for k in range(len(plan.rounds)):
            for batch, outs in self._pass(blob, stage, only=plan.round_batches(k)):
                task.update(metric, batch.labels, outs[judged:])
                diffs.append(self.row_scores[batch.index]
                             - per_sample_scores(task, batch.labels, outs[judged:]))
                if batch.index == 0:
                    checks.append(self._closeness(self.first_reference, outs, judged))
            if plan.rounds[k] == len(plan.order):
                return SubsetJudgement(merge_checks(checks), task.score(metric), {})
            d = np.concatenate(diffs)
            mean, low, high = drop_bounds(d, int(self.source.samples or len(d)))
            figures = {"samples": len(d), "drop": mean, "lower": low, "upper": high,
                       "allowed": allowed}
            if low > allowed or (stop_on_pass and high <= allowed):
                figures["passed"] = bool(high <= allowed)
                return SubsetJudgement(merge_checks(checks), None, figures)
        raise AssertionError("the last round covers every batch")   # pragma: no cover

    def _closeness(self, reference: list, outs: list, judged: int) -> OutputCheck:
        count = judged or len(outs)
        ref = [np.asarray(r) for r in reference[:count]]
        result = check_outputs(ref, outs[:count], self.target_dtype, self.tolerance,
                               self.rtol, self.atol)
        passed = result.passed
        if judged:   # outputs past NMS/top-k: only asked to stay finite where float32 is
            passed = passed and all(
                o.shape == r.shape and np.isfinite(o[np.isfinite(r)]).all()
                for r, o in zip(reference[judged:], outs[judged:]))
        if self.validate is not None:
            passed = validate_passed(self.validate([r.copy() for r in ref], outs[:count]))
        return OutputCheck(result.criterion, passed, result.tolerance_ratio,
                           result.max_abs_error, result.relative_error, result.top1_flips,
                           result.top1_rows)

    def close(self) -> None:
        """Delete the stored reference outputs and stop the pool."""
        if self.spill_dir is not None:
            shutil.rmtree(self.spill_dir, ignore_errors=True)
            self.spill_dir = None
        self.pool.close()
        self.source.close()
