"""The search (steps 1-4 of :mod:`mxnet_amp.auto`): range culprits from the reference
run, then a bisection for accuracy culprits."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..convert import Conversion
from ..dtypes import LOW_PRECISION
from ..graph import CAST_OPS, Entry, Graph
from ..io import graph_to_symbol
from ..policy import Category
from .measure import offending_tensors, reference_ranges
from .records import DTYPE_LIMITS, AutoSettings, DtypeLimits, KeptNode, TensorRange
from ..passes.expose_outputs import expose_outputs
from .runner import Runs

# each float tensor's range in the float32 reference run, by (node, output)
Stats = Mapping[tuple[int, int], TensorRange]


def _tensor_name(graph: Graph, key: tuple[int, int]) -> str:
    node = graph.nodes[key[0]]
    return node.name if key[1] == 0 else f"{node.name}[{key[1]}]"


def _descendants(graph: Graph, starts: set[int]) -> set[int]:
    users = graph.consumers()
    seen, stack = set(starts), list(starts)
    while stack:
        for j, _ in users[stack.pop()]:
            if j not in seen:
                seen.add(j)
                stack.append(j)
    return seen


def _low_holders(original: Graph, converted: Graph,
                 dtypes: list[tuple[str | None, ...]],
                 categories: Mapping[str, Category]) -> dict[tuple[str, int], set[str]]:
    """For each original tensor ``(node name, output)``, the original op nodes that would hold
    it in low precision even if its producer computed in float32: the producer itself when
    it computes in low precision, and every consumer that casts it to low precision (a
    target op, reading it through a cast or already in low precision)."""
    names = {n.name for n in original.nodes}
    holders: dict[tuple[str, int], set[str]] = {}

    def source(e: Entry) -> tuple[tuple[str, int], str | None, bool]:
        node = converted.nodes[e.node]
        if node.op in CAST_OPS and node.name not in names:
            src = node.inputs[0] if node.op == "amp_cast" else node.inputs[e.output]
            return (converted.nodes[src.node].name, src.output), dtypes[e.node][e.output], True
        return (node.name, e.output), dtypes[e.node][e.output], False

    for j, node in enumerate(converted.nodes):
        if node.is_variable or node.name not in names:
            continue
        for k, d in enumerate(dtypes[j]):
            if d in LOW_PRECISION:
                holders.setdefault((node.name, k), set()).add(node.name)
        for e in node.inputs:
            key, d, via_cast = source(e)
            if d in LOW_PRECISION and (via_cast or categories.get(node.name) is Category.TARGET):
                holders.setdefault(key, set()).add(node.name)
    return holders


def _range_exclusions(runs: Runs, original: Graph, stats: Stats, limits: DtypeLimits,
                      underflow_fraction: float,
                      user_excluded: frozenset) -> tuple[frozenset, dict[str, KeptNode]]:
    """Grow the exclusion set until no out of range tensor is held in low precision."""
    offending = offending_tensors(stats, limits, underflow_fraction)
    excluded = set(user_excluded)
    kept: dict[str, KeptNode] = {}
    ops = {n.name: n.op for n in original.nodes}
    index = {n.name: i for i, n in enumerate(original.nodes)}
    while offending:
        _, _, _, conversion = runs.convert(frozenset(excluded))
        holders = _holders_of(conversion)
        selected: dict[str, KeptNode] = {}
        tainted: set[int] = set()
        for key, reason, value in offending:
            if key[0] in tainted:
                # downstream of a node chosen this round: its dtype may change; next round
                continue
            name = original.nodes[key[0]].name
            now = holders.get((name, key[1]), set()) - excluded
            if not now:
                continue
            tensor = _tensor_name(original, key)
            for holder in sorted(now):
                selected.setdefault(holder, KeptNode(holder, ops[holder], reason, value, tensor))
            tainted |= _descendants(original, {index[h] for h in now})
        if not selected:
            break
        excluded |= set(selected)
        kept.update(selected)
    return frozenset(excluded), kept


def _holders_of(conversion: Conversion) -> dict[tuple[str, int], set[str]]:
    # the dtype of every tensor of the converted graph, as the pass gave it
    tensor = conversion.result.tensor_dtypes
    used = conversion.graph.num_used_outputs()
    dtypes = [tuple(tensor.get(Entry(i, k)) for k in range(used[i]))
              for i in range(len(conversion.graph.nodes))]
    return _low_holders(conversion.original, conversion.graph, dtypes, conversion.result.categories)


def low_nodes(conversion: Conversion) -> list[str]:
    """The original graph's nodes the conversion runs in low precision."""
    return [n.name for n in conversion.original.nodes if not n.is_variable
            and conversion.result.node_dtypes.get(n.name) in LOW_PRECISION]


