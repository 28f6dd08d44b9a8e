"""The mixed precision pass: decide each node's dtype and insert the casts it needs.

One forward walk over the topologically ordered nodes. For each op node the policy gives a
category; the dtypes its float inputs should have follow from it, MXNet's own type
inference (:class:`~mxnet_amp.mx.optypes.OpTypes`) says what the op then produces and what
dtype it wants for its weights, and casts are added where a tensor's dtype differs:

* one ``amp_cast`` per (tensor, dtype), shared by every consumer (``cast_cache``);
* casts always read an original tensor, never another cast, so there are no cast chains;
* ``amp_multicast`` for widest ops whose float inputs disagree;
* integer and boolean tensors, and inputs the lists name as indices, are never cast;
* a *follow* op MXNet rejects with mixed inputs (``Concat``) is treated as widest, so the
  result always type-checks whatever order inputs come in.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..errors import AlreadyConvertedError, InferenceFailed
from ..ir.dtypes import FLOAT_DTYPES, LOW_PRECISION, dtype_of_code, is_float, widest
from ..ir.graph import Entry, Graph, Node, cast_node, multicast_node
from ..mx.optypes import Dtypes, OpTypes
from ..mx.registry import op_input_names
from ..policy import Category, Decision, OpPolicy
from .kernel import GraphPass, Outputs, PassResult, Rewriter

__all__ = ["CastResult", "Plan", "insert_casts", "InsertCasts", "refuse_converted",
           "CAST", "MULTICAST", "FUSION_BARRIER"]

# the kinds of cast node a conversion inserts (CastResult.inserted_casts): an amp_cast of one
# tensor to the dtype a reader wants, an amp_multicast unifying a widest op's inputs, and an
# identity amp_cast that keeps oneDNN's fusion off a shared convolution output
# (passes/fusion_barriers.py, put in after this pass)
CAST, MULTICAST, FUSION_BARRIER = "cast", "multicast", "fusion barrier"

CONTROL_FLOW_REASON = "control flow op: float32 at its boundary (its body is converted inside)"


class Plan(enum.Enum):
    """How a node's float inputs are set; tried in the order :func:`_plans` gives."""

    WIDEST_REUSE = "widest-reuse"  # widest op reusing casts to the target made for others
    TARGET = "target"
    FOLLOW = "follow"
    WIDEST = "widest"
    FP32 = "fp32"
    FP32_ORIGINAL_BODY = "fp32-original-body"  # fp32 with the loop/cond body left unconverted


@dataclass(frozen=True, kw_only=True)   # built by keyword: many fields, several optional
class CastResult:
    """What :func:`insert_casts` produced, and what it decided on the way."""

    graph: Graph
    # original node name -> dtype it computes in (its first float output), None if not float
    node_dtypes: Mapping[str, str | None]
    # original node name -> the category it ran under, and why
    decisions: Mapping[str, Decision]
    # param name -> set of dtypes its consumers asked for (params left for MXNet to decide)
    param_wants: Mapping[str, frozenset]
    # (node name, why) for nodes that could not run as their category asked
    fallbacks: tuple[tuple[str, str], ...] = ()
    unlisted_ops: frozenset = frozenset()
    # entry of ``graph`` -> the dtype the pass gave that tensor (None: left to MXNet)
    tensor_dtypes: Mapping[Entry, str | None] = field(default_factory=lambda: MappingProxyType({}))
    # index in ``graph`` of each cast node the conversion inserted -> its kind (CAST,
    # MULTICAST, FUSION_BARRIER): the one record of which nodes are the conversion's casts
    # (a model may hold amp_casts of its own); what a cast reads is its inputs in ``graph``
    inserted_casts: Mapping[int, str] = field(default_factory=lambda: MappingProxyType({}))
    # the conversion's own additions, filled by the pipeline's passes after the cast pass
    # (mxnet_amp.pipeline): each weight -> the dtype it is stored in, the nodes the last
    # round kept float32 (name -> why), and the fusion barriers put in ((Convolution,
    # its readers behind a barrier))
    stored_dtypes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    fp32_nodes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    fusion_barriers: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def casts(self) -> int:
        """``amp_cast`` nodes the conversion inserted (fusion barriers included)."""
        return sum(kind != MULTICAST for kind in self.inserted_casts.values())

    @property
    def multicasts(self) -> int:
        """``amp_multicast`` nodes the conversion inserted."""
        return sum(kind == MULTICAST for kind in self.inserted_casts.values())

    @property
    def categories(self) -> Mapping[str, Category]:
        """Original node name -> category it ran under."""
        return MappingProxyType({k: d.category for k, d in self.decisions.items()})


