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

from ..ir.graph import Entry, Graph, Node
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


@dataclass
class _Forcing:
    """One run's state, over both loops (the forced copies' over the converted graph, then
    the perturbed copies' over the original, appending to the same graph): the nodes to
    force, the casts the conversion inserted, the variables, copied casts and feeds made so
    far, the new graph's outputs, each original variable's float32 alias and what the run
    decides (``out``)."""

    forced: set[str]
    inserted: set[int]
    used: list[int]                   # of the graph the current loop walks
    perturbing: bool = False          # which loop runs: the perturbed copies' (second)
    vars: dict[str, int] = field(default_factory=dict)
    copied: dict[int, int] = field(default_factory=dict)
    fed: dict[tuple[str, int, str], Entry] = field(default_factory=dict)
    out_heads: list[Entry] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)   # original variable -> float32 alias
    out: ForcedGraph = field(default_factory=lambda: ForcedGraph(Graph((), ())))


class TeacherForce(GraphPass[ForcedGraph]):
    """:func:`teacher_force` as a pass over the converted graph; what it decides is the
    :class:`ForcedGraph` (the new graph with how to feed and read it).

    Parameters
    ----------
    original, forced, tensor_dtypes, inserted_casts, probes
        As :func:`teacher_force`'s.
    """

    name = "teacher_force"
    names_new_nodes = True

    def __init__(self, original: Graph, forced: Collection[str],
                 tensor_dtypes: Mapping[Entry, str | None],
                 inserted_casts: Collection[int], probes: int = 1, *,
                 verify: bool = True) -> None:
        super().__init__(verify=verify)
        self.original, self.forced, self.tensor_dtypes = original, forced, tensor_dtypes
        self.inserted_casts, self.probes = inserted_casts, probes

    def call(self, graph: Graph) -> PassResult[ForcedGraph]:
        """Run the pass on the converted ``graph`` (see the module doc)."""
        st = _Forcing(set(self.forced), set(self.inserted_casts), graph.num_used_outputs())
        forcing = self.node_loop(graph, st)
        forcing.reserve_names(self.original.nodes)   # the converted graph's are (names_new_nodes)
        forcing.run()
        # the perturbed copies: a loop over the original graph, appending to the forced
        # copies' graph a float32 copy of every op that reads another op's output
        st.perturbing, st.used = True, self.original.num_used_outputs()
        built = self.node_loop(self.original, st, forcing.builder).run()
        out = st.out
        fg = ForcedGraph(Graph(built.nodes, built.heads, graph.attrs), out.var_dtypes,
                         out.reference_feeds, out.perturbed_feeds, out.param_aliases, out.outputs,
                         out.perturbed_probes, out.output_probes)
        return PassResult(fg.graph, fg, True)

    def rewrite_node(self, loop: Rewriter, i: int, node: Node) -> Outputs:
        """A forced node's copy reading new variables (or the casts the conversion put
        before it, copied once); in the second loop, the perturbed copies of an op."""
        st: _Forcing = loop.state
        if st.perturbing:
            return self._perturbed(loop, i, node)
        if node.is_variable or node.name not in st.forced:
            return ()   # not copied: nothing in the new graph reads it through the loop
        ins = tuple(self._forced_input(loop, e) for e in node.inputs)
        idx = loop.emit(node.replace(inputs=ins))
        _add_heads(st, "forced", node.name, idx, st.used[i])
        return idx

    def loop_heads(self, loop: Rewriter) -> list[Entry]:
        """The copies' outputs, in the order they were made."""
        heads: list[Entry] = loop.state.out_heads
        return heads

    def _perturbed(self, loop: Rewriter, i: int, node: Node) -> Outputs:
        nodes, st = loop.graph.nodes, loop.state
        if not self.probes or node.is_variable or node.subgraphs or \
                all(nodes[e.node].is_variable for e in node.inputs):
            return ()   # no copies asked for, or nothing upstream to carry an error through it
        copies = []
        for probe in range(self.probes):
            ins = tuple(self._perturbed_input(loop, e, probe) for e in node.inputs)
            copies.append(loop.emit(node.replace(
                name=loop.builder.fresh_name(node.name + "_perturbed"), inputs=ins)))
            _add_heads(st, "perturbed", node.name, copies[-1], st.used[i], probe)
        return copies[0]

    def _forced_input(self, loop: Rewriter, e: Entry) -> Entry:
        """The new graph's entry for converted entry ``e`` read by a forced node."""
        node, st = loop.graph.nodes[e.node], loop.state
        if node.is_variable:
            return _variable(loop, node.name, node)
        if e.node in st.inserted:
            if e.node not in st.copied:   # a cast the conversion inserted: copied once
                ins = tuple(self._forced_input(loop, x) for x in node.inputs)
                st.copied[e.node] = loop.emit(node.replace(inputs=ins))
            return Entry(st.copied[e.node], e.output)
        return _feed(loop, (node.name, e.output), "reference", self.tensor_dtypes.get(e))

    def _perturbed_input(self, loop: Rewriter, e: Entry, probe: int) -> Entry:
        """The new graph's entry for original entry ``e`` read by a perturbed copy of
        ``probe``."""
        node, st = loop.graph.nodes[e.node], loop.state
        if node.is_variable:
            alias = st.aliases.get(node.name)
            if alias is None:
                # the perturbed copies read the float32 originals (the forced ones may read
                # a low precision weight of the same name)
                alias = st.aliases[node.name] = loop.builder.fresh_name(f"{node.name}_float32")
                st.out.param_aliases[alias] = node.name
                st.out.var_dtypes[alias] = "float32"
            return _variable(loop, alias, node.replace(name=alias))
        return _feed(loop, (node.name, e.output), "perturbed", "float32", probe)


def _add_heads(st: _Forcing, kind: str, name: str, idx: int, used: int, probe: int = 0) -> None:
    """Output ``k < used`` of new node ``idx`` (a copy of ``name``) as a graph output."""
    for k in range(used):
        st.out.outputs.append((kind, name, k))
        st.out.output_probes.append(probe)
        st.out_heads.append(Entry(idx, k))


def _variable(loop: Rewriter, name: str, node: Node | None = None) -> Entry:
    st: _Forcing = loop.state
    if name not in st.vars:
        st.vars[name] = loop.emit(node or Node("null", name))
    return Entry(st.vars[name])


def _feed(loop: Rewriter, tensor: tuple[str, int], kind: str, dtype: str | None,
          probe: int = 0) -> Entry:
    """The variable fed with ``tensor``'s reference (``kind='reference'``) or its perturbed
    reference (``'perturbed'``) of ``probe``."""
    st: _Forcing = loop.state
    key = (tensor[0], tensor[1], f"{kind}{probe or ''}")
    if key not in st.fed:
        name = loop.builder.fresh_name(f"{tensor[0]}_out{tensor[1]}_{key[2]}")
        st.fed[key] = _variable(loop, name)
        if kind == "reference":
            st.out.reference_feeds[name] = tensor
        else:
            st.out.perturbed_feeds[name] = tensor
            st.out.perturbed_probes[name] = probe
        st.out.var_dtypes[name] = dtype or "float32"
    return st.fed[key]


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
