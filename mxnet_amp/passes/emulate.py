"""The emulation pass: a converted graph as a float32 graph that rounds every tensor the
converted graph holds in low precision (the numerics are described in
:mod:`mxnet_amp.emulation`, which runs this pass on models)."""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping, Sequence

from ..dtypes import LOW_PRECISION, MX_CODE
from ..graph import ANY_CAST_OPS, Entry, Graph, Node, cast_node
from .infer_dtypes import infer_dtypes
from .kernel import GraphPass, Outputs, PassResult, Rewriter

__all__ = ["emulate_graph", "EmulateGraph", "ROUNDINGS"]

# how each low precision op output is rounded (module doc): the dtype's own rounding, or
# MXNet 1.9.1's CPU kernels (bfloat16 ops outside oneDNN truncate)
ROUNDINGS = ("nearest", "mxnet-cpu")
# ops whose bfloat16 CPU kernel in MXNet 1.9.1 is oneDNN's, which rounds to nearest even
# (measured; ops that only move or select values, such as reshape, max pooling or relu,
# give the same result either way and need not be listed)
_ONEDNN_BF16_OPS = frozenset({
    "Convolution", "Deconvolution", "FullyConnected", "BatchNorm", "Pooling", "Activation",
    "LeakyReLU", "elemwise_add", "_add", "_plus", "_Plus", "add_n", "ElementWiseSum",
    "Concat", "concat", "softmax", "log_softmax", "LRN", "amp_cast", "amp_multicast"})
# scalar ops: MXNet converts the float scalar to the input dtype first (truncating for bf16)
_SCALAR_OPS = frozenset({
    "_plus_scalar", "_minus_scalar", "_rminus_scalar", "_mul_scalar", "_div_scalar",
    "_rdiv_scalar", "_maximum_scalar", "_minimum_scalar", "_power_scalar", "_rpower_scalar",
    "_mod_scalar", "_rmod_scalar", "_hypot_scalar"})


def _check_rounding(rounding: str) -> None:
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")


def _truncates(node: Node, dtype: str | None, rounding: str) -> bool:
    """Whether ``node``'s ``dtype`` output is truncated rather than rounded (module doc)."""
    return rounding == "mxnet-cpu" and dtype == "bfloat16" and node.op not in _ONEDNN_BF16_OPS


