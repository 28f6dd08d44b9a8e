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
  graph on *perturbed* reference inputs (fed by the caller: each tensor moved by its own
  rounding error in the target dtype):
  the change of its output over the size of the perturbation is the node's error gain, a
  finite difference of the whole graph's nodes taken at once. ``probes`` such copies of
  every op, each fed its own perturbation (:attr:`ForcedGraph.perturbed_probes`), give the
  gain as an average over several directions.

Both parts run as one execution. The graph is plain data; feeding and measuring are the
automatic mode's (:mod:`mxnet_amp.auto.attribution`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Mapping

from ..graph import Entry, Graph, Node
from .kernel import GraphPass, Outputs, PassResult, Rewriter

__all__ = ["ForcedGraph", "teacher_force", "TeacherForce"]


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
    perturbed_probes : dict of str to int
        New variable of :attr:`perturbed_feeds` -> the probe (0 to ``probes - 1``) whose
        copies read it.
    param_aliases : dict of str to str
        New variable -> the original (float32) param it takes, for the perturbed copies.
    outputs : list of (str, str, int)
        For each graph output: ``('forced' | 'perturbed', node name, output index)``.
    output_probes : list of int
        For each graph output, the probe of a perturbed copy (0 for a forced one).
    """

    graph: Graph
    var_dtypes: dict[str, str] = field(default_factory=dict)
    reference_feeds: dict[str, tuple[str, int]] = field(default_factory=dict)
    perturbed_feeds: dict[str, tuple[str, int]] = field(default_factory=dict)
    param_aliases: dict[str, str] = field(default_factory=dict)
    outputs: list[tuple[str, str, int]] = field(default_factory=list)
    perturbed_probes: dict[str, int] = field(default_factory=dict)
    output_probes: list[int] = field(default_factory=list)


class _Forcer(Rewriter):
    """The forced copies: a loop over the converted graph that copies each forced node,
    reading new variables (or the casts the conversion put before it, copied once)."""
    names_new_nodes = True

    def __init__(self, converted: Graph, name: str, original: Graph, forced: Collection[str],
                 tensor_dtypes: Mapping[Entry, str | None],
                 inserted_casts: Collection[int]) -> None:
        super().__init__(converted, name)
        self.original, self.forced, self.dtypes = original, set(forced), tensor_dtypes
        self.inserted = set(inserted_casts)
        self.reserve_names(original.nodes)   # the converted graph's are (names_new_nodes)
        self.used = converted.num_used_outputs()
        self.vars: dict[str, int] = {}
        self.copied: dict[int, int] = {}
        self.fed: dict[tuple[str, int, str], Entry] = {}
        self.out_heads: list[Entry] = []
        self.out = ForcedGraph(Graph((), ()))

    def rewrite_node(self, i: int, node: Node) -> Outputs:
        if node.is_variable or node.name not in self.forced:
            return ()   # not copied: nothing in the new graph reads it through the loop
        ins = tuple(self.forced_input(e) for e in node.inputs)
        idx = self.emit(node.replace(inputs=ins))
        self.add_heads("forced", node.name, idx, self.used[i])
        return idx

    def heads(self) -> list[Entry]:
        return self.out_heads

    def add_heads(self, kind: str, name: str, idx: int, used: int, probe: int = 0) -> None:
        """Output ``k < used`` of new node ``idx`` (a copy of ``name``) as a graph output."""
        for k in range(used):
            self.out.outputs.append((kind, name, k))
            self.out.output_probes.append(probe)
            self.out_heads.append(Entry(idx, k))

    def variable(self, name: str, node: Node | None = None) -> Entry:
        if name not in self.vars:
            self.vars[name] = self.emit(node or Node("null", name))
        return Entry(self.vars[name])

    def feed(self, tensor: tuple[str, int], kind: str, dtype: str | None,
             probe: int = 0) -> Entry:
        """The variable fed with ``tensor``'s reference (``kind='reference'``) or its
        perturbed reference (``'perturbed'``) of ``probe``."""
        key = (tensor[0], tensor[1], f"{kind}{probe or ''}")
        if key not in self.fed:
            name = self.builder.fresh_name(f"{tensor[0]}_out{tensor[1]}_{key[2]}")
            self.fed[key] = self.variable(name)
            if kind == "reference":
                self.out.reference_feeds[name] = tensor
            else:
                self.out.perturbed_feeds[name] = tensor
                self.out.perturbed_probes[name] = probe
            self.out.var_dtypes[name] = dtype or "float32"
        return self.fed[key]

    def forced_input(self, e: Entry) -> Entry:
        """The new graph's entry for converted entry ``e`` read by a forced node."""
        node = self.graph.nodes[e.node]
        if node.is_variable:
            return self.variable(node.name, node)
        if e.node in self.inserted:
            if e.node not in self.copied:   # a cast the conversion inserted: copied once
                ins = tuple(self.forced_input(x) for x in node.inputs)
                self.copied[e.node] = self.emit(node.replace(inputs=ins))
            return Entry(self.copied[e.node], e.output)
        return self.feed((node.name, e.output), "reference", self.dtypes.get(e))


