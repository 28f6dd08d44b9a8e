"""Keep MXNet's oneDNN fusion from merging a convolution whose output other ops also read.

MXNet 1.9.1's oneDNN subgraph backend (on by default in ``Module.bind``, ``simple_bind``,
the C predict API and ``hybridize(backend='MKLDNN')``) merges a ``Convolution`` with the
``BatchNorm``, activation or ``elemwise_add`` that reads it into one fused op, and then
connects *every* reader of the convolution's output to the fused op's output
(``SgMKLDNNConvProperty::ConnectSubgraphOutputs``). When the convolution's output has other
readers too (or is a graph output), they silently get the normalised / activated / summed
tensor instead of the convolution's. ``FullyConnected`` + activation fusion does the same to
a model output that is also the FullyConnected's (other readers measured right). Measured
on MXNet 1.9.1, float32 as well as bfloat16 (``tests/passes/test_fusion_barriers.py``):
``relu(conv) + conv`` 0.48 max relative error against the unfused graph,
``[BatchNorm(conv), conv]`` 1.6 on the second output, ``[gelu(FC), FC]`` 1.0, gluoncv's
``cifar_resnet20_v2`` 0.42 to 3.5 (its stem convolution feeds the first block's BatchNorm
and its shortcut); some such graphs do not bind at all.

This pass puts an ``amp_cast`` to the tensor's own dtype (an identity MXNet does not fuse
through) between such a convolution and each of its readers that the fusion could take, so
the convolution runs alone and every reader gets its true output. Measured: the fused run
then equals the unfused one (float32 to 1e-6). A convolution read once is left as it is
(it fuses correctly), a FullyConnected whose output is no model output too, and so is
every other op. The cost is the fusion lost on those nodes (a BatchNorm that could not
be folded because the convolution's output is shared would, fused, be folded in bfloat16:
the inaccurate folding ``fold_batchnorm`` exists to avoid).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..ir.graph import Entry, Graph, Node, attr_ints, cast_node
from .kernel import GraphPass, Outputs, PassResult, Rewriter

__all__ = ["insert_fusion_barriers", "InsertFusionBarriers", "Barriers", "BARRIER_SUFFIX"]

BARRIER_SUFFIX = "_fusion_barrier"

# the ops MXNet 1.9.1's selectors take after a Convolution (BatchNorm, then a sum, then an
# activation) or a FullyConnected (one elementwise op); clip only with a_min == 0 (relu6)
_CONV_READERS = frozenset({"BatchNorm", "Activation", "LeakyReLU", "clip", "elemwise_add", "_npi_add"})
_FC_READERS = frozenset({"Activation", "LeakyReLU", "clip", "square", "_npi_square", "sqrt", "_npi_sqrt",
                         "exp", "_npi_exp", "abs", "_npi_absolute"})


@dataclass(frozen=True)
class Barriers:
    """What :class:`InsertFusionBarriers` decided: for each guarded convolution, its name
    and the names of the readers now behind the barrier; and where each old entry went."""

    guarded: tuple[tuple[str, tuple[str, ...]], ...]
    # entry of the input graph -> the same tensor's entry in the output graph
    entries: Mapping[Entry, Entry]
    # each barrier's output entry (in the output graph) -> its dtype
    barrier_dtypes: Mapping[Entry, str]


def _fused_conv(node: Node) -> bool:
    """A convolution oneDNN's subgraph backend fuses: a 2-d or 3-d kernel."""
    if node.op != "Convolution":
        return False
    return len(attr_ints(node.attrs.get("kernel"))) in (2, 3)


def _fusable_reader(node: Node, ops: frozenset) -> bool:
    if node.op not in ops:
        return False
    if node.op == "clip":
        try:
            return float(node.attrs.get("a_min", "nan")) == 0.0
        except ValueError:
            return False
    return True