def insert_casts(graph: Graph, policy: OpPolicy, *,
                 data_dtypes: Mapping[str, str],
                 param_dtypes: Mapping[str, str | None],
                 fp32_nodes: Mapping[str, str] = MappingProxyType({}),
                 output_dtype: str | None = "float32",
                 op_types: OpTypes | None = None) -> CastResult:
    """Return the mixed precision version of ``graph``.

    Parameters
    ----------
    graph : Graph
        An fp32 graph without amp casts.
    policy : OpPolicy
        Op categories and the target dtype.
    data_dtypes : mapping
        Dtype of each model input variable; they keep it at the interface.
    param_dtypes : mapping
        Stored dtype of each weight/aux variable, or ``None`` to let the consumers decide
        (their wishes come back in ``param_wants``; such a graph is a first round only).
        Variables in neither mapping count as float32 data.
    fp32_nodes : mapping of str to str
        Node names that compute in float32 whatever their op, each with its reason
        (:attr:`mxnet_amp.options.ConvertOptions.fp32_nodes`); loop/cond bodies get it too.
    output_dtype : str or None
        Float outputs in low precision are cast to this dtype; None leaves them.
    """
    return InsertCasts(policy, data_dtypes=data_dtypes, param_dtypes=param_dtypes, fp32_nodes=fp32_nodes,
                       output_dtype=output_dtype, op_types=op_types)(graph).decided


class InsertCasts(GraphPass[CastResult]):
    """:func:`insert_casts` as a pass: decides a :class:`CastResult` (which holds the graph too)."""

    name = "insert_casts"

    def __init__(self, policy: OpPolicy, *, data_dtypes: Mapping[str, str],
                 param_dtypes: Mapping[str, str | None],
                 fp32_nodes: Mapping[str, str] = MappingProxyType({}),
                 output_dtype: str | None = "float32", op_types: OpTypes | None = None,
                 verify: bool = True) -> None:
        super().__init__(verify=verify)
        self.policy, self.data_dtypes, self.param_dtypes = policy, data_dtypes, param_dtypes
        self.fp32_nodes, self.output_dtype, self.op_types = fp32_nodes, output_dtype, op_types

    def call(self, graph: Graph) -> PassResult[CastResult]:
        """Run the pass on ``graph`` (see the class)."""
        refuse_converted(graph)
        result = _CastInserter(graph, self.name, self.policy, self.data_dtypes, self.param_dtypes, self.fp32_nodes,
                               self.output_dtype, self.op_types or OpTypes()).result()
        return PassResult(result.graph, result, True)


def refuse_converted(graph: Graph) -> None:
    """Raise :class:`AlreadyConvertedError` when ``graph`` holds an amp_cast to low precision.

    Converted graphs hold them; an amp_multicast (or a float32 amp_cast) alone also occurs
    in fp32 models: gluoncv's SSD box decoder calls it."""
    for node in graph.nodes:
        if node.op == "amp_cast" and node.attrs.get("dtype") in LOW_PRECISION:
            raise AlreadyConvertedError(
                f"node {node.name!r} is an {node.op}: this graph was converted to mixed precision "
                "already; convert the original fp32 model instead")


@dataclass
class _Split:
    """A node's inputs as the pass sees them."""

    ins: list[Entry]           # new entry of each input
    cur: list[str | None]      # their dtypes now
    acts: list[int]            # float activations (positions): what the category sets
    params: list[int]          # weights, read as stored unless the op wants another dtype
    flexible: list[int]        # undecided weights read as data (their dtype is decided later)


@dataclass(frozen=True)
class _Choice:
    """The first plan MXNet's type inference accepts for a node (:meth:`_CastInserter._choose`)."""

    plan: Plan
    desired: dict[int, str]    # the dtype it asks of each input (position)
    dtypes: Dtypes             # (filled-in input dtypes, output dtypes)
    probe_node: Node           # the node as probed


