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

MXNet 1.x's GPU kernels add a Convolution's, Deconvolution's or FullyConnected's bias in
a second step: cuBLAS / cuDNN write the product to the float16 output, then ``AddBias`` /
``cudnnAddTensor`` add the bias to it, so the product is rounded to float16 before the bias
is added and the sum rounded again. ``bias_rounding='auto'`` (the default) models that for
float16; bfloat16 runs on oneDNN, whose primitives add the bias before the one rounding
(``'separate'`` / ``'fused'`` choose one way for both dtypes).

Not modelled: kernels that accumulate in low precision internally (some fp16 reductions),
rounding inside a fused recurrent op (cuDNN's float16 LSTM keeps its gates and states in
float16 between steps; here the RNN computes in float32 and rounds its outputs once),
fused-kernel and algorithm differences (accumulation order), and low precision
intermediate values *inside* one op (softmax's exponentials when softmax itself runs in
float16). Speed and memory are float32's.
"""
from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Mapping

from .errors import ArgumentError, ParamError, StrippedCastsError, TargetDtypeError
from .ir.dtypes import LOW_PRECISION, array_dtype
from .ir.graph import Entry
from .kernels.build import kernel_state
from .mx.arguments import check_bool, check_dtype_map, check_symbol, param_dict
from .mx.io import graph_from_symbol, graph_to_symbol
from .mx.params import cast_array
from .passes.emulate import EmulateGraph, check_rounding, emulate_graph
from .passes.fold_param_casts import fold_param_casts
from .passes.round_kernels import RoundWithKernels
from .stripped_casts import stripped_dtype, stripped_message

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    import numpy as np
    from mxnet.ndarray import NDArray
    from mxnet.symbol import Symbol

    from .record import Conversion
    from .ir.graph import Graph

__all__ = ["emulate", "emulate_model", "emulate_conversion", "round_array", "round_numpy",
           "round_weights_once", "with_kernels", "rounding_note"]


def round_array(array: NDArray, dtype: str) -> NDArray:
    """``array`` rounded to ``dtype`` and returned as float32 (a new NDArray, same context).

    Bit for bit what ``amp_cast`` to ``dtype`` and back gives; a float32 array's bfloat16
    rounding is done in numpy, some 10x faster than MXNet's CPU kernel."""
    if dtype == "bfloat16" and array_dtype(array) == "float32":
        import mxnet as mx
        return mx.nd.array(_bf16_round_np(array.asnumpy()), ctx=array.ctx, dtype="float32")
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


def _bf16_round_np(x: np.ndarray) -> np.ndarray:
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


