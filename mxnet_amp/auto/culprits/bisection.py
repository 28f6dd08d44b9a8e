"""The measured part of the accuracy search (step 4 of :mod:`mxnet_amp.auto`): over
candidates in a fixed order, configurations that keep a prefix of them in float32, checked
one execution each (:class:`Prefixes`), and :func:`bisect`: the bisection for the last
candidate that a passing prefix needs, repeated per culprit (at most ``1 + k (ceil(log2 N)
+ 1)`` executions for k culprits among N candidates). In the attribution's order, from its
failed picks (:func:`known_failing`), each culprit after the first is searched for among the
candidates ranked before the last one found.
"""
from __future__ import annotations

from typing import Sequence

from ...ir.graph import Graph
from ..records import KeptNode
from ..runner import Runs


class Prefixes:
    """Configurations ``base | found | cands[:prefix]``, and the culprits kept so far.

    Parameters
    ----------
    runs : Runs
        Executes and caches the checks.
    original : Graph
        The float32 graph (for op names).
    base : frozenset
        The exclusions every configuration keeps.
    cands : sequence of str
        The candidates, in the order searched.
    notes : list of str
        The report's notes, appended to.
    """

    def __init__(self, runs: Runs, original: Graph, base: frozenset, cands: Sequence[str],
                 notes: list[str]) -> None:
        self.runs, self.base, self.cands, self.notes = runs, base, list(cands), notes
        self.ops = {n.name: n.op for n in original.nodes}
        self.found: list[str] = []
        self.kept: dict[str, KeptNode] = {}

    def config(self, prefix: int) -> frozenset:
        """The exclusion set keeping the first ``prefix`` candidates (and what was found)."""
        return self.base | frozenset(self.found) | frozenset(self.cands[:prefix])

    def passes(self, prefix: int, kind: str) -> bool:
        """Check the configuration of ``prefix`` (one execution unless measured before)."""
        return bool(self.runs.check(self.config(prefix), kind).passed)

    def undecided(self, prefix: int) -> tuple[frozenset, dict[str, KeptNode]]:
        """Out of budget: keep the candidates not yet cleared in float32 (that passed)."""
        budget = self.runs.config.settings.max_executions
        self.notes.append(f"the execution budget ({budget}) ran out during the "
                          f"accuracy search; kept {prefix} undecided candidates in float32")
        for name in self.cands[:prefix]:
            self.kept[name] = KeptNode(name, self.ops[name], "budget")
        return self.config(prefix), self.kept

    def measured(self, lo: int, hi: int) -> str:
        """Record ``cands[hi - 1]`` as a culprit: ``config(lo)`` with ``lo = hi - 1`` fails,
        ``config(hi)`` passes (both measured); returns its name."""
        runs, culprit = self.runs, self.cands[hi - 1]
        before, after = runs.log.results[self.config(lo)], runs.log.results[self.config(hi)]
        self.kept[culprit] = KeptNode(
            culprit, self.ops[culprit], runs.config.accuracy_reason,
            float(before.tolerance_ratio - after.tolerance_ratio), culprit,
            f"keeping it float32 took the check from {runs.verdict_words(self.config(lo))} to "
            f"{runs.verdict_words(self.config(hi))} (measured; {runs.config.criterion_words()})")
        return culprit

    def all_fp32_fails(self) -> bool:
        """Whether even every candidate kept in float32 fails (noted; one execution)."""
        if self.passes(len(self.cands), "all-fp32"):
            return False
        self.notes.append("even with every low precision node kept in float32 the check fails: "
                          "validate or the tolerances reject the float32 model itself")
        return True


def bisect(p: Prefixes, lo: int = 0) -> tuple[frozenset, dict[str, KeptNode]]:
    """The bisection: ``config(lo)`` is known to fail; each round finds the last candidate a
    passing prefix needs, keeps it, and starts again below it until ``config(0)`` passes.
    Returns the exclusion set to use (one that was seen to pass, or ``p.base`` when nothing
    passed) and the culprits."""
    runs = p.runs
    if not runs.budget_left:
        p.notes.append("the execution budget ran out before the accuracy search could start")
        return p.base, p.kept
    if p.all_fp32_fails():
        return p.base, p.kept
    hi = len(p.cands)   # config(lo) fails, config(hi) passes (both measured)
    while True:
        while hi - lo > 1 and runs.budget_left:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if p.passes(mid, "bisect") else (mid, hi)
        if hi - lo > 1:
            return p.undecided(hi)
        p.found.append(p.measured(lo, hi))
        p.cands = p.cands[:hi - 1]
        # config(len(cands)) is the configuration that just passed
        if not p.cands:
            return p.config(0), p.kept
        if not runs.budget_left:
            return p.undecided(len(p.cands))
        if p.passes(0, "bisect"):
            return p.config(0), p.kept
        lo, hi = 0, len(p.cands)


def known_failing(p: Prefixes, failed: frozenset) -> int:
    """The longest prefix of ``p.cands`` already measured to fail: the attribution's failed
    picks when they lead the ranking (``failed``), else 0 (the configuration with nothing
    more kept: the check that sent the search here)."""
    prefix = sum(1 for n in p.cands if n in failed)
    if prefix and set(p.cands[:prefix]) <= failed:
        hit = p.runs.log.results.get(p.config(prefix))
        if hit is not None and not hit.passed:
            return prefix
    return 0
