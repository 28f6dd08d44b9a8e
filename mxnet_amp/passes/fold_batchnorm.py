"""Fold inference BatchNorms into the Convolution / FullyConnected / Deconvolution before them.

``BatchNorm`` and ``_contrib_SyncBatchNorm`` alike (:data:`BATCHNORM_OPS`): at inference
both apply their moving statistics.

At inference a BatchNorm is an affine map per channel, ``y = x * s + t`` with
``s = gamma / sqrt(moving_var + eps)`` (``gamma`` taken as 1 under ``fix_gamma``) and
``t = beta - moving_mean * s``. When it reads the output of a linear op that nothing else
reads, ``s`` and ``t`` go into that op's weight and bias: one op and one pass over the
activations less, and (the reason to do it before a low precision conversion) the folded
weight is computed in float32 and rounded once, instead of a bf16/fp16 conv output being
scaled again in low precision, or oneDNN's own conv+BN fusion folding in low precision.

A BatchNorm is left alone (with the reason recorded) when its input is read by another node
or is a model output, when its mean/var outputs are read, when it is itself a model output
(folding would rename that output), when its axis is not the producer's channel axis, when
a weight it needs is not a float32 param, or when the producer's weight or bias is shared
with another node. Everything not folded keeps its name; the producer keeps its name and
its weight's name, and a producer without a bias gets one, named ``<producer>_bias``.

Moving statistics are used whatever ``use_global_stats`` says: the result is an inference
graph (MXNet's BatchNorm with ``is_train=False`` uses them too).

The statistics of every BatchNorm to fold are checked first: a negative or non-finite
``moving_var`` (or a non-finite gamma, beta or ``moving_mean``) raises
:class:`~mxnet_amp.errors.ParamError` naming the param and its first bad entries, before
anything is built (folding it would write NaN weights; a model whose BatchNorms were never
run in training, ``net.initialize()`` and a running var set by hand, has such values).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from ..errors import ParamError
from ..ir.dtypes import array_values, dtype_name
from ..ir.graph import Entry, Graph, GraphBuilder, Node, attr_ints
from .kernel import GraphPass, Outputs, PassResult, Rewriter

__all__ = ["FoldResult", "fold_batchnorm", "FoldBatchnorm", "FOLDABLE_OPS", "BATCHNORM_OPS"]

# ops whose output channel is an affine function of a weight slice plus a bias
FOLDABLE_OPS = frozenset({"Convolution", "FullyConnected", "Deconvolution"})
# the BatchNorm ops folded: at inference SyncBatchNorm is BatchNorm (moving statistics; its
# batch statistics are synchronised across devices only in training)
BATCHNORM_OPS = frozenset({"BatchNorm", "_contrib_SyncBatchNorm"})

# MXNet 1.9.1's parameter defaults (src/operator/nn/*-inl.h)
_NO_BIAS_DEFAULT = {"Convolution": False, "FullyConnected": False, "Deconvolution": True}
_BN_EPS_DEFAULT = 1e-3


@dataclass(frozen=True)
class FoldResult:
    """What :func:`fold_batchnorm` produced."""

    graph: Graph
    # every param of the new graph: unchanged arrays shared with the input, folded ones new
    # float32 numpy arrays (NDArrays on the weight's context off the CPU), written as
    # NDArrays by the recast (mxnet_amp.mx.params.recast_params)
    params: Mapping[str, Any]
    # (BatchNorm name, producer name) for each BatchNorm folded away
    folded: tuple[tuple[str, str], ...]
    # (BatchNorm name, why it was kept) for each BatchNorm left in the graph
    skipped: tuple[tuple[str, str], ...]


def fold_batchnorm(graph: Graph, params: Mapping[str, Any],
                   keep: Mapping[str, str] = MappingProxyType({})) -> FoldResult:
    """Fold each foldable BatchNorm of ``graph`` into the op before it.

    Parameters
    ----------
    graph : Graph
        An fp32 graph (not modified).
    params : mapping of str to NDArray or numpy array
        Every weight of the graph, arg and aux alike (not modified; arrays that do not
        change are shared with the result).
    keep : mapping of str to str
        Node names kept float32, each with its reason
        (:attr:`mxnet_amp.options.ConvertOptions.fp32_nodes`): a BatchNorm named here, or
        one whose producer is named here, stays as it is, and says that reason.

    Returns
    -------
    FoldResult
        The new graph, its params, and what was folded or skipped and why.

    Raises
    ------
    ParamError
        A BatchNorm to fold has a negative or non-finite ``moving_var``, or a non-finite
        gamma, beta or ``moving_mean`` (checked before anything is built).
    """
    return FoldBatchnorm(params, keep)(graph).decided


class FoldBatchnorm(GraphPass[FoldResult]):
    """:func:`fold_batchnorm` as a pass: decides a :class:`FoldResult` (graph and params)."""

    name = "fold_batchnorm"
    names_new_nodes = True

    def __init__(self, params: Mapping[str, Any], keep: Mapping[str, str] = MappingProxyType({}), *,
                 verify: bool = True) -> None:
        super().__init__(verify=verify)
        self.params, self.keep = params, keep

    def call(self, graph: Graph) -> PassResult[FoldResult]:
        """Run the pass on ``graph`` (see the class)."""
        current, params = graph, self.params
        folded: list[tuple[str, str]] = []
        while True:
            # again after a fold: a BatchNorm that read a folded BatchNorm now reads the
            # producer (gluoncv's cifar_wideresnet stem: conv -> BN -> BN)
            plans, skipped = _plan(current, params, self.keep)
            for plan in plans.values():   # before anything is built
                _check_statistics(current, current.nodes[plan.bn], params)
            if not plans:
                break
            fold = _fold_state(current, params, plans)
            new = self.node_loop(current, fold).run()
            folded += [(current.nodes[b].name, current.nodes[p.producer].name) for b, p in plans.items()]
            current, params = new, fold.new_params
        if not folded:
            return PassResult(graph, FoldResult(graph, dict(self.params), (), tuple(skipped)), False)
        return PassResult(current, FoldResult(current, params, tuple(folded), tuple(skipped)), True)

    def rewrite_node(self, loop: Rewriter, i: int, node: Node) -> Outputs:
        """A round's node loop: drops the folded BatchNorms and their variables, and
        rewrites each producer with its folded weights."""
        fold: _Fold = loop.state
        if i in fold.dropped:
            return ()   # nothing kept reads it
        if i in fold.plans:
            # readers of the BatchNorm read its producer, which now computes the same values
            return loop.env[fold.plans[i].producer]
        if i not in fold.producers:
            return loop.copy(node)
        node, inputs = _fold_into(loop.builder, loop.graph, fold.producers[i], loop.inputs(node),
                                  fold.params, fold.new_params)
        return loop.emit(node.replace(inputs=inputs) if inputs != node.inputs else node)


@dataclass(frozen=True)
class _Fold:
    """One round's state: its plans (BatchNorm index -> plan), each producer's plan, the
    variables dropped, the params before the round and after it (filled as the loop goes)."""

    plans: dict[int, _Plan]
    producers: dict[int, _Plan]
    dropped: set[int]
    params: Mapping[str, Any]
    new_params: dict[str, Any]


def _fold_state(graph: Graph, params: Mapping[str, Any], plans: dict[int, _Plan]) -> _Fold:
    dropped = _dropped_variables(graph, plans)
    new_params = dict(params)
    for i in dropped:
        new_params.pop(graph.nodes[i].name, None)
    return _Fold(plans, {plan.producer: plan for plan in plans.values()}, dropped, params, new_params)


@dataclass(frozen=True)
class _Plan:
    producer: int        # index of the Convolution / FullyConnected / Deconvolution
    bn: int              # index of the BatchNorm


def _plan(graph: Graph, params: Mapping[str, Any],
          keep: Mapping[str, str]) -> tuple[dict[int, _Plan], list[tuple[str, str]]]:
    """``({bn index: _Plan}, [(bn name, why skipped)])``."""
    consumers = graph.consumers()
    head_nodes = {e.node for e in graph.heads}
    plans: dict[int, _Plan] = {}
    skipped: list[tuple[str, str]] = []
    for i, node in enumerate(graph.nodes):
        if node.op not in BATCHNORM_OPS:
            continue
        why = _why_not(graph, i, params, keep, consumers, head_nodes)
        if why:
            skipped.append((node.name, why))
        else:
            plans[i] = _Plan(node.inputs[0].node, i)
    return plans, skipped


def _why_not(graph: Graph, i: int, params: Mapping[str, Any], keep: Mapping[str, str],
             consumers: list[list[tuple[int, int]]], head_nodes: set[int]) -> str | None:
    """Why the BatchNorm at ``i`` cannot be folded, or None when it can."""
    bn = graph.nodes[i]
    if len(bn.inputs) != 5:
        return "it does not have the five inputs (data, gamma, beta, mean, var) of a BatchNorm"
    src = bn.inputs[0]
    prod = graph.nodes[src.node]
    if prod.op not in FOLDABLE_OPS:
        return f"its input comes from {prod.op}, not from {'/'.join(sorted(FOLDABLE_OPS))}"
    if bn.name in keep:
        return f"it stays float32: {keep[bn.name]}"
    if prod.name in keep:
        return f"its producer {prod.name!r} stays float32: {keep[prod.name]}"
    if i in head_nodes:
        return "it is a model output (folding would rename the output)"
    if src.node in head_nodes or [c for c, _ in consumers[src.node]] != [i]:
        return f"the output of {prod.name!r} is read by another node or is a model output"
    if any(graph.nodes[c].inputs[pos].output != 0 for c, pos in consumers[i]):
        return "its batch mean / var outputs are read"
    if prod.subgraphs or any(e.output != 0 for e in bn.inputs[1:]):
        return "unsupported graph structure around it"
    axis = _channel_axis(prod)
    if axis is None or _bn_axis(bn, prod) != axis:
        return f"its axis is not the channel axis of {prod.name!r}"
    weights = [e.node for e in prod.inputs[1:]] + [e.node for e in bn.inputs[1:]]
    for k in weights:
        var = graph.nodes[k]
        if not var.is_variable or var.name not in params:
            return f"{var.name!r} is not a param"
        if dtype_name(params[var.name].dtype) != "float32":
            return f"param {var.name!r} is not float32"
    for e in prod.inputs[1:]:
        if len(consumers[e.node]) != 1:
            return f"the weight {graph.nodes[e.node].name!r} of {prod.name!r} is shared"
    return None


def _check_statistics(graph: Graph, bn: Node, params: Mapping[str, Any]) -> None:
    """:class:`ParamError` naming the first bad entries of ``bn``'s gamma, beta, mean or var."""
    names = [graph.nodes[e.node].name for e in bn.inputs[1:]]
    for role, name in zip(("gamma", "beta", "moving_mean", "moving_var"), names):
        if role == "gamma" and _flag(bn.attrs, "fix_gamma", True):
            continue   # read as 1 whatever it holds
        values = array_values(params[name]).reshape(-1)
        bad = ~np.isfinite(values)
        if role == "moving_var":
            # what folding divides by is sqrt(var + eps): a trained BatchNorm on a channel that
            # is always the same stores variances a rounding below zero (-4.6e-13, measured on
            # mobilenet1.0), which fold fine
            bad |= values + _eps(bn) <= 0
        if bad.any():
            where = np.flatnonzero(bad)
            shown = ", ".join(f"[{k}]={float(values[k]):g}" for k in where[:5].tolist())
            kind = "negative or non-finite" if role == "moving_var" else "non-finite"
            raise ParamError(
                f"BatchNorm {bn.name!r}: its {role} param {name!r} has {where.size} "
                f"{kind} entr{'y' if where.size == 1 else 'ies'} of {values.size} ({shown}"
                f"{', ...' if where.size > 5 else ''}); folding it would write NaN weights. "
                "Train or calibrate the BatchNorm statistics first, or convert with "
                "fold_batchnorm=False (--no-fold-bn)")


