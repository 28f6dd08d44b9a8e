"""The frame every graph pass runs in: one node loop, one result type, one postcondition.

Learning from ``torch.fx.Transformer`` (a class owns the loop over nodes and the map from old
values to new; a pass overrides the per-node hook it cares about; an error inside a node is
re-raised naming that node) and onnx-ir's ``PassBase`` / ``PassResult`` (a pass returns the
model and whether it changed it; a checker runs after each pass):

* A :class:`GraphPass` owns its node loop: it overrides :meth:`GraphPass.rewrite_node` (and
  :meth:`GraphPass.rewrite_subgraph`) and runs :meth:`GraphPass.node_loop`, the
  :class:`Rewriter` that calls them with itself as the run's context; what one run keeps
  (counters, maps, what it decides) is that loop's ``state``, never an attribute of the pass
  (a pass writes its attributes only in ``__init__``: ``tests/house/test_pass_data_flow.py``).
* :class:`Rewriter` owns the loop over a graph's nodes in topological order, the map from
  each old :class:`~mxnet_amp.ir.graph.Entry` to the new one (:meth:`Rewriter.entry`), loop/cond
  bodies (:meth:`Rewriter.rewrite_subgraph`) and node-context errors. A pass overrides
  :meth:`Rewriter.rewrite_node` (reading the node's new inputs with :meth:`Rewriter.inputs`), which returns where the node's outputs went: a new node
  index (output ``k`` is then ``Entry(index, k, version)``, versions kept) or one new entry per
  used output (the pass builds those entries itself).
* :class:`PassResult` is what every pass returns: the graph, what the pass decided (a record
  of its own type) and whether anything changed.
* :class:`GraphPass` runs a pass and checks :func:`mxnet_amp.ir.verify.verify_graph` on its
  output as the postcondition of every pass whose input keeps the invariants (MXNet accepts
  graphs with duplicate node names: a pass is not blamed for what it was given) (on by default: it costs a few percent of a
  conversion, measured in ``benchmarks/pass_verify_cost.py``; ``verify=False`` skips it).

A node-context error: a typed :class:`~mxnet_amp.errors.AMPError` raised in a node's hook
keeps its type and message (it names what is wrong already) and gets a note naming the pass
and node; any other exception becomes a :class:`~mxnet_amp.errors.PassNodeError` naming the
pass, the node and its op, with the original as its cause.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Iterable, Sequence, TypeVar, Union

from ..errors import AMPError, GraphCheckError, PassNodeError, PassOrderError
from ..ir.graph import Entry, Graph, GraphBuilder, Node
from ..ir.verify import verify_graph

__all__ = ["PassResult", "GraphPass", "Rewriter", "Outputs", "node_context", "run_passes", "PassRun",
           "PassOrder", "this_before_that"]

T = TypeVar("T")

# where a node's outputs went: a new node index, or one new entry per used output
Outputs = Union[int, Sequence[Entry]]


@dataclass(frozen=True)
class PassResult(Generic[T]):
    """What a pass returns: the new ``graph``, what the pass ``decided`` (its own record
    type; None for a pass that decides nothing beyond the graph) and whether it ``changed``
    anything (False: ``graph`` is the input graph itself)."""

    graph: Graph
    decided: T
    changed: bool


def node_context(err: Exception, pass_name: str, index: int, node: Node) -> Exception:
    """The exception to raise for ``err``, raised by ``pass_name`` at node ``index``: a typed
    error with a note naming the node, anything else as a :class:`PassNodeError`."""
    where = f"in pass {pass_name}, at node {index} {node.name!r} (op {node.op})"
    if isinstance(err, AMPError):
        err.add_note(where)
        return err
    return PassNodeError(f"{where}: {type(err).__name__}: {err}")


class Rewriter:
    """Owns a pass's loop over ``graph``'s nodes (see the module doc).

    Parameters
    ----------
    graph : Graph
        The graph to rewrite; not modified.
    name : str, optional
        The pass it runs for (its errors name it): the pass's own name, written once, on
        its :class:`GraphPass`.
    """

    name: str = "rewrite"
    # the pass names new nodes (builder.fresh_name): every name of its input graph is taken
    # first, so a new name clashes with none, not even a node's the loop has not reached
    names_new_nodes: ClassVar[bool] = False

    def __init__(self, graph: Graph, name: str | None = None, *, owner: GraphPass | None = None,
                 state: Any = None, builder: GraphBuilder | None = None) -> None:
        self.graph = graph
        if name is not None:
            self.name = name
        self.owner, self.state = owner, state
        # a loop given a builder appends to the graph another loop built
        self.builder = builder if builder is not None else GraphBuilder()
        # old node index -> where its outputs went (see Outputs)
        self.env: list[Outputs] = []
        if self.names_new_nodes or (owner is not None and owner.names_new_nodes):
            self.reserve_names(graph.nodes)

    def reserve_names(self, nodes: Iterable[Node]) -> None:
        """Take the names of ``nodes``: :meth:`GraphBuilder.fresh_name` avoids them."""
        self.builder.names.update(n.name for n in nodes)

    def entry(self, e: Entry) -> Entry:
        """The new entry of the old entry ``e`` (a node already rewritten)."""
        where = self.env[e.node]
        if isinstance(where, int):
            return Entry(where, e.output, e.version)
        return where[e.output]

    def inputs(self, node: Node) -> tuple[Entry, ...]:
        """``node``'s inputs as new entries."""
        return tuple(self.entry(e) for e in node.inputs)

    def emit(self, node: Node) -> int:
        """Append ``node`` to the new graph; its index."""
        return self.builder.add(node)

    def rewrite_subgraph(self, body: Graph) -> Graph:
        """A loop/cond body of a node being copied: the owner's
        :meth:`GraphPass.rewrite_subgraph`, else unchanged unless a subclass overrides it."""
        if self.owner is not None:
            return self.owner.rewrite_subgraph(self, body)
        return body

    def rewrite_node(self, i: int, node: Node) -> Outputs:
        """The hook: add what replaces old node ``i`` (:meth:`inputs` gives its inputs as new
        entries); return where its outputs went. The owner's :meth:`GraphPass.rewrite_node`,
        else (or by default) a copy (:meth:`copy`)."""
        if self.owner is not None:
            return self.owner.rewrite_node(self, i, node)
        return self.copy(node)

    def copy(self, node: Node) -> int:
        """Add ``node`` with its inputs as new entries, bodies through
        :meth:`rewrite_subgraph`; its new index."""
        inputs = self.inputs(node)
        subgraphs = tuple(self.rewrite_subgraph(g) for g in node.subgraphs) if node.subgraphs else ()
        if inputs != node.inputs or subgraphs != node.subgraphs:
            node = Node(node.op, node.name, inputs, node.attrs, subgraphs, node.extra)
        return self.emit(node)

    def heads(self) -> list[Entry]:
        """The new graph's outputs: the owner's :meth:`GraphPass.loop_heads`, else the old
        heads' new entries."""
        if self.owner is not None:
            return self.owner.loop_heads(self)
        return [self.entry(h) for h in self.graph.heads]

    def run(self, start: int = 0) -> Graph:
        """Rewrite every node in order; the new graph. The nodes before ``start`` are kept
        as they are, at their index, without calling the hook (a pass that knows nothing
        changes there: a rewrite near the end of a 100k-node graph copies no prefix)."""
        nodes, env = self.graph.nodes, self.env
        if start:
            self.builder.nodes.extend(nodes[:start])
            self.reserve_names(nodes[:start])
            env.extend(range(start))
        rewrite = self.rewrite_node
        i = -1
        try:
            for i in range(start, len(nodes)):
                env.append(rewrite(i, nodes[i]))
        except Exception as err:
            if i < 0:
                raise
            raise node_context(err, self.name, i, nodes[i]) from (None if isinstance(err, AMPError) else err)
        return self.builder.build(self.heads(), self.graph.attrs)


