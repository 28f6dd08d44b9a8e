"""The measured part of the accuracy search (mxnet_amp.auto.culprits.bisection): prefixes of a fixed
candidate order, the bisection per culprit and the shortest passing prefix of a ranking, on a
fake check that passes exactly when every planted culprit is kept, so the culprits found and
the executions spent are known exactly (tests/support/fake_checks.py)."""
import math
from types import SimpleNamespace

from fake_checks import FakeRuns

from mxnet_amp.auto.culprits.bisection import Prefixes, bisect, known_failing


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
    assert config == frozenset({"user"} | culprits) and runs.log.results[config].passed
    assert set(kept) == culprits and all(k.reason == "accuracy" for k in kept.values())
    assert "took the check from relative error 0.01 to relative error 0.005" in kept["n40"].detail
    k, n = len(culprits), len(cands)
    assert runs.log.executions - 1 <= 1 + k * (math.ceil(math.log2(n)) + 1)
    assert set(runs.kinds[1:]) == {"all-fp32", "bisect"}


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
    assert runs.log.executions == 3 and runs.log.results[config].passed
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
    assert runs.log.executions == 2
    assert any("even with every low precision node kept in float32" in n for n in p.notes)
