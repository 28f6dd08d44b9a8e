"""Teacher forcing: the automatic mode's attribution graph.

From a converted graph, one graph in which

* every *forced* node (an op the conversion runs in low precision) is recomputed on its own,
  its op inputs replaced by new variables that the caller feeds with the float32 reference
  values of those tensors. Run through :func:`mxnet_amp.passes.emulate.emulate_graph`, each
  copy computes what that node would compute in low precision from exact inputs: its
  output minus the reference is the node's *local* error. The casts the conversion put in
  front of the node are copied with it, so a float32 tensor the node reads through a cast to
  low precision is rounded there (that rounding is the node's error); a tensor its producer
  already holds in low precision is fed unrounded, declared low precision (that rounding is
  the producer's error, counted once);
* every op reading another op's output is also recomputed in float32 from its original
  graph on *perturbed* reference inputs (``ref * (1 + eps * sign)``, fed by the caller): the
  change of its output over the size of the perturbation is the node's error gain, a
  finite difference of the whole graph's nodes taken at once.

Both parts run as one execution. The graph is plain data; feeding and measuring are the
automatic mode's (:mod:`mxnet_amp.auto.attribution`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Mapping

from ..graph import ANY_CAST_OPS, Entry, Graph, GraphBuilder, Node

__all__ = ["ForcedGraph", "teacher_force"]


@dataclass(frozen=True)
class ForcedGraph:
    """The attribution graph and how to feed and read it.

    Attributes
    ----------
    graph : Graph
        The graph to emulate (:func:`~mxnet_amp.passes.emulate.emulate_graph` with
        :attr:`var_dtypes`) and run once.
    var_dtypes : dict of str to str
        The dtype each new variable is declared with (a forced input that its producer holds
        in low precision is declared low precision: fed unrounded, it is not rounded again).
    reference_feeds : dict of str to (str, int)
        New variable -> the original tensor ``(node name, output)`` whose float32 reference
        value it takes.
    perturbed_feeds : dict of str to (str, int)
        New variable -> the original tensor whose perturbed reference it takes.
    param_aliases : dict of str to str
        New variable -> the original (float32) param it takes, for the perturbed copies.
    outputs : list of (str, str, int)
        For each graph output: ``('forced' | 'perturbed', node name, output index)``.
    """

    graph: Graph
    var_dtypes: dict[str, str] = field(default_factory=dict)
    reference_feeds: dict[str, tuple[str, int]] = field(default_factory=dict)
    perturbed_feeds: dict[str, tuple[str, int]] = field(default_factory=dict)
    param_aliases: dict[str, str] = field(default_factory=dict)
    outputs: list[tuple[str, str, int]] = field(default_factory=list)


class _Builder:
    """The attribution graph under construction: variables made once, casts copied once."""

    def __init__(self, converted: Graph, original: Graph) -> None:
        self.converted, self.original = converted, original
        self.names = {n.name for n in original.nodes}
        self.b = GraphBuilder()
        self.b.names.update(n.name for n in converted.nodes)
        self.b.names.update(self.names)
        self.vars: dict[str, int] = {}
        self.copied: dict[int, int] = {}
        self.fed: dict[tuple[str, int, str], Entry] = {}
        self.aliases: dict[str, str] = {}   # original variable -> its float32 alias
        self.heads: list[Entry] = []
        self.out = ForcedGraph(Graph((), ()))

    def variable(self, name: str, node: Node | None = None) -> Entry:
        if name not in self.vars:
            self.vars[name] = self.b.add(node or Node("null", name))
        return Entry(self.vars[name])

    def feed(self, tensor: tuple[str, int], kind: str, dtype: str | None) -> Entry:
        """The variable fed with ``tensor``'s reference (``kind='reference'``) or its
        perturbed reference (``'perturbed'``)."""
        key = (tensor[0], tensor[1], kind)
        if key not in self.fed:
            name = self.b.fresh_name(f"{tensor[0]}_out{tensor[1]}_{kind}")
            self.fed[key] = self.variable(name)
            target = self.out.reference_feeds if kind == "reference" else self.out.perturbed_feeds
            target[name] = tensor
            self.out.var_dtypes[name] = dtype or "float32"
        return self.fed[key]

    def forced_input(self, e: Entry, dtypes: Mapping[Entry, str | None]) -> Entry:
        """The new graph's entry for converted entry ``e`` read by a forced node."""
        node = self.converted.nodes[e.node]
        if node.is_variable:
            return self.variable(node.name, node)
        if node.op in ANY_CAST_OPS and node.name not in self.names:
            if e.node not in self.copied:   # a cast the conversion inserted: copied once
                ins = tuple(self.forced_input(x, dtypes) for x in node.inputs)
                self.copied[e.node] = self.b.add(node.replace(inputs=ins))
            return Entry(self.copied[e.node], e.output)
        return self.feed((node.name, e.output), "reference", dtypes.get(e))

    def perturbed_input(self, e: Entry) -> Entry:
        """The new graph's entry for original entry ``e`` read by a perturbed copy."""
        node = self.original.nodes[e.node]
        if node.is_variable:
            alias = self.aliases.get(node.name)
            if alias is None:
                # the perturbed copies read the float32 originals (the forced ones may read
                # a low precision weight of the same name)
                alias = self.aliases[node.name] = self.b.fresh_name(f"{node.name}_float32")
                self.out.param_aliases[alias] = node.name
                self.out.var_dtypes[alias] = "float32"
            return self.variable(alias, node.replace(name=alias))
        return self.feed((node.name, e.output), "perturbed", "float32")