def _truncated_scalar(node: Node) -> Node:
    """A bfloat16 scalar op with its scalar as MXNet's kernel sees it: truncated."""
    import numpy as np
    value = np.array([float(node.attrs["scalar"])], dtype=np.float32)
    value = (value.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    return node.replace(attrs=MappingProxyType({**node.attrs, "scalar": repr(float(value[0]))}))


def emulate_graph(graph: Graph, var_dtypes: Mapping[str, str], rounding: str = "nearest",
                  keep_low_variables: bool = False, round_low_variables: bool = False) -> Graph:
    """The float32 graph that simulates ``graph``'s low precision tensors (see module doc).

    ``var_dtypes``: the dtype each variable has in the converted model (model inputs and
    stored weights); low precision weights become float32 variables holding rounded values,
    or, with ``keep_low_variables``, stay low precision variables read through a cast to
    float32 (exact), so their arrays need no float32 copy, or, with
    ``round_low_variables``, float32 variables holding the unrounded originals, which the
    graph rounds as it reads them (no copy of any kind).
    ``rounding``: ``'nearest'`` (the dtype's rounding) or ``'mxnet-cpu'`` (bfloat16 outputs
    of ops outside oneDNN truncated, as MXNet 1.9.1's CPU kernels do; module doc).
    """
    return EmulateGraph(var_dtypes, rounding, keep_low_variables, round_low_variables)(graph).graph


class EmulateGraph(GraphPass[None]):
    """:func:`emulate_graph` as a pass (its output holds round trips: cast chains on purpose)."""

    name = "emulate_graph"
    cast_chains = True

    def __init__(self, var_dtypes: Mapping[str, str], rounding: str = "nearest",
                 keep_low_variables: bool = False, round_low_variables: bool = False, *,
                 node_dtypes: Sequence[tuple[str | None, ...]] | None = None,
                 verify: bool = True) -> None:
        # node_dtypes: each node's output dtypes where the caller knows them already (the
        # conversion's record); else MXNet's type inference gives them (infer_dtypes)
        super().__init__(verify=verify)
        _check_rounding(rounding)
        self.node_dtypes = node_dtypes
        self.var_dtypes, self.rounding = var_dtypes, rounding
        self.keep_low_variables, self.round_low_variables = keep_low_variables, round_low_variables

    def call(self, graph: Graph) -> PassResult[None]:
        """Run the pass on ``graph`` (see the class)."""
        return PassResult(_Emulator(graph, self).run(), None, True)


class _Emulator(Rewriter):
    name = "emulate_graph"

    def __init__(self, graph: Graph, options: EmulateGraph) -> None:
        super().__init__(graph)
        self.var_dtypes, self.rounding = options.var_dtypes, options.rounding
        self.keep_low_variables = options.keep_low_variables
        self.round_low_variables = options.round_low_variables
        self.dtypes = (options.node_dtypes if options.node_dtypes is not None
                       else infer_dtypes(graph, self.var_dtypes))
        self.used = graph.num_used_outputs()
        self.builder.names.update(n.name for n in graph.nodes)

    def rewrite_node(self, i: int, node: Node) -> Outputs:
        if node.is_variable:
            return self._variable(node)
        # a single cast (a multicast has no dtype attr) to low precision: round there
        if node.op in ANY_CAST_OPS and node.attrs.get("dtype") in LOW_PRECISION:
            return self._cast(node, self.inputs(node))
        return self._op(i, node, self.inputs(node))

    def _variable(self, node: Node) -> Outputs:
        builder = self.builder
        keep_low_variables, round_low_variables = self.keep_low_variables, self.round_low_variables
        low = self.var_dtypes.get(node.name)
        low = low if low in LOW_PRECISION else None
        if low and not keep_low_variables and "__dtype__" in node.attrs:
            node = node.replace(attrs=MappingProxyType({**node.attrs,
                                                        "__dtype__": str(MX_CODE["float32"])}))
        e = Entry(builder.add(node))
        if low and round_low_variables:
            # the rounding the conversion would do to the stored weight (amp_cast: nearest)
            e = Entry(builder.add(cast_node(builder.fresh_name(node.name + "_to_" + low), e, low)))
        if low and (keep_low_variables or round_low_variables):
            e = Entry(builder.add(cast_node(builder.fresh_name(node.name + "_as_float32"), e,
                                            "float32")))
        return [e]

    def _cast(self, node: Node, inputs: tuple[Entry, ...]) -> Outputs:
        builder, rounding = self.builder, self.rounding
        low = node.attrs["dtype"]
        # keep the node's name on the float32 result so names stay stable
        first = builder.add(cast_node(builder.fresh_name(node.name + "_to_" + low), inputs[0], low)._replace(
            op="Cast" if node.op != "amp_cast" and _truncates(node, low, rounding) else "amp_cast"))
        return [Entry(builder.add(cast_node(node.name, Entry(first), "float32")))]

    def _op(self, i: int, node: Node, inputs: tuple[Entry, ...]) -> Outputs:
        builder, rounding, dtypes = self.builder, self.rounding, self.dtypes
        if node.subgraphs:
            # loop / cond bodies were converted with a float32 interface: emulate inside
            node = node.replace(subgraphs=tuple(
                emulate_graph(g, {v.name: "float32" for v in g.variables()}, rounding)
                for g in node.subgraphs))
        if (node.op in _SCALAR_OPS and "scalar" in node.attrs and node.inputs
                and _truncates(node, _entry_dtype(dtypes, node.inputs[0]), rounding)):
            node = _truncated_scalar(node)
        idx = builder.add(node.replace(inputs=inputs) if inputs != node.inputs else node)
        outs = []
        for k in range(self.used[i]):
            e = Entry(idx, k)
            low = dtypes[i][k] if k < len(dtypes[i]) else None
            if low in LOW_PRECISION:
                base = node.name + (f"_out{k}" if k else "")
                # MXNet's Cast truncates to bfloat16 where amp_cast rounds
                to_low = builder.add(cast_node(builder.fresh_name(f"{base}_round_{low}"), e, low)._replace(
                    op="Cast" if _truncates(node, low, rounding) else "amp_cast"))
                e = Entry(builder.add(cast_node(builder.fresh_name(f"{base}_round_float32"),
                                                Entry(to_low), "float32")))
            outs.append(e)
        return outs


def _entry_dtype(dtypes: Sequence[tuple[str | None, ...]], e: Entry) -> str | None:
    out = dtypes[e.node]
    return out[e.output] if e.output < len(out) else None
