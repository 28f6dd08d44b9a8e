"""The mixed precision pass: decide each node's dtype and insert the casts it needs.

One forward walk over the topologically ordered nodes. For each op node the policy gives a
category; the dtypes its float inputs should have follow from it, MXNet's own type
inference (:class:`~mxnet_amp.optypes.OpTypes`) says what the op then produces and what
dtype it wants for its weights, and casts are added where a tensor's dtype differs:

* one ``amp_cast`` per (tensor, dtype), shared by every consumer (``cast_cache``);
* casts always read an original tensor, never another cast, so there are no cast chains;
* ``amp_multicast`` for widest ops whose float inputs disagree;
* integer and boolean tensors, and inputs the lists name as indices, are never cast;
* a *follow* op MXNet rejects with mixed inputs (``Concat``) is treated as widest, so the
  result always type-checks whatever order inputs come in.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from ..dtypes import LOW_PRECISION, is_float, widest
from ..errors import AlreadyConvertedError
from ..graph import Entry, Graph, GraphBuilder, Node, cast_node, multicast_node
from ..optypes import InferenceFailed, OpTypes
from ..policy import Category, OpPolicy
from ..registry import op_input_names

__all__ = ["CastResult", "insert_casts"]


@dataclass(frozen=True)
class CastResult:
    """What :func:`insert_casts` produced."""

    graph: Graph
    # original node name -> dtype it computes in (its first float output), None if not float
    node_dtypes: Mapping[str, str | None]
    # original node name -> category it ran under
    categories: Mapping[str, Category]
    # param name -> set of dtypes its consumers asked for (params left for MXNet to decide)
    param_wants: Mapping[str, frozenset]
    # (node name, why) for nodes that could not run as their category asked
    fallbacks: tuple[tuple[str, str], ...] = ()
    unlisted_ops: frozenset = frozenset()
    probes: int = 0
    casts: int = 0
    multicasts: int = 0


def insert_casts(graph: Graph, policy: OpPolicy, *,
                 data_dtypes: Mapping[str, str],
                 param_dtypes: Mapping[str, str | None],
                 excluded: frozenset[str] = frozenset(),
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
    excluded : frozenset of str
        Node names that compute in float32 whatever their op.
    output_dtype : str or None
        Float outputs in low precision are cast to this dtype; None leaves them.
    """
    op_types = op_types or OpTypes()
    target = policy.target_dtype
    for node in graph.nodes:
        # converted graphs hold amp_casts to low precision; an amp_multicast (or a float32
        # amp_cast) alone also occurs in fp32 models: gluoncv's SSD box decoder calls it
        if node.op == "amp_cast" and node.attrs.get("dtype") in LOW_PRECISION:
            raise AlreadyConvertedError(
                f"node {node.name!r} is an {node.op}: this graph was converted to mixed precision "
                "already; convert the original fp32 model instead")
    used = graph.num_used_outputs()
    builder = GraphBuilder()
    builder.names.update(n.name for n in graph.nodes)
    env: list[list[Entry]] = []            # original node -> new entry of each output
    dtype_of: dict[Entry, str | None] = {}  # new entry -> dtype
    cast_cache: dict[tuple[Entry, str], Entry] = {}
    param_node: set[int] = set()           # original indices of weight/aux variables
    wants: dict[str, set] = {}
    node_dtypes: dict[str, str | None] = {}
    categories: dict[str, Category] = {}
    fallbacks: list[tuple[str, str]] = []
    unlisted: set[str] = set()
    counts = {"casts": 0, "multicasts": 0}

    def cast(src: Entry, dtype: str) -> Entry:
        hit = cast_cache.get((src, dtype))
        if hit is None:
            base = builder.nodes[src.node].name + (f"_out{src.index}" if src.index else "")
            idx = builder.add(cast_node(builder.fresh_name(f"{base}_amp_cast_{dtype}"), src, dtype))
            hit = cast_cache[(src, dtype)] = Entry(idx)
            dtype_of[hit] = dtype
            counts["casts"] += 1
        return hit

    def multicast(name: str, srcs: list[Entry], dtype: str) -> list[Entry]:
        idx = builder.add(multicast_node(builder.fresh_name(f"{name}_amp_multicast"), tuple(srcs)))
        counts["multicasts"] += 1
        outs = [Entry(idx, k) for k in range(len(srcs))]
        for e in outs:
            dtype_of[e] = dtype
        return outs

    for i, node in enumerate(graph.nodes):
        if node.is_variable:
            if node.name in param_dtypes:
                param_node.add(i)
                # __dtype__ tags are written once the param dtypes are final (tag_param_dtypes)
                dt = param_dtypes[node.name]
            else:
                dt = data_dtypes.get(node.name, "float32")
            e = Entry(builder.add(node))
            dtype_of[e] = dt
            env.append([e])
            continue

        ins = [env[e.node][e.index] for e in node.inputs]
        cur = [dtype_of.get(e) for e in ins]
        names = op_input_names(node.op) if node.op in policy.index_inputs else ()
        index_names = set(policy.index_inputs.get(node.op, ()))
        index_pos = {k for k, n in enumerate(names) if n in index_names}
        is_param = [node.inputs[k].node in param_node for k in range(len(ins))]
        acts = [k for k in range(len(ins)) if k not in index_pos and not is_param[k] and is_float(cur[k])]
        params = [k for k in range(len(ins)) if k not in index_pos and is_param[k]
                  and (cur[k] is None or is_float(cur[k]))]
        flexible_acts = []
        if not acts and params:
            # an op reading weights only (tied embeddings, say): the weights are its data
            for k in params:
                if cur[k] is None:
                    cur[k] = "float32"
                    flexible_acts.append(k)
            acts, params = params, []

        subgraphs = node.subgraphs
        if node.name in excluded:
            cat = Category.FP32
        elif subgraphs:
            cat = Category.FP32  # fp32 at the boundary; the bodies are converted inside
            subgraphs = tuple(_convert_subgraph(g, policy, excluded, op_types) for g in subgraphs)
        else:
            cat = policy.decide(node.op, node.attrs)
            if cat is None:
                unlisted.add(node.op)
                cat = Category.FP32
        categories[node.name] = cat
        probe_node = node.replace(subgraphs=subgraphs) if subgraphs is not node.subgraphs else node

        def attempt(desired: dict[int, str], probe_node=probe_node):
            probe_in = list(cur)
            for k, d in desired.items():
                probe_in[k] = d
            for k in params:
                probe_in[k] = None
            result = op_types.infer(probe_node, probe_in, used[i])
            # MXNet leaves a weight undecided when the op does not tie its dtype to the
            # others' (slice_like's data input, say): it is then read as stored
            stuck = [k for k in params if result[0][k] is None and cur[k] is not None]
            if stuck:
                for k in stuck:
                    probe_in[k] = cur[k]
                result = op_types.infer(probe_node, probe_in, used[i])
            return result

        act_dtypes = {cur[k] for k in acts}
        plans = _plans(cat, cur, acts, target, new_body=subgraphs is not node.subgraphs)
        if cat is Category.WIDEST and act_dtypes == {target, "float32"} and all(
                (ins[k], target) in cast_cache for k in acts if cur[k] != target):
            # every float32 input is already cast to the target dtype for another consumer
            # (a residual add beside a conv, say): reuse those casts, as mx.contrib.amp does,
            # rather than widening the low precision inputs
            plans = iter([("widest-reuse", {k: target for k in acts}), *plans])
        result = None
        errors = []
        for how, desired in plans:
            if how == "fp32-original-body":
                probe_node, subgraphs = node, node.subgraphs
            try:
                result = attempt(desired, probe_node)
                break
            except InferenceFailed as err:
                errors.append(f"{how}: {err}")
        if result is None:
            # MXNet cannot type this op on its own (a Custom op without its Python side, say):
            # keep it fp32 and let whole-graph inference judge.
            fallbacks.append((node.name, "type inference failed: " + "; ".join(errors)))
            result = (tuple(cur), tuple("float32" for _ in range(used[i])))
        elif errors and not (how == "widest" and cat in (Category.FOLLOW, Category.WIDEST)):
            # a follow op MXNet rejects with mixed inputs is unified silently: that is the
            # widest rule doing its job; anything else is worth reporting
            fallbacks.append((node.name, f"{cat.value} op could not run as asked; ran {how}: "
                              + "; ".join(errors)))
        filled_in, outs = result

        new_ins = list(ins)
        if how == "widest" and len({desired[k] for k in acts} | act_dtypes) > 1 and len(acts) > 1:
            mc = multicast(node.name, [ins[k] for k in acts], desired[acts[0]])
            for k, e in zip(acts, mc):
                new_ins[k] = e
        else:
            for k in acts:
                if desired[k] != cur[k]:
                    new_ins[k] = cast(ins[k], desired[k])
        for k in flexible_acts:
            # the weight is stored as decided later; this consumer reads it in desired[k]
            wants.setdefault(graph.nodes[node.inputs[k].node].name, set()).add(desired[k])
        for k in params:
            want = filled_in[k]
            if cur[k] is None:
                if want is not None:
                    wants.setdefault(graph.nodes[node.inputs[k].node].name, set()).add(want)
            elif want is not None and want != cur[k]:
                new_ins[k] = cast(ins[k], want)

        new_inputs = tuple(new_ins)
        if new_inputs != node.inputs or subgraphs is not node.subgraphs:
            node = Node(node.op, node.name, new_inputs, node.attrs, subgraphs, node.extra)
        idx = builder.add(node)
        entries = [Entry(idx, k) for k in range(used[i])]
        for e, d in zip(entries, outs):
            dtype_of[e] = d
        env.append(entries)
        node_dtypes[node.name] = next((d for d in outs if is_float(d)), None)

    heads = []
    for e in graph.heads:
        new = env[e.node][e.index]
        if output_dtype is not None and dtype_of.get(new) in LOW_PRECISION:
            new = cast(new, output_dtype)
        heads.append(new)
    return CastResult(builder.build(heads, graph.attrs), MappingProxyType(node_dtypes),
                      MappingProxyType(categories),
                      MappingProxyType({k: frozenset(v) for k, v in wants.items()}),
                      tuple(fallbacks), frozenset(unlisted), op_types.probes,
                      counts["casts"], counts["multicasts"])