class _CastInserter(Rewriter):
    """One forward walk over ``graph``'s nodes building the converted graph (module doc)."""
    names_new_nodes = True

    def __init__(self, graph: Graph, name: str, policy: OpPolicy, data_dtypes: Mapping[str, str],
                 param_dtypes: Mapping[str, str | None], fp32_nodes: Mapping[str, str],
                 output_dtype: str | None, op_types: OpTypes) -> None:
        super().__init__(graph, name)
        self.policy, self.op_types, self.fp32_nodes = policy, op_types, fp32_nodes
        self.data_dtypes, self.param_dtypes = data_dtypes, param_dtypes
        self.output_dtype = output_dtype
        self.target = policy.target_dtype
        self.used = graph.num_used_outputs()
        self.dtype_of: dict[Entry, str | None] = {}  # new entry -> dtype
        self.cast_cache: dict[tuple[Entry, str], Entry] = {}
        self.param_node: set[int] = set()           # original indices of weight/aux variables
        self.wants: dict[str, set] = {}
        self.node_dtypes: dict[str, str | None] = {}
        self.decisions: dict[str, Decision] = {}
        self.fallbacks: list[tuple[str, str]] = []
        self.unlisted: set[str] = set()
        self.index_pos: dict[str, frozenset[int]] = {}
        self.inserted: dict[int, str] = {}   # new node index -> CAST / MULTICAST

    def result(self) -> CastResult:
        """Walk the graph (:meth:`Rewriter.run`); the new graph and what was decided."""
        graph = self.run()
        return CastResult(graph=graph, node_dtypes=MappingProxyType(self.node_dtypes),
                          decisions=MappingProxyType(self.decisions),
                          param_wants=MappingProxyType({k: frozenset(v) for k, v in self.wants.items()}),
                          fallbacks=tuple(self.fallbacks), unlisted_ops=frozenset(self.unlisted),
                          tensor_dtypes=MappingProxyType(self.dtype_of),
                          inserted_casts=MappingProxyType(self.inserted))

    # --- variables and heads -------------------------------------------------------------

    def rewrite_node(self, i: int, node: Node) -> Outputs:
        return self._variable(i, node) if node.is_variable else self._op(i, node)

    def _variable(self, i: int, node: Node) -> Outputs:
        if node.name in self.param_dtypes:
            self.param_node.add(i)
            # __dtype__ tags are written once the param dtypes are final (tag_param_dtypes)
            dt = self.param_dtypes[node.name]
        else:
            dt = self.data_dtypes.get(node.name, "float32")
        e = Entry(self.builder.add(node))
        self.dtype_of[e] = dt
        return (e,)

    def heads(self) -> list[Entry]:
        heads = []
        for e in self.graph.heads:
            new = self.entry(e)
            if self.output_dtype is not None and self.dtype_of.get(new) in LOW_PRECISION:
                new = self._cast(new, self.output_dtype)
            heads.append(new)
        return heads

    # --- one op node ---------------------------------------------------------------------

    def _op(self, i: int, node: Node) -> Outputs:
        split = self._split(node)
        decision, subgraphs = self._decide(node)
        self.decisions[node.name] = decision
        probe_node = node.replace(subgraphs=subgraphs) if subgraphs is not node.subgraphs else node
        choice = self._choose(i, node, probe_node, split, decision.category)
        (filled_in, outs), probe_node = choice.dtypes, choice.probe_node
        new_inputs = tuple(self._rewire(node, split, choice.plan, choice.desired, filled_in))
        if new_inputs != node.inputs or probe_node.subgraphs is not node.subgraphs:
            node = Node(node.op, node.name, new_inputs, node.attrs, probe_node.subgraphs, node.extra)
        idx = self.builder.add(node)
        entries = [Entry(idx, k) for k in range(self.used[i])]
        for e, d in zip(entries, outs):
            self.dtype_of[e] = d
        self.node_dtypes[node.name] = next((d for d in outs if is_float(d)), None)
        return entries

    def _split(self, node: Node) -> _Split:
        entry, dtype_of, param_node = self.entry, self.dtype_of, self.param_node
        ins = [entry(e) for e in node.inputs]
        cur = [dtype_of.get(e) for e in ins]
        index_pos = self._index_positions(node.op)
        acts, params = [], []
        for k, e in enumerate(node.inputs):
            if k in index_pos:
                continue
            d = cur[k]
            if e.node in param_node:
                if d is None or d in FLOAT_DTYPES:
                    params.append(k)
            elif d in FLOAT_DTYPES:
                acts.append(k)
        flexible = []
        if not acts and params:
            # an op reading weights only (tied embeddings, say): the weights are its data.
            # An undecided one joins the widest dtype the others are stored in: a float32
            # weight beside a low precision one (MXNet's test_fp16_casting, an amp_multicast
            # of the two) is stored in low precision, as mx.contrib.amp stores it
            flexible = [k for k in params if cur[k] is None]
            decided = {d for d in (cur[k] for k in params) if d is not None}
            for k in flexible:
                cur[k] = widest(decided) if decided else "float32"
            acts, params = params, []
        return _Split(ins, cur, acts, params, flexible)

    def _index_positions(self, op: str) -> frozenset[int]:
        """Positions of ``op``'s inputs the lists name as indices (never cast)."""
        hit = self.index_pos.get(op)
        if hit is None:
            index_inputs = self.policy.index_inputs
            names = op_input_names(op) if op in index_inputs else ()
            wanted = set(index_inputs.get(op, ()))
            hit = self.index_pos[op] = frozenset(k for k, n in enumerate(names) if n in wanted)
        return hit

    def _decide(self, node: Node) -> tuple[Decision, tuple[Graph, ...]]:
        """The node's category and why, and its loop/cond bodies (converted when it has some)."""
        reason = self.fp32_nodes.get(node.name)
        if reason is not None:
            return Decision(Category.FP32, reason), node.subgraphs
        if node.subgraphs:
            # fp32 at the boundary; the bodies are converted inside
            return Decision(Category.FP32, CONTROL_FLOW_REASON), tuple(
                _convert_subgraph(g, self.policy, self.fp32_nodes, self.op_types) for g in node.subgraphs)
        decision = self.policy.explain(node.op, node.attrs)
        if decision is None:
            self.unlisted.add(node.op)
            decision = Decision(Category.FP32, f"op {node.op} is in no {self.target} list")
        return decision, node.subgraphs

    # --- choosing a plan -----------------------------------------------------------------

    def _choose(self, i: int, node: Node, probe_node: Node, split: _Split,
                cat: Category) -> _Choice:
        """The first plan MXNet's type inference accepts."""
        plans = _plans(cat, split.cur, split.acts, self.target, new_body=probe_node is not node)
        if self._reuses_casts(node, cat, split):
            plans.insert(0, (Plan.WIDEST_REUSE, {k: self.target for k in split.acts}))
        errors = []
        for plan, desired in plans:
            if plan is Plan.FP32_ORIGINAL_BODY:
                probe_node = node
            try:
                result = self._attempt(i, probe_node, split, desired)
            except InferenceFailed as err:
                errors.append(f"{plan.value}: {err}")
                continue
            if errors and not (plan is Plan.WIDEST and cat in (Category.FOLLOW, Category.WIDEST)):
                # a follow op MXNet rejects with mixed inputs is unified silently: that is the
                # widest rule doing its job; anything else is worth reporting
                self.fallbacks.append((node.name, f"{cat.value} op could not run as asked; "
                                       f"ran {plan.value}: " + "; ".join(errors)))
            return _Choice(plan, desired, result, probe_node)
        # MXNet cannot type this op on its own (a Custom op without its Python side, say):
        # keep it fp32 (the last plan) and let whole-graph inference judge.
        self.fallbacks.append((node.name, "type inference failed: " + "; ".join(errors)))
        plan, desired = plans[-1]
        return _Choice(plan, desired, (tuple(split.cur), tuple("float32" for _ in range(self.used[i]))), probe_node)

    def _reuses_casts(self, node: Node, cat: Category, split: _Split) -> bool:
        # every float32 input is already cast to the target dtype for another consumer (a
        # concat beside a conv, say): a join that copies values (the lists' [reuse_casts])
        # reads those casts, as mx.contrib.amp does, rather than widening the low precision
        # inputs; arithmetic widens, or it would round a float32 operand first
        return (cat is Category.WIDEST and node.op in self.policy.reuse_casts
                and {split.cur[k] for k in split.acts} == {self.target, "float32"}
                and all((split.ins[k], self.target) in self.cast_cache
                        for k in split.acts if split.cur[k] != self.target))

    def _attempt(self, i: int, probe_node: Node, split: _Split, desired: dict[int, str]) -> Dtypes:
        probe_in = [desired.get(k, d) for k, d in enumerate(split.cur)]
        for k in split.params:
            probe_in[k] = None
        result = self.op_types.infer(probe_node, probe_in, self.used[i])
        # MXNet leaves a weight undecided when the op does not tie its dtype to the
        # others' (slice_like's data input, say): it is then read as stored
        stuck = [k for k in split.params if result[0][k] is None and split.cur[k] is not None]
        if stuck:
            for k in stuck:
                probe_in[k] = split.cur[k]
            result = self.op_types.infer(probe_node, probe_in, self.used[i])
        # an op whose type function overwrites a given input's dtype instead of checking it
        # (BilinearResize2D's ``like`` input takes the data's): in the whole graph that
        # retypes the producer's output under its other readers, so the plan is refused
        retyped = [k for k in split.acts if probe_in[k] is not None and result[0][k] != probe_in[k]]
        if retyped:
            raise InferenceFailed(f"MXNet retypes input(s) {retyped} of {probe_node.op} to "
                                  f"{[result[0][k] for k in retyped]}")
        return result

    # --- rewiring ------------------------------------------------------------------------

    def _rewire(self, node: Node, split: _Split, plan: Plan, desired: dict[int, str],
                filled_in: tuple[str | None, ...]) -> list[Entry]:
        """The node's new inputs: casts (or one multicast) where a dtype changes."""
        ins, cur, acts = split.ins, split.cur, split.acts
        new_ins = list(ins)
        if (plan is Plan.WIDEST and len(acts) > 1
                and len({desired[k] for k in acts} | {cur[k] for k in acts}) > 1):
            mc = self._multicast(node.name, [ins[k] for k in acts], desired[acts[0]])
            for k, e in zip(acts, mc):
                new_ins[k] = e
        else:
            for k in acts:
                if desired[k] != cur[k]:
                    new_ins[k] = self._cast(ins[k], desired[k])
        for k in split.flexible:
            # the weight is stored as decided later; this consumer reads it in desired[k]
            self._want(node, k, desired[k])
        for k in split.params:
            want = filled_in[k]
            if cur[k] is None and want is not None:
                self._want(node, k, want)
            elif want is not None and want != cur[k]:
                new_ins[k] = self._cast(ins[k], want)
        return new_ins

    def _want(self, node: Node, k: int, dtype: str) -> None:
        self.wants.setdefault(self.graph.nodes[node.inputs[k].node].name, set()).add(dtype)

    def _cast(self, src: Entry, dtype: str) -> Entry:
        """``src`` cast to ``dtype``: one amp_cast per (tensor, dtype), shared by consumers."""
        hit = self.cast_cache.get((src, dtype))
        if hit is None:
            base = self.builder.nodes[src.node].name + (f"_out{src.output}" if src.output else "")
            name = self.builder.fresh_name(f"{base}_amp_cast_{dtype}")
            hit = self.cast_cache[(src, dtype)] = Entry(self.builder.add(cast_node(name, src, dtype)))
            self.inserted[hit.node] = CAST
            self.dtype_of[hit] = dtype
        return hit

    def _multicast(self, name: str, srcs: list[Entry], dtype: str) -> list[Entry]:
        idx = self.builder.add(multicast_node(self.builder.fresh_name(f"{name}_amp_multicast"),
                                              tuple(srcs)))
        self.inserted[idx] = MULTICAST
        outs = [Entry(idx, k) for k in range(len(srcs))]
        self.dtype_of.update(dict.fromkeys(outs, dtype))
        return outs