class GraphPass(Generic[T]):
    """A pass with its postcondition: :meth:`call` does the work, calling the pass checks the
    output graph with :func:`~mxnet_amp.ir.verify.verify_graph`.

    "Unchanged means the same object" holds for every pass, here rather than in each: a
    result that says nothing changed carries the input graph itself (a pass that built an
    equal copy gets its input back; one that says unchanged of a different graph is a
    :class:`PassNodeError`), and a result whose graph is its input says unchanged.

    A pass that reads what the pass before it in a list decided (its record) overrides
    :meth:`call_after`, which :func:`run_passes` calls with that pass's :class:`PassResult`:
    the one channel between passes (no pass reads another pass object or a dict it writes).

    Parameters
    ----------
    verify : bool, default True
        Check the output graph (a broken one raises :class:`GraphCheckError` naming the pass
        and the node).
    """

    name: ClassVar[str] = "pass"
    # the output may hold amp_cast(amp_cast(x, low), float32) on purpose (emulation)
    cast_chains: ClassVar[bool] = False

    # the pass names new nodes (see Rewriter.names_new_nodes)
    names_new_nodes: ClassVar[bool] = False

    def __init__(self, *, verify: bool = True) -> None:
        self.verify = verify

    def node_loop(self, graph: Graph, state: Any = None, builder: GraphBuilder | None = None) -> Rewriter:
        """A loop over ``graph``'s nodes that calls this pass's hooks (:meth:`rewrite_node`,
        :meth:`rewrite_subgraph`, :meth:`loop_heads`); ``.run()`` it for the new graph.
        ``state`` is what one run of the pass keeps (``loop.state``: the hooks read and
        write it there, never on the pass, so a pass object runs any number of graphs, even
        nested bodies, the same); ``builder``, where given, is another loop's (the new
        graph continues what that loop built)."""
        return Rewriter(graph, self.name, owner=self, state=state, builder=builder)

    def rewrite_node(self, loop: Rewriter, i: int, node: Node) -> Outputs:
        """The node hook of :meth:`node_loop` (see :meth:`Rewriter.rewrite_node`, ``loop``
        the run's loop): by default a copy."""
        return loop.copy(node)

    def rewrite_subgraph(self, loop: Rewriter, body: Graph) -> Graph:
        """A loop/cond body of a node ``loop`` copies: by default unchanged."""
        return body

    def loop_heads(self, loop: Rewriter) -> list[Entry]:
        """The outputs of the graph ``loop`` built: by default the old heads' new entries."""
        return [loop.entry(h) for h in loop.graph.heads]

    def call(self, graph: Graph) -> PassResult[T]:
        """The pass itself (subclasses)."""
        raise NotImplementedError

    def call_after(self, previous: PassResult[Any]) -> PassResult[T]:
        """The pass in a list, given the result of the pass before it (by default it reads
        that result's graph only)."""
        return self.call(previous.graph)

    def __call__(self, graph: Graph) -> PassResult[T]:
        return self._checked(graph, self.call(graph))

    def after(self, previous: PassResult[Any]) -> PassResult[T]:
        """Run the pass on ``previous``'s graph, :meth:`call_after` reading its record."""
        return self._checked(previous.graph, self.call_after(previous))

    def _checked(self, graph: Graph, result: PassResult[T]) -> PassResult[T]:
        if result.graph is graph and result.changed:
            result = PassResult(graph, result.decided, False)
        elif not result.changed and result.graph is not graph:
            if result.graph != graph:
                raise PassNodeError(f"pass {self.name} says it changed nothing, but returned "
                                    "another graph")
            result = PassResult(graph, result.decided, False)
        if self.verify and result.changed:
            try:
                verify_graph(result.graph, cast_chains=self.cast_chains)
            except GraphCheckError as err:
                # the precondition: a pass answers for the invariants only on a graph that
                # kept them (MXNet accepts graphs with duplicate node names, say: a pass
                # passes that through, it does not break it)
                if _breaks_invariants(graph, self.cast_chains):
                    return result
                raise GraphCheckError(f"after pass {self.name}: {err}") from None
        return result