def _plans(cat: Category, cur: list, acts: list[int], target: str, new_body: bool):
    """The input dtypes to try for a node, in order: what its category asks, then the
    widest of its float inputs, then float32 (lazily: the first one nearly always works)."""
    if cat is Category.TARGET:
        yield "target", {k: target for k in acts}
    elif cat is Category.FOLLOW:
        yield "follow", {k: cur[k] for k in acts}
    if cat is not Category.FP32 and acts:
        w = widest({cur[k] for k in acts})
        yield "widest", {k: w for k in acts}
    fp32 = {k: ("float32" if cur[k] in LOW_PRECISION else cur[k]) for k in acts}
    yield "fp32", fp32
    if new_body:
        yield "fp32-original-body", fp32


def _convert_subgraph(graph: Graph, policy: OpPolicy, excluded, op_types: OpTypes) -> Graph:
    """A loop/cond body converted with a float32 interface, so the outer op's typing holds."""
    data = {}
    for n in graph.variables():
        code = n.attrs.get("__dtype__")
        data[n.name] = "float32" if code is None else _name_of_code(code)
    return insert_casts(graph, policy, data_dtypes=data, param_dtypes={}, excluded=excluded,
                        output_dtype="float32", op_types=op_types).graph


def _name_of_code(code: str) -> str:
    from ..dtypes import MX_NAME
    try:
        return MX_NAME[int(code)]
    except (ValueError, KeyError):
        return "float32"
