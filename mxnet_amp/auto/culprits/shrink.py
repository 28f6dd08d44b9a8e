"""Shrinking a kept set that validates to a 1-minimal one (delta debugging over the
attribution's ranking).

Whatever proposed the set (the attribution's picks, a prefix of its ranking, the bisection),
the set returned keeps in float32 only nodes that are measured to be needed: returning any
single one of them to low precision fails the check. Two phases, both over ``base | kept``
configurations (``base``: what every configuration keeps, the range culprits and the caller's
exclusions; measured to fail on its own: the check that started the accuracy search):

* **groups** (only for a set larger than :func:`singles_first` allows): the bisection
  inside the set, in its ranked order, most suspicious first: the shortest passing prefix
  (dropping halves of the tail), its last node needed, then again inside the prefix before
  it with the nodes found kept, until the found nodes alone pass. ``k`` needed nodes among
  ``s`` cost at most ``k (ceil(log2 s) + 1)`` executions; a set holding only needed nodes
  would cost more than testing each, so small sets skip this phase;
* **singles**: each kept node, least suspicious first, returned to low precision alone;
  where that still passes it goes. A pass over the set that removes nothing is the proof
  of 1-minimality: every kept node was measured to fail alone *on the set returned*
  (nodes measured on a larger set, before a later removal, are measured again). A set of
  ``s`` nodes of which ``k`` are needed costs at most ``s + k`` executions when the check
  is monotone (keeping more in float32 never fails where keeping less passes), ``s`` when
  the needed nodes rank first; configurations measured before are not run again (the
  caller's cache), so a single culprit costs nothing: without it, ``base`` was measured.

The check may be non-monotone (a user ``validate``, top-1 flips on ties); the singles phase
repeats until a pass removes nothing, so the result is 1-minimal whatever the check, or the
budget ran out first and :attr:`Shrunk.shown` says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

__all__ = ["Checks", "Shrunk", "shrink", "singles_first", "verify_singles", "group_search"]


class Checks(Protocol):
    """What the shrinking needs of :class:`~mxnet_amp.auto.runner.Runs`: a cached check of a
    configuration (an object with ``passed``), the budget, and its ``log``
    (:class:`~mxnet_amp.auto.checks.log.SearchLog`: the executions so far and each
    configuration's check)."""

    @property
    def log(self) -> Any:
        """``executions`` (so far) and ``results`` (configuration -> its check)."""

    @property
    def budget_left(self) -> bool:
        """Whether another execution is allowed."""

    def check(self, excluded: frozenset, kind: str) -> Any:
        """The check of ``excluded`` kept in float32 (cached per configuration)."""


@dataclass(frozen=True)
class Shrunk:
    """A shrunk set: ``kept`` (ranked as given) passes with ``base``; ``shown``: each kept
    node was measured to fail alone on this very set (1-minimal); ``executions``: what the
    shrinking ran (cached configurations not counted); ``dropped``: the nodes it removed."""

    kept: tuple[str, ...]
    shown: bool
    executions: int
    dropped: tuple[str, ...] = ()

    def text(self) -> str:
        """How minimality was shown, in words (the report's note)."""
        n = len(self.kept)
        runs = f"{self.executions} execution{'s' if self.executions != 1 else ''}"
        if not self.shown:
            return (f"not shown 1-minimal: the execution budget ran out while shrinking "
                    f"({n} kept, {runs})")
        dropped = (f"; {len(self.dropped)} node{'s' if len(self.dropped) != 1 else ''} "
                   "proposed but not needed dropped" if self.dropped else "")
        if n == 1:
            return f"1-minimal: the kept node fails alone ({runs}){dropped}"
        return f"1-minimal: each of the {n} kept nodes fails alone ({runs}){dropped}"


def singles_first(size: int) -> bool:
    """Whether a set of ``size`` nodes is tested node by node at once (``size`` checks at
    most) rather than bisected first: when testing each costs no more than the bisection would
    if half of them were needed (``size <= 2 (ceil(log2 size) + 1)``: up to 10 nodes)."""
    return size <= 2 * (math.ceil(math.log2(max(size, 1))) + 1)


def group_search(runs: Checks, base: frozenset, ranked: Sequence[str]) -> list[str] | None:
    """The groups phase (module doc): the nodes of ``ranked`` the bisection finds needed, in
    ranked order, whose configuration was measured to pass; None when the budget ran out
    (``base | ranked`` passes, ``base`` fails: both measured, as the caller knows)."""
    found: list[str] = []
    cands = list(ranked)
    lo, hi = 0, len(cands)

    def config(prefix: int) -> frozenset:
        return base | frozenset(found) | frozenset(cands[:prefix])

    def passes(prefix: int) -> bool:
        return bool(runs.check(config(prefix), "shrink").passed)

    while True:
        known = runs.log.results.get(config(hi - 1)) if hi - lo > 1 else None
        if known is not None and not known.passed:
            lo = hi - 1   # measured before (the bisection's last failing prefix): no search
        while hi - lo > 1 and runs.budget_left:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if passes(mid) else (mid, hi)
        if hi - lo > 1:
            return None
        found.append(cands[hi - 1])
        cands = cands[:hi - 1]
        if not cands:
            break
        if not runs.budget_left:
            return None
        if passes(0):
            break
        lo, hi = 0, len(cands)
    order = {name: i for i, name in enumerate(ranked)}
    return sorted(found, key=order.__getitem__)


def verify_singles(runs: Checks, base: frozenset, kept: Sequence[str]) -> tuple[list[str], bool]:
    """The singles phase (module doc): ``(kept, shown)``, the nodes whose removal alone still
    passed dropped, least suspicious (last ranked) first."""
    kept = list(kept)
    measured: dict[str, frozenset] = {}   # node -> the set its removal was measured to fail on
    while True:
        removed = False
        for name in reversed(list(kept)):
            current = frozenset(kept)
            if measured.get(name) == current:
                continue
            config = base | (current - {name})
            if config not in runs.log.results and not runs.budget_left:
                return kept, False
            if runs.check(config, "shrink").passed:
                kept.remove(name)
                removed = True
            else:
                measured[name] = current
        current = frozenset(kept)
        if not removed or all(measured.get(n) == current for n in kept):
            return kept, all(measured.get(n) == current for n in kept)


def shrink(runs: Checks, base: frozenset, ranked: Sequence[str]) -> Shrunk:
    """``ranked`` (most suspicious first; ``base | ranked`` measured to pass, ``base`` to
    fail) shrunk to a 1-minimal set (module doc)."""
    start = runs.log.executions
    kept: list[str] | None = list(dict.fromkeys(ranked))
    if kept and not singles_first(len(kept)):
        kept = group_search(runs, base, kept)
        if kept is None:   # budget out: the whole set passed (measured)
            return Shrunk(tuple(ranked), False, runs.log.executions - start)
    assert kept is not None
    final, shown = verify_singles(runs, base, kept)
    dropped = tuple(n for n in ranked if n not in set(final))
    return Shrunk(tuple(final), shown, runs.log.executions - start, dropped)