def _eps(bn: Node) -> float:
    """The epsilon a BatchNorm adds to its variance (MXNet's default where unset)."""
    return float(bn.attrs.get("eps", _BN_EPS_DEFAULT))


def _flag(attrs: Mapping[str, str], key: str, default: bool) -> bool:
    value = attrs.get(key)
    return default if value is None else value.strip().lower() in ("true", "1")


def _output_ndim(prod: Node) -> int | None:
    if prod.op == "FullyConnected":
        return 2 if _flag(prod.attrs, "flatten", True) else None
    kernel = prod.attrs.get("kernel")
    return len(attr_ints(kernel)) + 2 if kernel else None


def _channel_axis(prod: Node) -> int | None:
    """The producer's output channel axis, non-negative, or -1 for FullyConnected without
    flatten (its rank is not known from the graph); None when it cannot be told."""
    if prod.op == "FullyConnected":
        return 1 if _flag(prod.attrs, "flatten", True) else -1
    layout = prod.attrs.get("layout")
    if layout in (None, "None", ""):
        return 1
    return layout.index("C") if "C" in layout else None


def _bn_axis(bn: Node, prod: Node) -> int | None:
    axis = int(bn.attrs.get("axis", "1"))
    ndim = _output_ndim(prod)
    if ndim is None:
        return -1 if axis == -1 else None
    return axis + ndim if axis < 0 else axis


