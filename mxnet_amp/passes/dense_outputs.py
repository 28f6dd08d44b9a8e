"""Which tensors a closeness check can judge: outputs after NMS, top-k, sorting or a
comparison are discrete selections (with tied or random scores, any rounding picks other
boxes, reorders them, flips a mask), and box decoding exponentiates raw regressions; the
dense tensors that feed the first such op on each path are what rounding really changed.

A graph-only helper (no mxnet): the automatic mode checks these tensors, the zoo sweep
(tools/zoo_sweep) compares the same ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from ..ir.graph import Entry, Graph

__all__ = ["ORDERING_OPS", "AMPLIFYING_OPS", "COMPARISON_OPS", "BOUNDARY_OPS", "DenseOutputs",
           "dense_outputs"]

# ops whose output order or selection changes discretely under any rounding
ORDERING_OPS = frozenset({"topk", "sort", "argsort", "_contrib_box_nms", "box_nms",
                          "_contrib_box_non_maximum_suppression", "_contrib_MultiProposal",
                          "_contrib_Proposal", "_contrib_MultiBoxDetection", "argmax", "argmin"})
# ops that amplify input rounding without bound: box decoding takes exp() of the regressions
AMPLIFYING_OPS = frozenset({"_contrib_box_decode"})
# comparisons make discrete masks (score thresholds, peak picking) that flip on ties
COMPARISON_OPS = frozenset({"broadcast_equal", "_equal", "_equal_scalar", "broadcast_greater",
                            "_greater", "_greater_scalar", "broadcast_lesser", "_lesser",
                            "_lesser_scalar", "broadcast_greater_equal", "_greater_equal",
                            "_greater_equal_scalar", "broadcast_lesser_equal", "_lesser_equal",
                            "_lesser_equal_scalar", "broadcast_not_equal", "_not_equal",
                            "_not_equal_scalar"})
BOUNDARY_OPS = ORDERING_OPS | AMPLIFYING_OPS | COMPARISON_OPS


@dataclass(frozen=True)
class DenseOutputs:
    """``dense``: positions of the heads no boundary op precedes (judged as they are);
    ``after``: positions of the heads downstream of one (only their finiteness means
    anything); ``feeds``: the float inputs of the first boundary op on each path, in graph
    order (judged instead); ``ops``: the boundary ops met, by name."""

    dense: tuple[int, ...]
    after: tuple[int, ...]
    feeds: tuple[Entry, ...]
    ops: tuple[str, ...]


def dense_outputs(graph: Graph) -> DenseOutputs:
    """Split ``graph``'s outputs by whether a boundary op (module doc) precedes them."""
    boundary = [i for i, n in enumerate(graph.nodes) if n.op in BOUNDARY_OPS]
    if not boundary:
        return DenseOutputs(tuple(range(len(graph.heads))), (), (), ())
    marked = set(boundary)
    # one pass in graph order: a node is past a boundary when an input is a boundary op or
    # past one (no upstream walk per node: detectors have thousands of nodes)
    past = [False] * len(graph.nodes)
    for i, node in enumerate(graph.nodes):
        past[i] = any(e.node in marked or past[e.node] for e in node.inputs)
    first = [i for i in boundary if not past[i]]
    dense = tuple(k for k, h in enumerate(graph.heads) if not (h.node in marked or past[h.node]))
    after = tuple(k for k, h in enumerate(graph.heads) if h.node in marked or past[h.node])
    feeds: list[Entry] = []
    for i in first:
        for e in graph.nodes[i].inputs:
            e = Entry(e.node, e.output)
            if e not in feeds and not graph.nodes[e.node].is_variable:
                feeds.append(e)
    return DenseOutputs(dense, after, tuple(feeds), tuple(graph.nodes[i].name for i in first))
