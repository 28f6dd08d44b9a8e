"""Run a low precision model on any CPU with the low precision numerics simulated.

MXNet cannot execute float16 on a CPU, and bfloat16 matrix ops only on CPUs with avx512.
:func:`emulate_model` turns a converted model into a float32 one that holds, at every
tensor the converted graph keeps in low precision, exactly the value that dtype can hold:
each such tensor is rounded by a round trip ``amp_cast(amp_cast(x, low), float32)``, which
MXNet runs on any CPU. Rounding is to nearest even; values beyond the dtype's range become
±inf (beyond 65504 for float16), tiny ones become float16 subnormals or zero (below
2**-25); bfloat16 flushes what would be its subnormals (below 2**-126) to zero, as MXNet's
cast and the AVX512-BF16 conversion instruction do. The ops themselves compute in float32
with float32 accumulation, as GPU tensor cores and oneDNN's bf16 kernels do. Weights the
converted graph casts to low precision are rounded once, ahead of time.

For one elementwise op (add, multiply, divide, sqrt) computing in float32 and rounding once
gives exactly the IEEE result of computing in the low precision dtype (float32 has more
than twice the digits plus two), so those agree bit for bit with native execution.

MXNet's own bfloat16 kernels round differently: on a CPU, the ops oneDNN runs (convolution,
fully connected, batch norm, pooling, activations, elementwise add, concat, softmax) round to
nearest even, but every other op runs a generic kernel whose float-to-bfloat16 conversion
drops the low 16 bits, i.e. truncates toward zero (scalar arguments too: ``x * 1.37``
multiplies by 1.3671875). Truncation is biased, so through a graph with many such ops
(hard-swish, squeeze-excite products, bilinear resizing) the native error is several times
the round-to-nearest one. ``rounding='mxnet-cpu'`` models that (measured bit for bit per op
on an AVX512-BF16 CPU; reductions are truncated once at the end, where MXNet's mean also
truncates the sum before dividing); the default ``'nearest'`` is the dtype itself.

Not modelled: kernels that accumulate in low precision internally (some fp16 reductions),
a kernel rounding twice inside one op (a GPU FullyConnected rounds its product to float16
before adding the bias; here the sum is rounded once), fused-kernel differences, and low
precision intermediate values *inside* one op (softmax's exponentials when softmax itself
runs in float16). Speed and memory are float32's.
"""
from __future__ import annotations

from functools import lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping

from .dtypes import LOW_PRECISION, MX_CODE
from .errors import TargetDtypeError
from .graph import ANY_CAST_OPS, Entry, Graph, GraphBuilder, Node, cast_node
from .io import graph_from_symbol, graph_to_symbol
from .params import array_dtype, cast_array
from .passes.infer_dtypes import infer_dtypes

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    import numpy as np
    from mxnet.ndarray import NDArray
    from mxnet.symbol import Symbol

__all__ = ["emulate", "emulate_graph", "emulate_model", "round_array", "round_numpy", "ROUNDINGS"]

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


def _truncates(node: Node, dtype: str, rounding: str) -> bool:
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
    _check_rounding(rounding)
    dtypes = infer_dtypes(graph, var_dtypes)
    used = graph.num_used_outputs()
    builder = GraphBuilder()
    builder.names.update(n.name for n in graph.nodes)
    env: list[list[Entry]] = []
    for i, node in enumerate(graph.nodes):
        if node.is_variable:
            low = var_dtypes.get(node.name)
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
            env.append([e])
            continue
        inputs = tuple(env[e.node][e.index] for e in node.inputs)
        # a single cast (a multicast has no dtype attr) to low precision: round there
        if node.op in ANY_CAST_OPS and node.attrs.get("dtype") in LOW_PRECISION:
            low = node.attrs["dtype"]
            # keep the node's name on the float32 result so names stay stable
            first = builder.add(cast_node(builder.fresh_name(node.name + "_to_" + low), inputs[0], low)._replace(
                op="Cast" if node.op != "amp_cast" and _truncates(node, low, rounding) else "amp_cast"))
            env.append([Entry(builder.add(cast_node(node.name, Entry(first), "float32")))])
            continue
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
        for k in range(used[i]):
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
        env.append(outs)
    heads = [env[e.node][e.index] for e in graph.heads]
    return builder.build(heads, graph.attrs)


def _entry_dtype(dtypes, e: Entry) -> str | None:
    out = dtypes[e.node]
    return out[e.index] if e.index < len(out) else None