class _Perturber(Rewriter):
    """The perturbed copies: a loop over the original graph, appending to the forced
    copies' graph a float32 copy of every op that reads another op's output."""

    def __init__(self, forcer: _Forcer, probes: int) -> None:
        super().__init__(forcer.original, forcer.name)
        self.forcer, self.builder, self.probes = forcer, forcer.builder, probes
        self.used = forcer.original.num_used_outputs()
        self.aliases: dict[str, str] = {}   # original variable -> its float32 alias

    def rewrite_node(self, i: int, node: Node) -> Outputs:
        nodes = self.graph.nodes
        if not self.probes or node.is_variable or node.subgraphs or \
                all(nodes[e.node].is_variable for e in node.inputs):
            return ()   # no copies asked for, or nothing upstream to carry an error through it
        copies = []
        for probe in range(self.probes):
            ins = tuple(self.perturbed_input(e, probe) for e in node.inputs)
            copies.append(self.emit(node.replace(
                name=self.builder.fresh_name(node.name + "_perturbed"), inputs=ins)))
            self.forcer.add_heads("perturbed", node.name, copies[-1], self.used[i], probe)
        return copies[0]

    def heads(self) -> list[Entry]:
        return self.forcer.out_heads

    def perturbed_input(self, e: Entry, probe: int) -> Entry:
        """The new graph's entry for original entry ``e`` read by a perturbed copy of
        ``probe``."""
        node, out = self.graph.nodes[e.node], self.forcer.out
        if node.is_variable:
            alias = self.aliases.get(node.name)
            if alias is None:
                # the perturbed copies read the float32 originals (the forced ones may read
                # a low precision weight of the same name)
                alias = self.aliases[node.name] = self.builder.fresh_name(f"{node.name}_float32")
                out.param_aliases[alias] = node.name
                out.var_dtypes[alias] = "float32"
            return self.forcer.variable(alias, node.replace(name=alias))
        return self.forcer.feed((node.name, e.output), "perturbed", "float32", probe)


class TeacherForce(GraphPass[ForcedGraph]):
    """:func:`teacher_force` as a pass over the converted graph; what it decides is the
    :class:`ForcedGraph` (the new graph with how to feed and read it).

    Parameters
    ----------
    original, forced, tensor_dtypes, inserted_casts, probes
        As :func:`teacher_force`'s.
    """

    name = "teacher_force"

    def __init__(self, original: Graph, forced: Collection[str],
                 tensor_dtypes: Mapping[Entry, str | None],
                 inserted_casts: Collection[int], probes: int = 1, *,
                 verify: bool = True) -> None:
        super().__init__(verify=verify)
        self.original, self.forced, self.tensor_dtypes = original, forced, tensor_dtypes
        self.inserted_casts, self.probes = inserted_casts, probes

    def call(self, graph: Graph) -> PassResult[ForcedGraph]:
        """Run the pass on the converted ``graph`` (see the module doc)."""
        forcer = _Forcer(graph, self.name, self.original, self.forced, self.tensor_dtypes, self.inserted_casts)
        forcer.run()
        built = _Perturber(forcer, self.probes).run()
        out = forcer.out
        fg = ForcedGraph(Graph(built.nodes, built.heads, graph.attrs), out.var_dtypes,
                         out.reference_feeds, out.perturbed_feeds, out.param_aliases, out.outputs,
                         out.perturbed_probes, out.output_probes)
        return PassResult(fg.graph, fg, True)


def teacher_force(converted: Graph, original: Graph, forced: Collection[str],
                  tensor_dtypes: Mapping[Entry, str | None],
                  inserted_casts: Collection[int], probes: int = 1) -> ForcedGraph:
    """The attribution graph of ``converted`` (module doc).

    Parameters
    ----------
    converted : Graph
        The converted graph (casts included), as the conversion left it.
    original : Graph
        The float32 graph it was converted from.
    forced : collection of str
        Names of the op nodes to recompute from reference inputs (those computing in low
        precision).
    tensor_dtypes : mapping of Entry to str
        The dtype of each tensor of ``converted`` (``CastResult.tensor_dtypes``).
    inserted_casts : collection of int
        The indices of the cast nodes the conversion inserted (``CastResult.inserted_casts``),
        copied with the forced nodes that read them.
    probes : int
        How many perturbed copies of every op (each read through its own feeds); 0: the
        forced copies only (the automatic mode's attribution measures propagation itself,
        :mod:`mxnet_amp.auto.propagation`).
    """
    return TeacherForce(original, forced, tensor_dtypes, inserted_casts, probes)(converted).decided