def emulate_model(sym: Symbol, arg_params: Mapping, aux_params: Mapping,
                  input_dtypes: Mapping[str, str] | None = None, rounding: str = "nearest", *,
                  copy_params: bool = True, stored_dtypes: Mapping[str, str | None] | None = None,
                  bias_rounding: str = "auto") -> tuple[Symbol, dict, dict]:
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
    bias_rounding : {'auto', 'separate', 'fused'}
        How a biased Convolution / Deconvolution / FullyConnected in low precision adds its
        bias. ``'separate'``: as MXNet's GPU kernels, the product rounded to the low
        precision dtype, the bias added, the sum rounded again. ``'fused'``: the sum
        rounded once (oneDNN's bfloat16 primitives). ``'auto'``: ``'separate'`` for float16
        (which runs on GPUs only), ``'fused'`` for bfloat16.

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
    sym, copy_params = check_symbol(sym), check_bool(copy_params, "copy_params")
    for what, params in (("arg_params", arg_params), ("aux_params", aux_params)):
        if params is None:
            raise ParamError(f"emulate_model: {what} is None: pass the model's params as a dict of "
                             "name to NDArray ({} where it has none)")
    arg_params, aux_params = param_dict(arg_params, "arg_params"), param_dict(aux_params, "aux_params")
    check_rounding(rounding, bias_rounding)
    graph = graph_from_symbol(sym)
    input_dtypes = check_dtype_map(input_dtypes, "input_dtypes",  # type: ignore[assignment]
                                   (n.name for n in graph.variables()))
    stored_dtypes = check_dtype_map(stored_dtypes, "stored_dtypes", optional_values=True)
    var_dtypes = _variable_dtypes(arg_params, aux_params, stored_dtypes, "stored_dtypes")
    if stored_dtypes is None:   # (given float32 originals, nothing can be stripped)
        _refuse_stripped(graph, sym, var_dtypes, input_dtypes)
    copy_params = copy_params and stored_dtypes is None
    var_dtypes = {**{n.name: (input_dtypes or {}).get(n.name, "float32") for n in graph.variables()}, **var_dtypes}
    emulated = emulate_graph(graph, var_dtypes, rounding, keep_low_variables=not copy_params
                             and stored_dtypes is None, round_low_variables=stored_dtypes is not None,
                             bias_rounding=bias_rounding)
    rounded = {}
    if copy_params:
        # weight roundings done once, ahead of time (bfloat16 rounding is slow on a CPU)
        emulated, sources = fold_param_casts(emulated, arg_params)
        rounded = {name: round_array(arg_params[src], low) for name, (src, low) in sources.items()}
    emulated = graph_to_symbol(emulated)
    arg_names = set(emulated.list_arguments())
    aux_names = set(emulated.list_auxiliary_states())

    def widen(params: Mapping, wanted: set[str]) -> dict:
        return {k: (cast_array(v, "float32") if copy_params and array_dtype(v) in LOW_PRECISION
                    else v) for k, v in params.items() if k in wanted}
    return emulated, widen({**arg_params, **rounded}, arg_names), widen(aux_params, aux_names)


def _refuse_stripped(graph: Graph, sym: Symbol, param_dtypes: Mapping[str, str],
                     input_dtypes: Mapping[str, str] | None) -> None:
    """:class:`~mxnet_amp.errors.StrippedCastsError` for a converted model saved without its
    casts (MXNet's "This layer requires uniform type" otherwise)."""
    low = stripped_dtype(graph, sym, param_dtypes, input_dtypes)
    if low is not None:
        raise StrippedCastsError(stripped_message("emulate_model: the model", param_dtypes, low))
def _variable_dtypes(arg_params: Mapping, aux_params: Mapping,
                     stored_dtypes: Mapping[str, str | None] | None, what: str) -> dict[str, str]:
    """Each param's dtype in the emulated model: its array's, or with ``stored_dtypes`` (the
    params then must be float32 originals) the dtype the converted model stores it in."""
    var_dtypes = {k: array_dtype(v) for k, v in {**arg_params, **aux_params}.items()}
    if stored_dtypes is not None:
        given_low = sorted(k for k in stored_dtypes if var_dtypes.get(k, "float32") != "float32")
        if given_low:
            raise ArgumentError(f"{what}: the params must be the float32 originals; "
                             f"{given_low[:5]} are {var_dtypes[given_low[0]]}")
        var_dtypes.update((k, d) for k, d in stored_dtypes.items() if k in var_dtypes and d)
    return var_dtypes


def emulate_conversion(conversion: Conversion, arg_params: Mapping, aux_params: Mapping,
                       input_dtypes: Mapping[str, str] | None = None,
                       rounding: str = "nearest") -> tuple[Symbol, dict, dict]:
    """:func:`emulate_model` of a conversion's model from the float32 originals it was
    converted from (``convert_model_full(..., cast_params=False)``), reading what the
    conversion decided instead of deriving it again: its graph (no symbol to JSON to graph),
    each tensor's dtype as the pass gave it (no type inference) and each param's stored
    dtype. Same model as ``emulate_model(conversion.symbol, arg_params, aux_params,
    input_dtypes, rounding, stored_dtypes=...)``; what the automatic mode's checks run.
    """
    graph = conversion.graph
    stored = conversion.variable_dtypes
    var_dtypes = _variable_dtypes(arg_params, aux_params, stored, "emulate_conversion")
    tensor = conversion.result.tensor_dtypes
    used = graph.num_used_outputs()
    node_dtypes: list[tuple[str | None, ...]] = []
    for i, node in enumerate(graph.nodes):
        if node.is_variable:
            var_dtypes.setdefault(node.name, (input_dtypes or {}).get(node.name, "float32"))
            node_dtypes.append((var_dtypes[node.name],))
        else:
            node_dtypes.append(tuple(tensor.get(Entry(i, k)) for k in range(used[i])))
    emulated = graph_to_symbol(EmulateGraph(var_dtypes, rounding, round_low_variables=True,
                                            node_dtypes=node_dtypes)(graph).graph)
    arg_names = set(emulated.list_arguments())
    aux_names = set(emulated.list_auxiliary_states())
    return (emulated, {k: v for k, v in arg_params.items() if k in arg_names},
            {k: v for k, v in aux_params.items() if k in aux_names})


def round_weights_once(sym: Symbol, params: Mapping) -> tuple[Symbol, dict]:
    """An emulated model whose weights the graph rounds at every run (``stored_dtypes`` /
    :func:`emulate_conversion`) with those roundings done once, now.

    Each round trip ``amp_cast(amp_cast(w, low), float32)`` of a param ``w`` becomes a
    float32 variable holding ``w`` rounded (:func:`round_array`, the same bits), so a model
    run over many batches rounds its weights once instead of once per batch (resnet50's 25M
    weights cost more per batch than its activations' roundings). Returns the symbol and
    its params: the rounded ones, and the given ones the symbol still reads (the same
    arrays); the caller's dict is not modified. A model with no such round trip comes back
    as it is. Memory: the rounded copies, while the caller holds the originals."""
    graph = graph_from_symbol(sym)
    folded, sources = fold_param_casts(graph, params)
    if not sources:
        return sym, dict(params)
    rounded = {name: round_array(params[src], low) for name, (src, low) in sources.items()}
    new_sym = graph_to_symbol(folded)
    wanted = set(new_sym.list_inputs())
    return new_sym, {**{k: v for k, v in params.items() if k in wanted}, **rounded}


def with_kernels(sym: Symbol, shapes: Mapping[str, tuple], dtypes: Mapping[str, str]
                 ) -> tuple[Symbol, str]:
    """An emulated model about to run here, with its roundings done by the compiled kernels
    (:mod:`mxnet_amp.kernels`, :mod:`mxnet_amp.passes.round_kernels`: the same bits, one
    vectorised pass each) where they are loaded in this process, and a line saying which
    rounding runs.

    ``shapes`` and ``dtypes``: every input's (params and data), as the run feeds them. The
    symbol comes back as it is where the kernels are off or not built (``MXNET_AMP_NO_KERNELS``,
    no compiler), an input is not float32 (the kernels round float32 values), it has no
    round trip, or the kernels' graph does not infer the same shapes from ``shapes`` (their
    ops cannot infer a shape backwards, which an unrolled LSTM's begin state needs)."""
    state = kernel_state()
    if not state.loaded:
        return sym, state.describe()
    casts = "rounding by MXNet's casts"
    if any(d != "float32" for d in dtypes.values()):
        return sym, f"{casts} (an input is not float32)"
    graph = graph_from_symbol(sym)
    result = RoundWithKernels(flush_sign=bool(_subnormal_flush_sign_mask()))(graph)
    if not result.changed:
        return sym, f"{casts} (no round trip to run as a kernel)"
    fast = graph_to_symbol(result.graph)
    expected = _inferred_shapes(sym, shapes)
    if expected is None or _inferred_shapes(fast, shapes) != expected:
        return sym, f"{casts} (the kernels' graph does not infer the model's shapes)"
    return fast, state.describe()


def _inferred_shapes(sym: Symbol, shapes: Mapping[str, tuple]) -> tuple[dict, list] | None:
    """``sym``'s input shapes (arguments and auxiliary states, by name: the names are
    distinct) and output shapes (in order) inferred from ``shapes``; None where MXNet
    cannot infer them all."""
    import mxnet as mx
    wanted = set(sym.list_inputs())
    try:
        args, outs, auxs = sym.infer_shape(**{k: v for k, v in shapes.items() if k in wanted})
    except mx.base.MXNetError:
        return None
    if args is None or outs is None or auxs is None:
        return None
    return ({**dict(zip(sym.list_arguments(), args)), **dict(zip(sym.list_auxiliary_states(), auxs))},
            list(outs))


def rounding_note() -> str:
    """How an emulated check rounds in this process: by the compiled kernels, or by MXNet's
    casts and why (a report's note)."""
    return "the emulation's " + kernel_state().describe()


def emulate(sym: Symbol, arg_params: Mapping, aux_params: Mapping,
            input_dtypes: Mapping[str, str] | None = None,
            rounding: str = "nearest", *, bias_rounding: str = "auto") -> tuple[Symbol, dict, dict]:
    """Alias of :func:`emulate_model`."""
    return emulate_model(sym, arg_params, aux_params, input_dtypes, rounding,
                         bias_rounding=bias_rounding)