def round_array(array: NDArray, dtype: str) -> NDArray:
    """``array`` rounded to ``dtype`` and returned as float32 (a new NDArray, same context).

    Bit for bit what ``amp_cast`` to ``dtype`` and back gives; a float32 array's bfloat16
    rounding is done in numpy, some 10x faster than MXNet's CPU kernel."""
    if dtype == "bfloat16" and array_dtype(array) == "float32":
        import mxnet as mx
        return mx.nd.array(_bf16_round_np(array.asnumpy()), ctx=array.context, dtype="float32")
    return cast_array(cast_array(array, dtype), "float32")


def round_numpy(values: np.typing.ArrayLike, dtype: str) -> np.ndarray:
    """``values`` (a numpy array or anything ``np.asarray`` takes) as float32, rounded to
    ``dtype`` (``'float16'`` or ``'bfloat16'``) and returned as a new float32 numpy array:
    what :func:`round_array` gives, without an NDArray (to nearest even; float16 overflows
    to ±inf; bfloat16 flushes float32 subnormals to zero as ``amp_cast`` does here)."""
    import numpy as np
    if dtype not in LOW_PRECISION:
        raise TargetDtypeError(f"round_numpy: dtype must be 'float16' or 'bfloat16', got {dtype!r}")
    values = np.array(values, dtype=np.float32)  # a copy: the caller's array is not touched
    if dtype == "float16":
        with np.errstate(over="ignore"):  # beyond 65504 is inf, as amp_cast gives
            return values.astype(np.float16).astype(np.float32)
    return _bf16_round_np(values)


def _bf16_round_np(x):
    """float32 numpy array rounded to bfloat16 as MXNet's amp_cast does it on this machine:
    to nearest even, float32 subnormals flushed to zero, NaN kept quiet. The zero's sign is
    the machine's: oneDNN's AVX512-BF16 conversion keeps it, MXNet's kernel elsewhere
    gives +0 (:func:`_subnormal_flush_sign_mask`)."""
    import numpy as np
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    out = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    subnormal = (bits & np.uint32(0x7F800000)) == 0
    out[subnormal] = bits[subnormal] & np.uint32(_subnormal_flush_sign_mask())
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    out[nan] = (bits[nan] | np.uint32(0x00400000)) & np.uint32(0xFFFF0000)
    return out.view(np.float32)


@lru_cache(maxsize=None)
def _subnormal_flush_sign_mask() -> int:
    """0x80000000 when ``amp_cast`` to bfloat16 flushes a negative float32 subnormal to -0
    on this machine, else 0 (it gives +0); asked of MXNet once."""
    import mxnet as mx
    import numpy as np
    tiny = mx.nd.array(np.array([-1e-45, -1e-40], dtype=np.float32))
    flushed = cast_array(cast_array(tiny, "bfloat16"), "float32").asnumpy().view(np.uint32)
    return int(flushed[0] & np.uint32(0x80000000))


def _fold_param_casts(graph: Graph, params: Mapping) -> tuple[Graph, dict]:
    """An emulated ``graph`` whose weight roundings are done once, ahead of time.

    Each round trip ``amp_cast(amp_cast(w, low), float32)`` of a weight ``w`` in ``params``
    becomes a float32 variable (named after the outer cast, a name unique in the graph)
    holding the rounded weight. Same values as rounding in the graph, but done once instead
    of at every run: bfloat16 rounding is slow on CPU (a resnet18's weights cost seconds
    per forward pass). Returns the graph, without nodes nothing reads any more, and the
    rounded weights."""
    nodes = list(graph.nodes)
    rounded = {}
    for i, node in enumerate(graph.nodes):
        if node.op != "amp_cast" or node.attrs.get("dtype") != "float32":
            continue
        inner = graph.nodes[node.inputs[0].node]
        if inner.op != "amp_cast" or inner.attrs.get("dtype") not in LOW_PRECISION:
            continue
        src = graph.nodes[inner.inputs[0].node]
        if not src.is_variable or src.name not in params:
            continue
        attrs = {k: v for k, v in src.attrs.items() if k != "__dtype__"}
        nodes[i] = Node("null", node.name, (), MappingProxyType(attrs))
        rounded[node.name] = round_array(params[src.name], inner.attrs["dtype"])
    if not rounded:
        return graph, {}
    return _prune(Graph(tuple(nodes), graph.heads, graph.attrs)), rounded


