"""The emulation pass: a converted graph as a float32 graph that rounds every tensor the
converted graph holds in low precision (the numerics are described in
:mod:`mxnet_amp.emulation`, which runs this pass on models)."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Sequence

from ..errors import ArgumentError
from ..ir.dtypes import LOW_PRECISION, MX_CODE
from ..ir.graph import ANY_CAST_OPS, Entry, Graph, GraphBuilder, Node, cast_node
from .infer_dtypes import infer_dtypes
from .kernel import GraphPass, Outputs, PassResult, Rewriter

__all__ = ["emulate_graph", "EmulateGraph", "ROUNDINGS", "BIAS_ROUNDINGS", "check_rounding"]

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

# ops whose every output value is one of their input values (or +0: relu), so that from
# inputs the low precision dtype holds they give values it holds, and rounding their
# outputs again changes no bit (Activation and Pooling: :func:`_selects_values`): a relu
# after a rounded convolution needs no round trip of its own (issue 41: rounding was the
# emulation's main cost)
_SELECTING_OPS = frozenset({
    "relu", "Flatten", "flatten", "Reshape", "reshape", "transpose", "expand_dims",
    "squeeze", "Concat", "concat", "slice", "slice_axis", "SliceChannel", "split",
    "_copy", "identity", "BlockGrad", "stop_gradient", "_maximum", "_minimum",
    "broadcast_maximum", "broadcast_minimum", "max", "min"})


def _selects_values(node: Node, dtypes: Sequence[tuple[str | None, ...]], low: str) -> bool:
    """Whether ``node`` outputs only values of its inputs (:data:`_SELECTING_OPS`, a relu
    Activation, a max Pooling) and every input is held in ``low``: from inputs this pass
    rounded (``_Emulator.exact``), its outputs are then exactly what ``low`` holds."""
    if node.op == "Activation":
        selects = node.attrs.get("act_type") == "relu"
    elif node.op == "Pooling":
        selects = node.attrs.get("pool_type", "max") == "max"
    else:
        selects = node.op in _SELECTING_OPS
    return selects and bool(node.inputs) and all(_entry_dtype(dtypes, e) == low for e in node.inputs)

# where a low precision conv / dense layer's bias is added (:func:`_adds_bias_separately`):
# 'auto' as the kernel that runs the dtype does (float16: MXNet's GPU kernels, after the
# product is rounded; bfloat16: oneDNN, inside the primitive), or one way for every dtype
BIAS_ROUNDINGS = ("auto", "separate", "fused")
# ops whose MXNet 1.x GPU kernel writes the product (cuBLAS GEMM, cuDNN convolution) to the
# low precision output first and then adds the bias in a second kernel that reads it
# (fully_connected-inl.h FCForward: linalg_gemm then AddBias; cudnn_convolution-inl.h and
# cudnn_deconvolution-inl.h Forward: the cuDNN call then cudnnAddTensor)
_BIAS_AFTER_PRODUCT_OPS = frozenset({
    "FullyConnected", "_npx_fully_connected", "Convolution", "_npx_convolution",
    "Deconvolution", "_npx_deconvolution"})


def check_rounding(rounding: str, bias_rounding: str = "auto") -> None:
    """:class:`~mxnet_amp.errors.ArgumentError` for a ``rounding`` or ``bias_rounding`` that
    is not one of the choices."""
    if not isinstance(rounding, str) or rounding not in ROUNDINGS:
        raise ArgumentError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
    if not isinstance(bias_rounding, str) or bias_rounding not in BIAS_ROUNDINGS:
        raise ArgumentError(f"bias_rounding must be one of {BIAS_ROUNDINGS}, got {bias_rounding!r}")


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
                  keep_low_variables: bool = False, round_low_variables: bool = False,
                  bias_rounding: str = "auto") -> Graph:
    """The float32 graph that simulates ``graph``'s low precision tensors (see module doc).

    ``var_dtypes``: the dtype each variable has in the converted model (model inputs and
    stored weights); low precision weights become float32 variables holding rounded values,
    or, with ``keep_low_variables``, stay low precision variables read through a cast to
    float32 (exact), so their arrays need no float32 copy, or, with
    ``round_low_variables``, float32 variables holding the unrounded originals, which the
    graph rounds as it reads them (no copy of any kind).
    ``rounding``: ``'nearest'`` (the dtype's rounding) or ``'mxnet-cpu'`` (bfloat16 outputs
    of ops outside oneDNN truncated, as MXNet 1.9.1's CPU kernels do; module doc).
    ``bias_rounding``: where a biased Convolution / Deconvolution / FullyConnected computing
    in low precision adds its bias (:func:`_adds_bias_separately`): ``'auto'`` (float16 as
    MXNet's GPU kernels: the product rounded, then the bias added and the sum rounded;
    bfloat16 as oneDNN: the sum rounded once), ``'separate'`` or ``'fused'`` for every dtype.
    """
    return EmulateGraph(var_dtypes, rounding, keep_low_variables, round_low_variables,
                        bias_rounding=bias_rounding)(graph).graph


class EmulateGraph(GraphPass[None]):
    """:func:`emulate_graph` as a pass (its output holds round trips: cast chains on purpose)."""

    name = "emulate_graph"
    cast_chains = True
    names_new_nodes = True

    def __init__(self, var_dtypes: Mapping[str, str], rounding: str = "nearest",
                 keep_low_variables: bool = False, round_low_variables: bool = False, *,
                 node_dtypes: Sequence[tuple[str | None, ...]] | None = None,
                 bias_rounding: str = "auto", verify: bool = True) -> None:
        # node_dtypes: each node's output dtypes where the caller knows them already (the
        # conversion's record); else MXNet's type inference gives them (infer_dtypes)
        super().__init__(verify=verify)
        check_rounding(rounding, bias_rounding)
        self.node_dtypes, self.bias_rounding = node_dtypes, bias_rounding
        self.var_dtypes, self.rounding = var_dtypes, rounding
        self.keep_low_variables, self.round_low_variables = keep_low_variables, round_low_variables

    def call(self, graph: Graph) -> PassResult[None]:
        """Run the pass on ``graph`` (see the class)."""
        dtypes = (self.node_dtypes if self.node_dtypes is not None
                  else infer_dtypes(graph, self.var_dtypes))
        state = _Emulation(dtypes, graph.num_used_outputs())
        return PassResult(self.node_loop(graph, state).run(), None, True)

    def rewrite_node(self, loop: Rewriter, i: int, node: Node) -> Outputs:
        """A variable, a cast to low precision or an op, emulated in float32 (see the class)."""
        if node.is_variable:
            return self._variable(loop, node)
        # a single cast (a multicast has no dtype attr) to low precision: round there
        if node.op in ANY_CAST_OPS and node.attrs.get("dtype") in LOW_PRECISION:
            return self._cast(loop, node, loop.inputs(node))
        return self._op(loop, i, node, loop.inputs(node))

    def _variable(self, loop: Rewriter, node: Node) -> Outputs:
        builder, exact = loop.builder, loop.state.exact
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
            exact.add(e)
        return [e]

    def _cast(self, loop: Rewriter, node: Node, inputs: tuple[Entry, ...]) -> Outputs:
        builder, rounding = loop.builder, self.rounding
        low = node.attrs["dtype"]
        # keep the node's name on the float32 result so names stay stable
        first = builder.add(cast_node(builder.fresh_name(node.name + "_to_" + low), inputs[0], low)._replace(
            op="Cast" if node.op != "amp_cast" and _truncates(node, low, rounding) else "amp_cast"))
        out = Entry(builder.add(cast_node(node.name, Entry(first), "float32")))
        loop.state.exact.add(out)
        return [out]

    def _op(self, loop: Rewriter, i: int, node: Node, inputs: tuple[Entry, ...]) -> Outputs:
        state: _Emulation = loop.state
        builder, rounding, dtypes, exact = loop.builder, self.rounding, state.dtypes, state.exact
        if node.subgraphs:
            # loop / cond bodies were converted with a float32 interface: emulate inside
            node = node.replace(subgraphs=tuple(
                emulate_graph(g, {v.name: "float32" for v in g.variables()}, rounding,
                              bias_rounding=self.bias_rounding)
                for g in node.subgraphs))
        if (node.op in _SCALAR_OPS and "scalar" in node.attrs and node.inputs
                and _truncates(node, _entry_dtype(dtypes, node.inputs[0]), rounding)):
            node = _truncated_scalar(node)
        out_dtype = dtypes[i][0] if dtypes[i] else None
        if out_dtype is not None and _adds_bias_separately(node, out_dtype, self.bias_rounding):
            out = _bias_step(builder, node, inputs, out_dtype, _rounding_op(node, out_dtype, rounding))
            exact.add(out)
            return [out]
        idx = builder.add(node.replace(inputs=inputs) if inputs != node.inputs else node)
        outs = []
        for k in range(state.used[i]):
            e = Entry(idx, k)
            low = dtypes[i][k] if k < len(dtypes[i]) else None
            if low in LOW_PRECISION:
                if not (_selects_values(node, dtypes, low) and all(x in exact for x in inputs)):
                    e = _round(builder, e, low, node.name + (f"_out{k}" if k else ""),
                               _rounding_op(node, low, rounding))
                exact.add(e)
            outs.append(e)
        return outs


@dataclass
class _Emulation:
    """One run's state: each node's output dtypes, how many outputs of each are used, and
    the entries of the new graph whose values the low precision dtype holds because this
    pass rounded them (or read them exactly from a low precision variable): a selecting op
    reading only these needs no round trip. A low precision variable the pass neither
    rounds nor keeps is not one: its caller may feed it any float32 values (the
    attribution's teacher forcing does)."""

    dtypes: Sequence[tuple[str | None, ...]]
    used: list[int]
    exact: set[Entry] = field(default_factory=set)


def _entry_dtype(dtypes: Sequence[tuple[str | None, ...]], e: Entry) -> str | None:
    out = dtypes[e.node]
    return out[e.output] if e.output < len(out) else None


def _rounding_op(node: Node, dtype: str, rounding: str) -> str:
    """The cast that rounds ``node``'s ``dtype`` output: MXNet's ``Cast`` truncates to
    bfloat16 where ``amp_cast`` rounds to nearest even."""
    return "Cast" if _truncates(node, dtype, rounding) else "amp_cast"


def _round(builder: GraphBuilder, e: Entry, low: str, base: str, op: str) -> Entry:
    """``e`` rounded to ``low`` by ``op`` and widened back to float32 (exact)."""
    to_low = builder.add(cast_node(builder.fresh_name(f"{base}_round_{low}"), e, low)._replace(op=op))
    return Entry(builder.add(cast_node(builder.fresh_name(f"{base}_round_float32"),
                                       Entry(to_low), "float32")))


# --- the bias step of MXNet's GPU conv / dense kernels -------------------------------------

def _adds_bias_separately(node: Node, dtype: str | None, bias_rounding: str) -> bool:
    """Whether ``node``, computing in ``dtype``, is emulated with its bias added after its
    product is rounded (:func:`_bias_step`): a biased op of ``_BIAS_AFTER_PRODUCT_OPS`` in
    low precision, under ``'separate'``, or under ``'auto'`` in float16 (GPU kernels; the
    bfloat16 ops of oneDNN add the bias inside the primitive and round once)."""
    if dtype not in LOW_PRECISION or node.op not in _BIAS_AFTER_PRODUCT_OPS or len(node.inputs) < 3:
        return False
    if node.attrs.get("no_bias", "False").strip().lower() in ("true", "1"):
        return False
    return bias_rounding == "separate" or (bias_rounding == "auto" and dtype == "float16")


def _bias_shape(node: Node) -> tuple[int, ...] | None:
    """The shape that puts a conv's bias on its output's channel axis for broadcast_add;
    None where that is the last axis already (FullyConnected, channel-last layouts)."""
    if node.op in ("FullyConnected", "_npx_fully_connected"):
        return None
    layout = node.attrs.get("layout", "None")
    if layout not in ("None", "") and layout.endswith("C"):
        return None
    spatial = [k for k in node.attrs.get("kernel", "").strip("()[] ").split(",") if k.strip()]
    return (1, -1) + (1,) * len(spatial)


def _bias_step(builder: GraphBuilder, node: Node, inputs: tuple[Entry, ...], low: str,
               op: str) -> Entry:
    """``node`` as MXNet 1.x's GPU kernel computes it in ``low``: the product without bias
    (float32 accumulation) rounded to ``low``, then the (rounded) bias added and the sum
    rounded again. The product node keeps ``node``'s name.

    Shapes must still flow both ways, as through the op itself: the op reads a zero bias
    of the bias's shape (``p + 0`` is ``p``), so it still infers the bias's shape, and the
    sum passes through MXNet's ``_identity_with_attr_like_rhs`` (a copy whose shape is tied
    to the rounded product's), so the product's shape can come from what reads the sum (an
    unrolled LSTM's first step learns its batch size so)."""
    def add(op_name: str, suffix: str, ins: tuple[Entry, ...],
            attrs: Mapping[str, str] | None = None) -> Entry:
        return Entry(builder.add(Node(op_name, builder.fresh_name(node.name + suffix), ins,
                                      MappingProxyType(attrs or {}))))
    bias = inputs[2]
    zero_bias = add("zeros_like", "_zero_bias", (bias,))
    product = _round(builder, Entry(builder.add(node.replace(inputs=inputs[:2] + (zero_bias,)))),
                     low, node.name, op)
    shape = _bias_shape(node)
    if shape is not None:
        bias = add("Reshape", "_bias_reshape", (bias,), {"shape": str(shape)})
    total = add("broadcast_add", "_plus_bias", (product, bias))
    total = add("_identity_with_attr_like_rhs", "_plus_bias_shaped", (total, product))
    return _round(builder, total, low, node.name + "_plus_bias", op)