def _dropped_variables(graph: Graph, plans: Mapping[int, _Plan]) -> set[int]:
    """Variables every reader of which is a folded BatchNorm."""
    consumers = graph.consumers()
    candidates = {e.node for b in plans for e in graph.nodes[b].inputs[1:]}
    return {k for k in candidates if all(c in plans for c, _ in consumers[k])}



def _like(value: np.ndarray, template: Any) -> Any:
    """``value`` (float32): kept in numpy when ``template`` is a numpy array or lives on the
    CPU, until the conversion writes it (:func:`mxnet_amp.mx.params.write_array`, once, in its
    stored dtype: an NDArray made here would be copied again by the cast); an NDArray on
    ``template``'s context otherwise (a GPU)."""
    if isinstance(template, np.ndarray) or template.ctx.device_type == "cpu":
        return value
    import mxnet as mx
    return mx.nd.array(value, ctx=template.ctx, dtype="float32")


def _scale_shift(bn: Node, graph_params: Mapping[str, Any],
                 names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per channel ``(s, t)`` of the BatchNorm, in float64."""
    gamma, beta, mean, var = (array_values(graph_params[n]).astype(np.float64) for n in names)
    if _flag(bn.attrs, "fix_gamma", True):
        gamma = np.ones_like(gamma)
    scale = gamma / np.sqrt(var + _eps(bn))
    return scale, beta - mean * scale


def _scaled_weight(prod: Node, weight: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``weight`` (float32) with each output channel's slice multiplied by its scale (rounded
    to float32 first): one float32 rounding per element."""
    shape = tuple(weight.shape)
    if prod.op != "Deconvolution":
        # Convolution (out, in/g, k...) and FullyConnected (out, in): output channel first
        grouped = shape
        factors = scale.reshape((-1,) + (1,) * (len(shape) - 1))
    else:
        # Deconvolution (in, out/g, k...): output channel g*out/g + j is group g's column j
        groups = int(prod.attrs.get("num_group", "1"))
        cin, cout_g = shape[:2]
        grouped = (groups, cin // groups, cout_g) + shape[2:]
        factors = scale.reshape((groups, 1, cout_g) + (1,) * (len(shape) - 2))
    return (weight.reshape(grouped) * factors.astype(np.float32)).reshape(shape)


def _fold_into(builder: GraphBuilder, graph: Graph, plan: _Plan, inputs: tuple[Entry, ...],
               params: Mapping[str, Any], new_params: dict) -> tuple[Node, tuple[Entry, ...]]:
    """The producer with folded weight and bias (a new bias variable added when it had none),
    and its new inputs; ``new_params`` gets the folded arrays."""
    prod, bn = graph.nodes[plan.producer], graph.nodes[plan.bn]
    scale, shift = _scale_shift(bn, params, [graph.nodes[e.node].name for e in bn.inputs[1:]])
    weight_name = graph.nodes[prod.inputs[1].node].name
    template = params[weight_name]
    # through numpy, not MXNet ops: a weight a oneDNN kernel used is held in a blocked
    # layout that MXNet's reshape / broadcast cannot always reorder
    new_params[weight_name] = _like(_scaled_weight(prod, array_values(template), scale), template)
    has_bias = not _flag(prod.attrs, "no_bias", _NO_BIAS_DEFAULT[prod.op]) and len(prod.inputs) > 2
    if has_bias:
        bias_name = graph.nodes[prod.inputs[2].node].name
        bias = array_values(params[bias_name]).astype(np.float64)
    else:
        bias_name = builder.fresh_name(f"{prod.name}_bias")
        bias = np.zeros_like(scale)
        entry = Entry(builder.add(Node("null", bias_name)))
        inputs = inputs[:2] + (entry,)
        prod = prod.replace(attrs=MappingProxyType({**prod.attrs, "no_bias": "False"}))
    new_params[bias_name] = _like((bias * scale + shift).astype(np.float32), template)
    return prod, inputs