def _accuracy_search(runs: Runs, original: Graph, base: frozenset, stats: Stats,
                     notes: list[str]) -> tuple[frozenset, dict[str, KeptNode]]:
    """Bisect for the nodes whose low precision breaks validation (module doc, step 4).

    Returns the exclusion set to use (always one that was seen to pass, or ``base`` when
    nothing passed) and the accuracy culprits."""
    index = {n.name: i for i, n in enumerate(original.nodes)}
    used = original.num_used_outputs()

    def suspicion(name: str) -> float:
        i = index[name]
        return max((stats[(i, k)].subnormal for k in range(used[i]) if (i, k) in stats), default=0.0)

    _, _, _, conversion = runs.convert(base)
    cands = sorted(low_nodes(conversion), key=lambda n: (-suspicion(n), index[n]))
    ops = {n.name: n.op for n in original.nodes}
    kept: dict[str, KeptNode] = {}
    found: list[str] = []

    def config(prefix: int) -> frozenset:
        return base | frozenset(found) | frozenset(cands[:prefix])

    def undecided(prefix: int) -> tuple[frozenset, dict[str, KeptNode]]:
        """Out of budget: keep the candidates not yet cleared in float32 (that passed)."""
        notes.append(f"the execution budget ({runs.max_executions}) ran out during the accuracy "
                     f"search; kept {prefix} undecided candidates in float32")
        for name in cands[:prefix]:
            kept[name] = KeptNode(name, ops[name], "budget")
        return config(prefix), kept

    if not runs.budget_left:
        notes.append("the execution budget ran out before the accuracy search could start")
        return base, kept
    ok, _, _ = runs.check(config(len(cands)), "all-fp32")
    if not ok:
        notes.append("even with every low precision node kept in float32 the check fails: "
                     "validate or the tolerances reject the float32 model itself")
        return base, kept
    lo, hi = 0, len(cands)     # config(lo) fails, config(hi) passes (both measured)
    while True:
        while hi - lo > 1 and runs.budget_left:
            mid = (lo + hi) // 2
            ok, _, _ = runs.check(config(mid), "bisect")
            lo, hi = (lo, mid) if ok else (mid, hi)
        if hi - lo > 1:
            return undecided(hi)
        culprit = cands[hi - 1]
        contribution = (runs.results[config(lo)].tolerance_ratio
                        - runs.results[config(hi)].tolerance_ratio)
        kept[culprit] = KeptNode(culprit, ops[culprit], "accuracy", float(contribution), culprit)
        found.append(culprit)
        cands = cands[:hi - 1]
        # config(len(cands)) is the configuration that just passed
        if not cands:
            return config(0), kept
        if not runs.budget_left:
            return undecided(len(cands))
        ok, _, _ = runs.check(config(0), "bisect")
        if ok:
            return config(0), kept
        lo, hi = 0, len(cands)


def _search(runs: Runs, original: Graph, stats: Stats, limits: DtypeLimits, underflow_fraction: float,
            user_excluded: frozenset, notes: list[str]) -> tuple[frozenset, tuple[KeptNode, ...]]:
    """Steps 2-4 of the module doc: the exclusion set to return and why each node is in it."""
    # 2. nodes holding out of range tensors in low precision: float32 (no execution)
    excluded, kept = _range_exclusions(runs, original, stats, limits, underflow_fraction,
                                       user_excluded)
    # 3. one converted check
    ok, _, _ = runs.check(excluded, "check")
    # 4. only when the ranges do not explain the error: bounded search
    if not ok:
        excluded, found = _accuracy_search(runs, original, excluded, stats, notes)
        kept.update(found)
    ops = {n.name: n.op for n in original.nodes}
    kept_nodes = [KeptNode(n, ops[n], "user") for n in sorted(user_excluded)]
    kept_nodes += [kept[n] for n in sorted(kept, key=lambda n: original.index_of(n))]
    return excluded, tuple(kept_nodes)


def reference_and_search(runs: Runs, original: Graph, settings: AutoSettings,
                          notes: list[str]) -> tuple[frozenset, tuple[KeptNode, ...], bool]:
    """Steps 1-4 of the module doc: ``(exclusions, kept nodes, reference finite)``."""
    limits = DTYPE_LIMITS[runs.target_dtype]
    # 1. one float32 run with every op output: reference and per-tensor ranges
    probe, keys = expose_outputs(original)
    outs = runs.run_reference(graph_to_symbol(probe))
    runs.reference, stats = reference_ranges(original, keys, outs, runs.inputs,
                                              {**runs.arg_params, **runs.aux_params}, limits)
    del outs
    reference_finite = all(np.isfinite(r).all() for r in runs.reference)
    if not reference_finite:
        notes.append("the float32 reference outputs hold inf/nan on these sample inputs")
    excluded, kept = _search(runs, original, stats, limits, settings.underflow_fraction,
                             runs.options.excluded, notes)
    return excluded, kept, reference_finite
