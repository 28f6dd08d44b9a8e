"""Range culprits (step 2 of :mod:`mxnet_amp.auto`): the ops that would hold a tensor out
of the target dtype's range in low precision, read from the ranges of the float32
reference run (step 1; no execution of their own): the producer of an overflowing or
costly underflowing tensor, and every consumer that casts it to low precision."""
from __future__ import annotations

from typing import Any, Mapping

from ..ir.dtypes import LOW_PRECISION
from ..ir.graph import Entry, Graph
from ..passes.insert_casts import MULTICAST
from ..policy import Category
from ..record import Conversion
from .measure import offending_tensors
from .records import DtypeLimits, KeptNode, TensorRange
from .runner import Runs
from .underflow import SHARE_OF_TOLERANCE, underflow_cost

# each float tensor's range in the float32 reference run, by (node, output)
Stats = Mapping[tuple[int, int], TensorRange]


def tensor_name(graph: Graph, key: tuple[int, int]) -> str:
    """The name a report gives the tensor ``key = (node index, output)`` of ``graph``: the
    node's name, with ``[output]`` after it past the first output."""
    node = graph.nodes[key[0]]
    return node.name if key[1] == 0 else f"{node.name}[{key[1]}]"


def _descendants(graph: Graph, starts: set[int]) -> set[int]:
    # the nodes ``starts`` and everything downstream of them
    users = graph.consumers()
    seen, stack = set(starts), list(starts)
    while stack:
        for j, _ in users[stack.pop()]:
            if j not in seen:
                seen.add(j)
                stack.append(j)
    return seen


def _low_holders(converted: Graph, dtypes: list[tuple[str | None, ...]],
                 categories: Mapping[str, Category],
                 inserted_casts: Mapping[int, str]) -> dict[tuple[str, int], set[str]]:
    """For each original tensor ``(node name, output)``, the original op nodes that would hold
    it in low precision even if its producer computed in float32: the producer itself when
    it computes in low precision, and every consumer that casts it to low precision (a
    target op, reading it through a cast or already in low precision). ``inserted_casts``:
    the conversion's casts (``CastResult.inserted_casts``)."""
    holders: dict[tuple[str, int], set[str]] = {}

    def source(e: Entry) -> tuple[tuple[str, int], bool]:
        """The original tensor ``e`` holds, and whether through one of the conversion's casts."""
        node = converted.nodes[e.node]
        if e.node in inserted_casts:
            # a multicast's output k casts its input k
            src = node.inputs[e.output] if inserted_casts[e.node] == MULTICAST else node.inputs[0]
            return (converted.nodes[src.node].name, src.output), True
        return (node.name, e.output), False

    for j, node in enumerate(converted.nodes):
        if node.is_variable or j in inserted_casts:
            continue
        for k, d in enumerate(dtypes[j]):
            if d in LOW_PRECISION:
                holders.setdefault((node.name, k), set()).add(node.name)
        for e in node.inputs:
            key, via_cast = source(e)
            if dtypes[e.node][e.output] in LOW_PRECISION and (via_cast or categories.get(node.name) is Category.TARGET):
                holders.setdefault(key, set()).add(node.name)
    return holders


def _costly(runs: Runs, original: Graph, offending: list, stats: Stats, limits: DtypeLimits,
            notes: list[str]) -> list:
    """``offending`` without the underflowing tensors whose lost values do not matter where
    they are used (:mod:`mxnet_amp.auto.underflow`); those are named in ``notes``. An
    underflow entry's value becomes ``(fraction flushed, cost)``."""
    params = runs.config.params()
    bound = SHARE_OF_TOLERANCE * runs.config.settings.error_bound
    kept, ignored = [], []
    for key, reason, value in offending:
        if reason != "underflow":
            kept.append((key, reason, value))
            continue
        cost = underflow_cost(original, key, stats, params, limits)
        if cost >= bound:
            kept.append((key, reason, (value, cost)))
        else:
            ignored.append((tensor_name(original, key), cost))
    if ignored:
        worst = max(c for _, c in ignored)
        names = ", ".join(n for n, _ in ignored[:8]) + (", ..." if len(ignored) > 8 else "")
        notes.append(f"{len(ignored)} tensors have values that flush to zero but were left in "
                     f"low precision: what they lose changes the outputs they feed by at most "
                     f"{worst:.2g} of their scale (< {bound:.2g}, a tenth of the tolerance): "
                     f"{names}")
    return kept


def range_exclusions(runs: Runs, original: Graph, stats: Stats, limits: DtypeLimits,
                      underflow_fraction: float,
                      user_excluded: frozenset, notes: list[str]
                      ) -> tuple[frozenset, dict[str, KeptNode]]:
    """Step 2 of :mod:`mxnet_amp.auto`: grow the exclusion set from ``user_excluded`` until
    no out of range tensor of the reference run (``stats``) is held in low precision, with no
    execution (each round converts, then excludes every op that would hold one). Returns
    the exclusion set and why each node it added is kept (overflow or underflow)."""
    offending = _costly(runs, original, offending_tensors(stats, limits, underflow_fraction), stats,
                        limits, notes)
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
            tensor = tensor_name(original, key)
            detail = _range_detail(reason, value, tensor, limits)
            fraction = value[0] if reason == "underflow" else value
            for holder in sorted(now):
                selected.setdefault(holder, KeptNode(holder, ops[holder], reason, fraction,
                                                     tensor, detail))
            tainted |= _descendants(original, {index[h] for h in now})
        if not selected:
            break
        excluded |= set(selected)
        kept.update(selected)
    return frozenset(excluded), kept


def _range_detail(reason: str, value: Any, tensor: str, limits: DtypeLimits) -> str:
    """A range reason in words, with the figures compared."""
    if reason == "overflow":
        return f"overflow: max |x| of {tensor} {value:.3g} > {limits.max:.6g}"
    fraction, cost = value
    return (f"underflow: {fraction:.0%} of the nonzero values of {tensor} are below "
            f"{limits.zero_below:.3g} and flush to zero, changing what it feeds by up to "
            f"{cost:.2g} of its scale")


def _holders_of(conversion: Conversion) -> dict[tuple[str, int], set[str]]:
    # the dtype of every tensor of the converted graph, as the pass gave it
    tensor = conversion.result.tensor_dtypes
    used = conversion.graph.num_used_outputs()
    dtypes = [tuple(tensor.get(Entry(i, k)) for k in range(used[i]))
              for i in range(len(conversion.graph.nodes))]
    return _low_holders(conversion.graph, dtypes, conversion.result.categories,
                        conversion.result.inserted_casts)
