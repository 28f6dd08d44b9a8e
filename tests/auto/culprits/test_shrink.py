"""Shrinking a kept set to a 1-minimal one (mxnet_amp.auto.culprits.shrink), and the
accuracy search's policy as mxnet_amp.auto.search composes it (the attribution's picks
validated and shrunk, else the bisection in its order from the failed picks, then shrunk),
on fake checks with planted culprit sets (tests/support/fake_checks.py): the set found is
exactly the culprits, 1-minimal, within the execution bounds of docs/emulation_and_auto.md
("Execution bounds"), for random rankings, adversarial ones included."""
import math
from types import SimpleNamespace

from fake_checks import FakeRuns
from hypothesis import given, settings, strategies as st

from mxnet_amp.auto.culprits.bisection import Prefixes, bisect, known_failing
from mxnet_amp.auto.culprits.shrink import Shrunk, group_search, shrink, singles_first, verify_singles


def names(n):
    return [f"n{i}" for i in range(n)]


def test_exact_picks_cost_one_check_per_node_and_one_culprit_costs_nothing():
    """Picks that are exactly the culprits: each returned alone to low precision fails,
    measured, k checks (with one culprit, that configuration is ``base``: measured before)."""
    for k in (1, 2, 4, 8):
        culprits = names(k)
        runs = FakeRuns(culprits)
        runs.check(frozenset({"range"}), "check")
        runs.check(frozenset({"range", *culprits}), "validate")
        before = runs.log.executions
        shrunk = shrink(runs, frozenset({"range"}), culprits)
        assert shrunk.kept == tuple(culprits) and shrunk.shown and not shrunk.dropped
        assert shrunk.executions == runs.log.executions - before == (0 if k == 1 else k)
        assert set(runs.kinds[2:]) <= {"shrink"}


def test_extra_picks_are_dropped_least_suspicious_first():
    """Picks holding the 2 culprits and 5 harmless nodes: the harmless go, the culprits stay,
    within ``s + k`` executions, and the text says how minimality was shown."""
    picks = ["c1", "h1", "c2", "h2", "h3", "h4", "h5"]
    runs = FakeRuns({"c1", "c2"})
    runs.check(frozenset(), "check")
    runs.check(frozenset(picks), "validate")
    shrunk = shrink(runs, frozenset(), picks)
    assert shrunk.kept == ("c1", "c2") and shrunk.dropped == ("h1", "h2", "h3", "h4", "h5")
    assert shrunk.executions <= len(picks) + 2
    assert runs.one_minimal(frozenset(), shrunk.kept)
    assert shrunk.text() == (f"1-minimal: each of the 2 kept nodes fails alone "
                             f"({shrunk.executions} executions); 5 nodes proposed but not "
                             "needed dropped")


def test_a_large_set_is_bisected_before_the_singles():
    """116 nodes kept, 3 of them needed (the issue's chain): the groups phase first, at most
    ``k (ceil(log2 s) + 1) + k`` executions, not one per node."""
    kept = names(116)
    culprits = {"n5", "n60", "n101"}
    runs = FakeRuns(culprits)
    runs.check(frozenset(), "check")
    runs.check(frozenset(kept), "prefix")
    assert not singles_first(len(kept)) and singles_first(10) and not singles_first(11)
    shrunk = shrink(runs, frozenset(), kept)
    assert set(shrunk.kept) == culprits and shrunk.shown
    assert shrunk.executions <= 3 * (math.ceil(math.log2(116)) + 1) + 3


def test_group_search_reads_a_failing_prefix_measured_before():
    """The bisection measured ``kept[:-1]`` to fail: its last node is needed, no search."""
    runs = FakeRuns({"a", "d"})
    runs.check(frozenset(), "check")
    runs.check(frozenset("abcd"), "prefix")
    runs.check(frozenset("abc"), "prefix")
    before = runs.log.executions
    assert group_search(runs, frozenset(), list("abcd")) == ["a", "d"]
    # {d} fails, then the search over a, b, c with d kept: {d, a} passes, at most 2 more
    assert runs.log.executions - before <= 3


def test_a_non_monotone_check_still_ends_1_minimal():
    """A check that passes {a} and {b, c} but not {a, b, c} minus a (non-monotone): every
    node kept is measured to fail alone on the set returned."""
    passing = [frozenset("a"), frozenset("bc"), frozenset("abc"), frozenset("ab")]
    runs = FakeRuns(passes=lambda config: config in passing)
    runs.check(frozenset(), "check")
    shrunk = shrink(runs, frozenset(), list("abc"))
    assert shrunk.shown and runs.one_minimal(frozenset(), shrunk.kept)
    assert shrunk.kept in (("a",), ("b", "c"))


