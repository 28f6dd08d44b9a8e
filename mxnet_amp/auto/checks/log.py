"""The search log: every execution of an automatic search, the check of each configuration
and what the report says of them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...ir.dtypes import LOW_PRECISION
from ..kept import all_kept
from ..records import AutoReport, KeptNode, NodeError, OutputCheck, SearchStep

if TYPE_CHECKING:
    from ...record import Conversion
    from .config import RunConfig

__all__ = ["SearchLog"]


@dataclass
class SearchLog:
    """What the runs of one search wrote: executions (model runs, a pass over evaluation data
    counting one), the steps in order, each configuration's check (the cache), the user
    metric's figures per configuration, and how the kept set was shown 1-minimal."""

    executions: int = 0
    steps: list[SearchStep] = field(default_factory=list)
    results: dict[frozenset, OutputCheck] = field(default_factory=dict)
    metric_values: dict[frozenset, dict] = field(default_factory=dict)
    minimality: str | None = None
    # the configurations whose verdict a subset of the evaluation data gave (not the whole set)
    partial: set[frozenset] = field(default_factory=set)

    def budget_left(self, max_executions: int | None) -> bool:
        """Whether another execution fits ``max_executions`` (None: no budget)."""
        return max_executions is None or self.executions < max_executions

    def forget_partial(self) -> None:
        """Drop every verdict a subset of the evaluation data gave (the search goes on with
        each configuration checked on the whole set)."""
        for excluded in self.partial:
            self.results.pop(excluded, None)
            self.metric_values.pop(excluded, None)
        self.partial.clear()

    def step(self, kind: str) -> None:
        """Log a run that checks nothing (the float32 reference, the attribution)."""
        self.steps.append(SearchStep(kind, 0, None, None, None))

    def record(self, excluded: frozenset, kind: str, result: OutputCheck) -> OutputCheck:
        """Cache and log the check of ``excluded``; returns ``result``."""
        self.results[excluded] = result
        self.steps.append(SearchStep(kind, len(excluded), result.passed, result.tolerance_ratio,
                                     result.max_abs_error, result.relative_error,
                                     result.top1_flips))
        return result

    def report(self, config: RunConfig, excluded: frozenset, kept: tuple[KeptNode, ...],
               conversion: Conversion, notes: list[str], reference_finite: bool,
               attribution: tuple[NodeError, ...] = ()) -> AutoReport:
        """The :class:`AutoReport` of the returned model (``excluded`` kept in float32, its
        ``conversion``), from this log and ``config``."""
        result = self.results.get(excluded) or OutputCheck(
            "scale" if config.settings.rtol is None else "allclose", False, math.inf, math.inf,
            math.inf, 0, 0)
        nodes = [n for n in conversion.original.nodes if not n.is_variable]
        return AutoReport(
            target_dtype=config.options.target_dtype, execution=config.execution,
            context=str(config.ctx),
            # every node computing in float32 and why: the search's, the caller's, the
            # weight-range guard's, ... (mxnet_amp.auto.kept)
            kept_fp32=all_kept(kept, conversion), executions=self.executions,
            validated=result.passed,
            tolerance_ratio=result.tolerance_ratio, max_abs_error=result.max_abs_error,
            rtol=config.settings.rtol, atol=config.settings.atol,
            # the graph converted (BatchNorms folded by default), as low_precision_nodes counts
            op_nodes=len(nodes),
            low_precision_nodes=sum(1 for n in nodes
                                    if conversion.result.node_dtypes.get(n.name) in LOW_PRECISION),
            criterion=result.criterion,
            tolerance=config.settings.tolerance if result.criterion == "scale" else None,
            relative_error=result.relative_error, top1_flips=result.top1_flips,
            top1_rows=result.top1_rows, steps=tuple(self.steps), notes=tuple(notes),
            reference_finite=reference_finite, attribution=attribution,
            metric=self.metric_values.get(excluded), minimality=self.minimality,
            conversion=conversion)