def guarded_readers(graph: Graph) -> dict[int, list[int]]:
    """For each Convolution / FullyConnected node whose output MXNet's fusion would
    misconnect, the indices of its readers that the fusion could take (see the module doc)."""
    consumers = graph.consumers()
    head_uses = Counter(e.node for e in graph.heads)
    found: dict[int, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        if _fused_conv(node):
            # measured: a second reader or a model output gets the fused tensor
            ops, at_risk = _CONV_READERS, len(consumers[i]) + head_uses[i] >= 2
        elif node.op == "FullyConnected":
            # measured: only a model output gets the fused tensor; other readers are right
            ops, at_risk = _FC_READERS, head_uses[i] > 0
        else:
            continue
        fusable = sorted({c for c, _ in consumers[i] if _fusable_reader(graph.nodes[c], ops)})
        if at_risk and fusable:
            found[i] = fusable
    return found


@dataclass
class _Guarding:
    """One run's state: the convolutions to guard (old index -> its guarded readers), those
    readers, each convolution's barrier (old index -> the barrier's new entry) and each
    barrier's dtype."""

    targets: dict[int, list[int]]
    readers: set[int]
    barrier_of: dict[int, Entry] = field(default_factory=dict)
    barrier_dtypes: dict[Entry, str] = field(default_factory=dict)


class InsertFusionBarriers(GraphPass[Barriers]):
    """:func:`insert_fusion_barriers` as a pass.

    Parameters
    ----------
    tensor_dtypes : mapping of Entry to str
        The dtype of each tensor of the graph (``CastResult.tensor_dtypes``); a barrier
        casts to its convolution's output dtype (float32 where unknown).
    """

    name = "insert_fusion_barriers"
    names_new_nodes = True

    def __init__(self, tensor_dtypes: Mapping[Entry, str | None], *, verify: bool = True) -> None:
        super().__init__(verify=verify)
        self.tensor_dtypes = tensor_dtypes

    def call(self, graph: Graph) -> PassResult[Barriers]:
        """Run the pass on ``graph`` (see the module doc)."""
        targets = guarded_readers(graph)
        if not targets:
            return PassResult(graph, Barriers((), MappingProxyType({}), MappingProxyType({})), False)
        state = _Guarding(targets, {c for cs in targets.values() for c in cs})
        loop = self.node_loop(graph, state)
        new = loop.run()
        guarded = tuple((graph.nodes[c].name, tuple(graph.nodes[r].name for r in rs))
                        for c, rs in targets.items())
        return PassResult(new, Barriers(guarded, _entry_map(loop, graph),
                                        MappingProxyType(state.barrier_dtypes)), True)

    def rewrite_node(self, loop: Rewriter, i: int, node: Node) -> Outputs:
        """A guarded convolution gets its barrier; its guarded readers read the barrier."""
        state: _Guarding = loop.state
        if i in state.targets:
            new = loop.copy(node)
            dtype = self.tensor_dtypes.get(Entry(i)) or "float32"
            name = loop.builder.fresh_name(node.name + BARRIER_SUFFIX)
            state.barrier_of[i] = Entry(loop.emit(cast_node(name, Entry(new), dtype)))
            state.barrier_dtypes[state.barrier_of[i]] = dtype
            return new
        if i not in state.readers:
            return loop.copy(node)
        ins = tuple(state.barrier_of[e.node] if e.node in state.barrier_of and e.output == 0
                    else loop.entry(e) for e in node.inputs)
        return loop.emit(Node(node.op, node.name, ins, node.attrs, node.subgraphs, node.extra))


def _entry_map(loop: Rewriter, graph: Graph) -> Mapping[Entry, Entry]:
    """Each used output of ``graph`` -> its entry in the rewritten graph."""
    used = graph.num_used_outputs()
    return MappingProxyType({Entry(i, k): loop.entry(Entry(i, k))
                             for i in range(len(graph.nodes)) for k in range(used[i])})


def insert_fusion_barriers(graph: Graph, tensor_dtypes: Mapping[Entry, str | None]
                           ) -> PassResult[Barriers]:
    """``graph`` with an identity ``amp_cast`` between each convolution that MXNet's oneDNN
    fusion would misconnect and its fusable readers (see the module doc).

    Parameters
    ----------
    graph : Graph
        A graph (usually a converted one); not changed.
    tensor_dtypes : mapping of Entry to str
        The dtype of each of ``graph``'s tensors, as ``CastResult.tensor_dtypes``.

    Returns
    -------
    PassResult
        The new graph; ``decided`` names each guarded convolution with its readers behind
        the barrier, and maps each old entry to its new one. ``changed`` is False (the
        graph itself returned) when no convolution needs a barrier.
    """
    return InsertFusionBarriers(tensor_dtypes)(graph)