def test_out_of_budget_the_set_stays_and_minimality_is_not_claimed():
    runs = FakeRuns({"n1"}, max_executions=3)
    runs.check(frozenset(), "check")
    runs.check(frozenset(names(5)), "validate")
    shrunk = shrink(runs, frozenset(), names(5))
    assert not shrunk.shown and "n1" in shrunk.kept
    assert runs.log.results[frozenset(shrunk.kept)].passed
    assert shrunk.text().startswith("not shown 1-minimal: the execution budget ran out")


def test_verify_singles_remeasures_nodes_measured_on_a_larger_set():
    """A node measured to fail on a set that later lost a node is measured again there (the
    check may not be monotone): the proof is on the set returned."""
    runs = FakeRuns({"a"})
    runs.check(frozenset(), "check")
    kept, shown = verify_singles(runs, frozenset(), ["x", "a", "y"])
    assert kept == ["a"] and shown
    assert frozenset() in runs.log.results and not runs.log.results[frozenset()].passed


def search_policy(runs, ranked, picks, base=frozenset()):
    """The accuracy search of mxnet_amp.auto.search on ``runs``: reference and check (both
    executions), the attribution run (one), its ``picks`` validated and shrunk, else the
    bisection in the ranking's order from them, then shrunk. Returns the Shrunk."""
    runs.log.executions += 1                         # the reference run
    assert not runs.check(base, "check").passed
    runs.log.executions += 1                         # the attribution run
    if runs.check(base | frozenset(picks), "validate").passed:
        return shrink(runs, base, picks)
    original = SimpleNamespace(nodes=[SimpleNamespace(name=n, op="FullyConnected") for n in ranked])
    p = Prefixes(runs, original, base, ranked, [])
    config, _ = bisect(p, known_failing(p, frozenset(picks)))
    return shrink(runs, base, [n for n in ranked if n in config - base])


def bound(n, k, picks, culprits):
    """docs/emulation_and_auto.md, "Execution bounds": the attribution right: 2 + k + 1 checks
    beside its own run; picks holding every culprit and more: 4 + the shrinking; else the
    bisection alone (3 + k (ceil(log2 N) + 1)) + the attribution's run and failed validation
    + the shrinking's check of each culprit (k)."""
    if set(picks) == culprits:
        return 2 + k + 1 + 1
    s = len(picks)
    if culprits <= set(picks):
        return 4 + (s + k if singles_first(s) else k * (math.ceil(math.log2(s)) + 1) + k)
    return 3 + k * (math.ceil(math.log2(n)) + 1) + 2 + k


@st.composite
def planted_search(draw):
    n = draw(st.integers(2, 400))
    k = draw(st.integers(1, min(8, n)))
    cands = names(n)
    culprits = draw(st.lists(st.sampled_from(cands), min_size=k, max_size=k, unique=True))
    kind = draw(st.sampled_from(["random", "right", "culprits last", "one culprit first",
                                 "culprits among the first"]))
    others = [c for c in cands if c not in culprits]
    if kind == "random":
        ranked = draw(st.permutations(cands))
    elif kind == "right":
        ranked = culprits + others
    elif kind == "culprits last":            # adversarial: every harmless node ranked first
        ranked = others + culprits
    elif kind == "one culprit first":        # the picks stop short
        ranked = culprits[:1] + others + culprits[1:]
    else:                                    # right nodes, too few or too many picked
        ranked = draw(st.permutations(culprits + others[:draw(st.integers(0, len(others)))]))
        ranked += [c for c in cands if c not in ranked]
    picks = ranked[:draw(st.integers(1, min(n, 2 * k + 3)))]
    return n, set(culprits), ranked, picks


@settings(max_examples=300, deadline=None)
@given(planted_search())
def test_any_planted_set_is_found_exactly_minimally_and_within_the_bound(case):
    n, culprits, ranked, picks = case
    runs = FakeRuns(culprits)
    shrunk = search_policy(runs, ranked, picks)
    assert set(shrunk.kept) == culprits and shrunk.shown
    assert runs.one_minimal(frozenset(), shrunk.kept)
    assert runs.log.executions <= bound(n, len(culprits), picks, culprits), (runs.kinds, len(picks))


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10 ** 6), st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=8,
                                         unique=True))
def test_any_check_ends_1_minimal_or_says_it_is_not(seed, kept):
    """Whatever the check (here a random one, ``base | kept`` forced to pass and ``base`` to
    fail), the set returned passes and each of its nodes fails alone, measured."""
    start = frozenset(kept)

    def rule(config):
        return config == start or (bool(config) and hash((seed, config)) % 3 == 0)

    runs = FakeRuns(passes=rule)
    runs.check(frozenset(), "check")
    runs.check(start, "validate")
    shrunk = shrink(runs, frozenset(), kept)
    assert isinstance(shrunk, Shrunk) and shrunk.shown
    assert runs.log.results[frozenset(shrunk.kept)].passed
    assert all(not runs.log.results[frozenset(shrunk.kept) - {n}].passed for n in shrunk.kept)