def _prune(graph: Graph) -> Graph:
    """``graph`` without the nodes its heads do not depend on."""
    keep = [False] * len(graph.nodes)
    stack = [e.node for e in graph.heads]
    while stack:
        i = stack.pop()
        if not keep[i]:
            keep[i] = True
            stack.extend(e.node for e in graph.nodes[i].inputs)
    new_index, nodes = {}, []
    for i, node in enumerate(graph.nodes):
        if keep[i]:
            new_index[i] = len(nodes)
            nodes.append(node.replace(inputs=tuple(Entry(new_index[e.node], e.index, e.version)
                                                   for e in node.inputs)) if node.inputs else node)
    heads = tuple(Entry(new_index[e.node], e.index, e.version) for e in graph.heads)
    return Graph(tuple(nodes), heads, graph.attrs)


def emulate_model(sym: Symbol, arg_params: Mapping, aux_params: Mapping,
                  input_dtypes: Mapping[str, str] | None = None, rounding: str = "nearest", *,
                  copy_params: bool = True, stored_dtypes: Mapping[str, str] | None = None
                  ) -> tuple[Symbol, dict, dict]:
    """A float32 model that simulates the low precision model ``(sym, arg_params, aux_params)``.

    Parameters
    ----------
    sym : Symbol
        A converted (mixed precision) symbol, casts included.
    arg_params, aux_params : dict of str to NDArray
        Its params in the dtypes the converted model stores them (low precision ones are
        rounded to that dtype already; they are returned as float32 copies).
    input_dtypes : dict, optional
        Dtypes of the model inputs (default float32).
    copy_params : bool, default True
        False: no param copies: the returned params are the given arrays, low precision ones included, which the graph
        widens to float32 as it reads them, and weights the graph casts to low precision are
        rounded at every run instead of once. Same outputs; less memory, slower runs.
    stored_dtypes : dict of str to str, optional
        The dtype each param is stored in by the converted model, where ``arg_params`` and
        ``aux_params`` hold the float32 originals it was converted from
        (``convert_model_full(..., cast_params=False)``): the graph rounds each low
        precision one as it reads it, the way the conversion's cast would, so neither a low
        precision nor a rounded copy exists (what the automatic mode uses: its peak memory is
        the originals and one layer's rounding). Same outputs; ``copy_params`` is ignored.
    rounding : {'nearest', 'mxnet-cpu'}
        ``'nearest'``: every low precision op output rounded to nearest even, the dtype's
        own arithmetic (what GPU kernels and oneDNN do). ``'mxnet-cpu'``: as MXNet 1.9.1 runs
        bfloat16 natively on a CPU, where ops outside oneDNN truncate (module doc).

    Returns
    -------
    (Symbol, dict, dict)
        Runs on any CPU; outputs equal what the low precision model computes up to what the
        module documentation lists as not modelled. A weight the converted graph casts to
        low precision appears rounded, as a float32 param named after that cast (unless
        ``copy_params`` is False); the returned dicts hold exactly the params the returned
        symbol reads.
        The caller's symbol and dicts are not modified.
    """
    graph = graph_from_symbol(sym)
    var_dtypes = {k: array_dtype(v) for k, v in {**arg_params, **aux_params}.items()}
    if stored_dtypes is not None:
        given_low = sorted(k for k in stored_dtypes if var_dtypes.get(k, "float32") != "float32")
        if given_low:
            raise ValueError(f"stored_dtypes: the params must be the float32 originals; "
                             f"{given_low[:5]} are {var_dtypes[given_low[0]]}")
        var_dtypes.update((k, d) for k, d in stored_dtypes.items() if k in var_dtypes and d)
        copy_params = False
    for n in graph.variables():
        var_dtypes.setdefault(n.name, (input_dtypes or {}).get(n.name, "float32"))
    emulated = emulate_graph(graph, var_dtypes, rounding, keep_low_variables=not copy_params
                             and stored_dtypes is None, round_low_variables=stored_dtypes is not None)
    rounded = {}
    if copy_params:
        emulated, rounded = _fold_param_casts(emulated, arg_params)
    emulated = graph_to_symbol(emulated)
    arg_names = set(emulated.list_arguments())
    aux_names = set(emulated.list_auxiliary_states())

    def widen(params, wanted):
        return {k: (cast_array(v, "float32") if copy_params and array_dtype(v) in LOW_PRECISION
                    else v) for k, v in params.items() if k in wanted}
    return emulated, widen({**arg_params, **rounded}, arg_names), widen(aux_params, aux_names)


def emulate(sym: Symbol, arg_params: Mapping, aux_params: Mapping,
            input_dtypes: Mapping[str, str] | None = None,
            rounding: str = "nearest") -> tuple[Symbol, dict, dict]:
    """Alias of :func:`emulate_model`."""
    return emulate_model(sym, arg_params, aux_params, input_dtypes, rounding)