def _breaks_invariants(graph: Graph, cast_chains: bool) -> bool:
    try:
        verify_graph(graph, cast_chains=cast_chains)
    except GraphCheckError:
        return True
    return False


@dataclass(frozen=True)
class PassOrder:
    """A declared order constraint, as torch.fx's ``this_before_that_pass_constraint``: where
    both run, the pass named ``this`` runs before the pass named ``that``."""

    this: str
    that: str

    def holds(self, names: Sequence[str]) -> bool:
        """Whether the list of pass ``names`` keeps the constraint."""
        if self.this not in names or self.that not in names:
            return True
        return names.index(self.this) < names.index(self.that)


def this_before_that(this: str, that: str) -> PassOrder:
    """The constraint that pass ``this`` runs before pass ``that`` (where both run)."""
    return PassOrder(this, that)


@dataclass(frozen=True)
class PassRun:
    """What :func:`run_passes` ran: the last graph and each pass's result, in order."""

    graph: Graph
    names: tuple[str, ...]
    results: tuple[PassResult[Any], ...]

    def result(self, name: str) -> PassResult[Any]:
        """The result of the pass called ``name`` (the last one of that name)."""
        for k in range(len(self.names) - 1, -1, -1):
            if self.names[k] == name:
                found: PassResult[Any] = self.results[k]
                return found
        raise KeyError(f"no pass {name!r} ran (ran: {list(self.names)})")

    @property
    def changed(self) -> bool:
        """Whether any pass changed the graph."""
        return any(r.changed for r in self.results)


def run_passes(graph: Graph | PassResult[Any], passes: Sequence[GraphPass],
               order: Sequence[PassOrder] = ()) -> PassRun:
    """Run ``passes`` in order, each given the result of the one before
    (:meth:`GraphPass.after`); the :class:`PassRun`.

    ``graph`` is the first pass's input: a graph, or a :class:`PassResult` whose record the
    first pass reads. ``order`` are the constraints the list must keep
    (:func:`this_before_that`), checked before any pass runs
    (:class:`~mxnet_amp.errors.PassOrderError`).

    An error names its place in the pipeline, as onnx-ir's pass manager does: a typed
    :class:`~mxnet_amp.errors.AMPError` keeps its type and message and gets a note
    ``in pass NAME, after [EARLIER, ...]``; any other exception becomes a
    :class:`~mxnet_amp.errors.PassNodeError` saying so, the original as its cause.
    """
    names = tuple(p.name for p in passes)
    broken = [c for c in order if not c.holds(names)]
    if broken:
        raise PassOrderError(f"pass {broken[0].this} must run before pass {broken[0].that}; "
                             f"the list: {list(names)}")
    previous = graph if isinstance(graph, PassResult) else PassResult(graph, None, False)
    results: list[PassResult[Any]] = []
    for k, graph_pass in enumerate(passes):
        try:
            previous = graph_pass.after(previous)
        except Exception as err:
            where = f"in pass {graph_pass.name}, after [{', '.join(names[:k])}]"
            if isinstance(err, AMPError):
                err.add_note(where)
                raise
            raise PassNodeError(f"{where}: {type(err).__name__}: {err}") from err
        results.append(previous)
    return PassRun(previous.graph, names, tuple(results))
