"""The measured part of the accuracy search (mxnet_amp.auto.bisection): prefixes of a fixed
candidate order, the bisection per culprit and the shortest passing prefix of a ranking, on a
fake check that passes exactly when every planted culprit is kept, so the culprits found and
the executions spent are known exactly."""
import math
from types import SimpleNamespace

from mxnet_amp.auto.bisection import Prefixes, along_ranking, bisect, known_failing


class FakeRuns:
    """The part of :class:`~mxnet_amp.auto.runner.Runs` the search uses: a configuration
    passes when it keeps every culprit in float32; its error is the number of culprits it
    leaves in low precision (0.5 of the tolerance once none is left). Cached like Runs, so
    ``executions`` counts distinct configurations checked."""

    accuracy_reason = "accuracy"

    def __init__(self, culprits, max_executions=None):
        self.culprits = frozenset(culprits)
        self.max_executions = max_executions
        self.executions = 0
        self.results = {}
        self.kinds = []

    @property
    def budget_left(self):
        return self.max_executions is None or self.executions < self.max_executions

    def check(self, excluded, kind):
        if excluded not in self.results:
            self.executions += 1
            self.kinds.append(kind)
            missing = len(self.culprits - excluded)
            ratio = float(missing) if missing else 0.5
            self.results[excluded] = SimpleNamespace(passed=not missing, tolerance_ratio=ratio,
                                                     relative_error=0.01 * ratio,
                                                     max_abs_error=ratio)
        hit = self.results[excluded]
        return hit.passed, hit.tolerance_ratio, hit.max_abs_error

    def criterion_words(self):
        return "relative error <= 0.01"

    def verdict_words(self, excluded):
        return f"relative error {self.results[excluded].relative_error:.3g}"


def prefixes(runs, cands, base=frozenset()):
    """Prefixes over ``cands`` of a graph whose nodes are the candidates (ops ``FullyConnected``)."""
    original = SimpleNamespace(nodes=[SimpleNamespace(name=n, op="FullyConnected") for n in cands])
    return Prefixes(runs, original, base, cands, [])


def test_bisect_finds_each_culprit_within_its_bound():
    """k culprits among N candidates: exactly them, in at most one all-float32 check plus
    ``k (ceil(log2 N) + 1)`` executions, and the configuration returned passed."""
    cands = [f"n{i}" for i in range(64)]
    culprits = {"n3", "n17", "n40"}
    runs = FakeRuns(culprits)
    runs.check(frozenset({"user"}), "check")      # the failed check that starts the search
    p = prefixes(runs, cands, base=frozenset({"user"}))
    config, kept = bisect(p)
    assert config == frozenset({"user"} | culprits) and runs.results[config].passed
    assert set(kept) == culprits and all(k.reason == "accuracy" for k in kept.values())
    assert "took the check from relative error 0.01 to relative error 0.005" in kept["n40"].detail
    k, n = len(culprits), len(cands)
    assert runs.executions - 1 <= 1 + k * (math.ceil(math.log2(n)) + 1)
    assert set(runs.kinds[1:]) == {"all-fp32", "bisect"}


def test_along_ranking_stops_at_the_shortest_passing_prefix():
    """The ranking's first pick failed; the last culprit needed is ranked m = 11th: the
    prefix of 11 is returned, found in at most ``2 ceil(log2 m)`` executions, every node
    before it kept with its rank and the last one measured."""
    cands = [f"n{i}" for i in range(100)]
    culprits = {"n0", "n2", "n5", "n10"}
    runs = FakeRuns(culprits)
    p = prefixes(runs, cands)
    runs.check(p.config(1), "validate")            # the failed picks
    estimates = {n: 0.1 for n in cands}
    config, kept = along_ranking(p, known_failing(p, frozenset({"n0"})), estimates)
    assert config == frozenset(cands[:11]) and runs.results[config].passed
    assert set(kept) == set(cands[:11])
    assert "measured" in kept["n10"].detail
    assert kept["n4"].detail.startswith("ranked 5 by the attribution") and kept["n4"].value == 0.1
    assert runs.executions - 1 <= 2 * math.ceil(math.log2(11))
    assert set(runs.kinds[1:]) == {"prefix"}


def test_known_failing_counts_only_picks_measured_to_fail_at_the_front():
    """The failed picks count as a failing prefix only when they lead the candidates and
    that configuration was measured to fail; else the search starts from nothing kept."""
    runs = FakeRuns({"c"})
    p = prefixes(runs, ["a", "b", "c", "d"])
    assert known_failing(p, frozenset({"a", "b"})) == 0           # not measured yet
    runs.check(p.config(2), "validate")
    assert known_failing(p, frozenset({"a", "b"})) == 2
    assert known_failing(p, frozenset({"b", "c"})) == 0           # not the front
    assert known_failing(p, frozenset()) == 0
    runs.check(p.config(3), "validate")
    assert known_failing(p, frozenset({"a", "b", "c"})) == 0      # measured, but it passed


def test_budget_out_keeps_the_undecided_candidates_of_a_passing_configuration():
    """With the budget spent mid-bisection the search returns the shortest prefix it saw
    pass, its candidates kept for the budget, and says so in the notes."""
    cands = [f"n{i}" for i in range(32)]
    runs = FakeRuns({"n7"}, max_executions=3)
    runs.check(frozenset(), "check")
    p = prefixes(runs, cands)
    config, kept = bisect(p)
    assert runs.executions == 3 and runs.results[config].passed
    assert "n7" in config and len(config) < len(cands)
    assert {k.reason for k in kept.values()} == {"budget"} and set(kept) == set(config)
    assert any("budget" in n for n in p.notes)


def test_a_check_that_fails_even_all_float32_returns_the_base():
    """When keeping every candidate fails too (a culprit outside the candidates), nothing
    passed: the base is returned, no culprit, one execution past the first, and a note."""
    runs = FakeRuns({"elsewhere"})
    runs.check(frozenset(), "check")
    p = prefixes(runs, ["a", "b", "c"])
    assert bisect(p) == (frozenset(), {})
    assert along_ranking(prefixes(runs, ["a", "b"]), 1, {}) == (frozenset(), {})
    assert runs.executions == 3
    assert any("even with every low precision node kept in float32" in n for n in p.notes)