def _plans(cat: Category, cur: list, acts: list[int], target: str,
           new_body: bool) -> list[tuple[Plan, dict[int, str]]]:
    """The input dtypes to try for a node, in order: what its category asks, then the
    widest of its float inputs, then float32."""
    plans = []
    if cat is Category.TARGET:
        plans.append((Plan.TARGET, {k: target for k in acts}))
    elif cat is Category.FOLLOW:
        plans.append((Plan.FOLLOW, {k: cur[k] for k in acts}))
    if cat is not Category.FP32 and acts:
        w = widest({cur[k] for k in acts})
        plans.append((Plan.WIDEST, {k: w for k in acts}))
    fp32 = {k: ("float32" if cur[k] in LOW_PRECISION else cur[k]) for k in acts}
    plans.append((Plan.FP32, fp32))
    if new_body:
        plans.append((Plan.FP32_ORIGINAL_BODY, fp32))
    return plans


def _convert_subgraph(graph: Graph, policy: OpPolicy, fp32_nodes: Mapping[str, str],
                      op_types: OpTypes) -> Graph:
    """A loop/cond body converted with a float32 interface, so the outer op's typing holds."""
    data = {n.name: dtype_of_code(n.attrs.get("__dtype__")) or "float32"
            for n in graph.variables()}
    return insert_casts(graph, policy, data_dtypes=data, param_dtypes={}, fp32_nodes=fp32_nodes,
                        output_dtype="float32", op_types=op_types).graph