def teacher_force(converted: Graph, original: Graph, forced: Collection[str],
                  tensor_dtypes: Mapping[Entry, str | None]) -> ForcedGraph:
    """The attribution graph of ``converted`` (module doc).

    Parameters
    ----------
    converted : Graph
        The converted graph (casts included), as the conversion left it.
    original : Graph
        The float32 graph it was converted from (its node names are kept by the conversion;
        a node of ``converted`` whose name is not in ``original`` is an inserted cast).
    forced : collection of str
        Names of the op nodes to recompute from reference inputs (those computing in low
        precision).
    tensor_dtypes : mapping of Entry to str
        The dtype of each tensor of ``converted`` (``CastResult.tensor_dtypes``).
    """
    fb = _Builder(converted, original)
    forced = set(forced)
    used = converted.num_used_outputs()
    for i, node in enumerate(converted.nodes):
        if node.is_variable or node.name not in forced:
            continue
        ins = tuple(fb.forced_input(e, tensor_dtypes) for e in node.inputs)
        idx = fb.b.add(node.replace(inputs=ins))
        for k in range(used[i]):
            fb.out.outputs.append(("forced", node.name, k))
            fb.heads.append(Entry(idx, k))
    _perturbed_copies(fb)
    graph = fb.b.build(fb.heads, converted.attrs)
    return ForcedGraph(graph, fb.out.var_dtypes, fb.out.reference_feeds, fb.out.perturbed_feeds,
                       fb.out.param_aliases, fb.out.outputs)


def _perturbed_copies(fb: _Builder) -> None:
    """A float32 copy of every original op that reads another op's output, on perturbed
    inputs (module doc); its outputs appended to the heads."""
    original = fb.original
    used = original.num_used_outputs()
    for i, node in enumerate(original.nodes):
        if node.is_variable or node.subgraphs:
            continue
        if all(original.nodes[e.node].is_variable for e in node.inputs):
            continue   # nothing upstream of it to carry an error through it
        ins = tuple(fb.perturbed_input(e) for e in node.inputs)
        idx = fb.b.add(node.replace(name=fb.b.fresh_name(node.name + "_perturbed"), inputs=ins))
        for k in range(used[i]):
            fb.out.outputs.append(("perturbed", node.name, k))
            fb.heads.append(Entry(idx, k))
