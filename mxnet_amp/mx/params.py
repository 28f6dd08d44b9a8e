"""Recast arg/aux params to the dtypes type inference gives a converted graph."""
from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence

import numpy as np

from ..errors import ParamError
from ..ir.dtypes import array_dtype, bfloat16_np
from ..warn import warn_user
from .arguments import name_list
from .hardware import bf16_runs_natively
from .registry import op_input_names

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet.ndarray import NDArray

    from ..ir.graph import Graph

__all__ = ["cast_array", "write_array", "bfloat16_bits", "recast_params", "check_params", "default_data_names", "model_inputs",
           "check_data_names", "label_inputs", "with_labels"]


def cast_array(array: NDArray, dtype: str) -> NDArray:
    """A new NDArray holding ``array`` in ``dtype``, rounded to nearest even.

    ``NDArray.astype('bfloat16')`` truncates in MXNet 1.9.1 (twice the error of rounding);
    the ``amp_cast`` operator rounds, so casts go through it. For bfloat16 it reads a copy:
    a weight that a oneDNN kernel has used is held in oneDNN's blocked layout, ``amp_cast``
    keeps that layout, and MXNet 1.9.1's bfloat16 grouped convolution then fails on the
    result ("could not create a primitive descriptor for a reorder primitive"); a copy is
    plain. oneDNN runs no float16 kernels on a CPU, so a float16 weight skips the copy (one
    op per weight instead of two: a conversion's param casts are its largest cost).
    """
    if isinstance(array, np.ndarray):
        return write_array(array, dtype)
    if dtype == "bfloat16" and not bf16_runs_natively():
        # without oneDNN's bf16 kernels MXNet's amp_cast to bfloat16 runs ~50 ns an element
        # (0.11 s for a 2.4M weight; numpy: 3 ms), asynchronously: its cost surfaced in the
        # next synchronous call, BatchNorm folding's array copies (issue 42)
        return _bf16_ndarray(bfloat16_bits(array.asnumpy()), array.ctx)
    source = _invoke("_copy", [array], ())[0] if dtype == "bfloat16" else array
    return _invoke("amp_cast", [source], (("dtype", dtype),))[0]


def write_array(values: np.ndarray, dtype: str | None = None, ctx: Any = None) -> NDArray:
    """A float32 numpy array (BatchNorm folding's weights) as an NDArray in ``dtype``
    (default float32) on ``ctx`` (default the CPU): the same bits :func:`cast_array` gives
    the array's NDArray, with no copy before the cast (a numpy array's layout is plain)."""
    import mxnet as mx
    ctx = ctx or mx.cpu()
    if dtype == "bfloat16" and not bf16_runs_natively():
        return _bf16_ndarray(bfloat16_bits(values), ctx)
    if dtype is None or dtype == array_dtype(values) or ctx.device_type != "cpu":
        array = mx.nd.array(values, ctx=ctx, dtype=values.dtype)
        return array if dtype is None or dtype == array_dtype(array) else cast_array(array, dtype)
    # the cast reads the numpy memory itself (DLPack holds a reference to it; from_numpy
    # marks what it is given read-only: a view, so the caller's array is left writable)
    source = mx.nd.from_numpy(np.ascontiguousarray(values).view(), zero_copy=True)
    return _invoke("amp_cast", [source], (("dtype", dtype),))[0]


def _bf16_ndarray(bits: np.ndarray, ctx: Any) -> NDArray:
    """A bfloat16 NDArray holding ``bits`` (uint16, one per value), copied in by MXNet's C
    API: ``array[:] = ...`` converts the bits through numpy's structured bfloat16 stand-in
    first, 10-50x slower (measured on 2.4M values)."""
    import ctypes

    import mxnet as mx
    from mxnet.base import _LIB, check_call
    array = mx.nd.empty(bits.shape, ctx=ctx, dtype=bfloat16_np)
    bits = np.ascontiguousarray(bits, dtype=np.uint16)
    check_call(_LIB.MXNDArraySyncCopyFromCPU(array.handle, bits.ctypes.data_as(ctypes.c_void_p),
                                             ctypes.c_size_t(bits.size)))
    return array


# elements rounded per step: the uint32 temporaries stay in the CPU's cache
_ROUND_STEP = 1 << 16


def bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """``values`` (float32) rounded to bfloat16 as MXNet's ``amp_cast`` rounds them here, as
    uint16 bits: to nearest even, float32 subnormals flushed to a zero, a NaN kept quiet;
    the signs of the zeros are the machine's (:func:`_zero_signs`: oneDNN's reference
    conversion gives -0.0 as +0)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).reshape(-1).view(np.uint32)
    out = np.empty(bits.size, np.uint16)
    step = np.empty(min(bits.size, _ROUND_STEP), np.uint32)
    for start in range(0, bits.size, _ROUND_STEP):
        chunk = bits[start:start + _ROUND_STEP]
        t = step[:chunk.size]
        np.bitwise_and(chunk, 0x7F800000, out=t)
        special = t.min() == 0 or t.max() == 0x7F800000   # zeros, subnormals, inf, NaN
        np.right_shift(chunk, 16, out=t)
        np.bitwise_and(t, 1, out=t)
        np.add(t, 0x7FFF, out=t)
        np.add(t, chunk, out=t)     # wraps for a NaN near the top: fixed below
        np.right_shift(t, 16, out=t)
        out[start:start + chunk.size] = t
        if special:
            _special_bits(chunk, out[start:start + chunk.size])
    return out.reshape(np.shape(values))


def _special_bits(bits: np.ndarray, out: np.ndarray) -> None:
    """:func:`bfloat16_bits` of zeros, subnormals and NaNs, written into ``out``."""
    negative_zero, negative_subnormal = _zero_signs()
    magnitude = bits & np.uint32(0x7FFFFFFF)
    sign = (bits >> np.uint32(16)) & np.uint32(0x8000)
    subnormal = (magnitude > 0) & (magnitude < 0x00800000)
    out[subnormal] = np.where(sign[subnormal] != 0, negative_subnormal, 0)
    out[bits == 0x80000000] = negative_zero
    nan = magnitude > 0x7F800000
    out[nan] = (bits[nan] >> np.uint32(16)) | np.uint32(0x0040)


@functools.lru_cache(maxsize=None)
def _zero_signs() -> tuple[int, int]:
    """What MXNet's ``amp_cast`` gives -0.0 and a negative float32 subnormal in bfloat16 on
    this machine (0x8000 or 0); asked of MXNet once."""
    import mxnet as mx
    # filled in place: mx.nd.array would raise scipy's DeprecationWarning (MXNet's own
    # sparse check) inside a caller's warnings-as-errors block
    tiny = mx.nd.empty((2,), dtype="float32")
    tiny[:] = np.array([-0.0, -1e-40], dtype=np.float32)
    got = _invoke("amp_cast", [tiny], (("dtype", "bfloat16"),))[0].asnumpy().view(np.uint16).reshape(-1)
    return int(got[0]), int(got[1])


def _invoke(op: str, arrays: list, attrs: tuple) -> list:
    """``op(*arrays, **attrs)`` as one MXNet imperative call; its outputs, new NDArrays.

    What ``mx.nd.<op>`` does, less its per-call Python (building the argument arrays,
    formatting values), which costs as much as the op itself on a small weight."""
    import ctypes

    from mxnet.base import _LIB, NDArrayHandle, check_call
    from mxnet.ndarray import _ndarray_cls
    call = _op_call(op, attrs)
    outputs = ctypes.POINTER(NDArrayHandle)()
    num_outputs = ctypes.c_int(0)
    stypes = ctypes.POINTER(ctypes.c_int)()
    check_call(_LIB.MXImperativeInvokeEx(
        call.handle, len(arrays), (NDArrayHandle * len(arrays))(*[a.handle for a in arrays]),
        ctypes.byref(num_outputs), ctypes.byref(outputs), len(attrs), call.keys, call.values,
        ctypes.byref(stypes)))
    return [_ndarray_cls(ctypes.cast(outputs[i], NDArrayHandle), stype=stypes[i])
            for i in range(num_outputs.value)]


class _OpCall(NamedTuple):
    """An op's handle and its attribute names and values, as the C API takes them."""

    handle: Any
    keys: Any
    values: Any


@functools.lru_cache(maxsize=256)
def _op_call(op: str, attrs: tuple[tuple[str, str], ...]) -> _OpCall:
    """The op's handle and attributes as the C API takes them, built once."""
    import ctypes

    from mxnet.base import _LIB, c_str_array, check_call
    handle = ctypes.c_void_p()
    check_call(_LIB.NNGetOpHandle(op.encode(), ctypes.byref(handle)))
    return _OpCall(handle, c_str_array([k for k, _ in attrs]), c_str_array([v for _, v in attrs]))


# names Gluon and the symbol API give weights; an input called so is a weight gone missing
_WEIGHT_SUFFIXES = ("_weight", "_bias", "_gamma", "_beta", "_running_mean", "_running_var",
                    "_moving_mean", "_moving_var")


def model_inputs(arg_names: Sequence[str], arg_params: Mapping,
                 data_names: str | Iterable[str] | None, where: str = "arg_params",
                 labels: Iterable[str] = ()) -> list[str]:
    """The model inputs: ``data_names`` as given (a string is one name) plus the ``labels``
    without a param (:func:`with_labels`), else :func:`default_data_names` (the one rule
    every entry point uses)."""
    names = name_list(data_names)
    if names is None:
        return default_data_names(arg_names, arg_params, where)
    return with_labels(names, labels, arg_params)


def label_inputs(graph: Graph) -> list[str]:
    """The variables that feed an op's ``label`` input (``SoftmaxOutput``,
    ``LinearRegressionOutput``, ``SVMOutput``, ...): inputs, like Module's ``label_names``."""
    nodes = graph.nodes
    found: dict[str, None] = {}
    for node in nodes:
        if node.is_variable:
            continue
        for entry, name in zip(node.inputs, op_input_names(node.op)):
            if name == "label" and nodes[entry.node].is_variable:
                found[nodes[entry.node].name] = None
    return list(found)


def with_labels(data_names: Sequence[str], labels: Iterable[str], params: Mapping | set) -> list[str]:
    """``data_names`` plus each label variable that has no param: a Module user names the
    data only (``data_names=['data']``) and the label is an input all the same."""
    return [*data_names, *(n for n in labels if n not in data_names and n not in params)]


def default_data_names(arg_names: Sequence[str], arg_params: Mapping, where: str = "arg_params") -> list[str]:
    """The model inputs when the caller names none: the arguments without a param.

    Raises
    ------
    ParamError
        An argument without a param is named like a weight (``fc1_bias``): the params
        probably lack it, and treating it as a model input would hide that.
    """
    inputs = [n for n in arg_names if n not in arg_params]
    weights = [n for n in inputs if n.endswith(_WEIGHT_SUFFIXES)]
    if weights:
        raise ParamError(f"{where} lack {', '.join(weights)}, which the symbol reads"
                         + (_where_they_are(weights, arg_params) or "; if these are really model "
                            "inputs, name every input in data_names"))
    return inputs


def _where_they_are(missing: Sequence[str], arg_params: Mapping, aux_params: Mapping | None = None) -> str:
    """Where params the symbol misses are after all ('' if nowhere): under the ``arg:`` /
    ``aux:`` keys of a raw params file, or in the other of the two dicts."""
    wanted = set(missing)
    given = {**arg_params, **(aux_params or {})}
    prefixed = [k for k in given if k[:4] in ("arg:", "aux:") and k[4:] in wanted]
    if prefixed:
        return (f"; the params hold {', '.join(map(repr, sorted(prefixed)[:3]))}: keys with the "
                "'arg:'/'aux:' prefix of a params file (mx.nd.load), which "
                "mx.model.load_checkpoint strips; strip it")
    for name, here, there in (("arg_params", arg_params, "aux_params"),
                              ("aux_params", aux_params or {}, "arg_params")):
        misplaced = sorted(wanted & set(here))
        if misplaced:
            return f"; {', '.join(misplaced[:10])} are in {name}: pass them in {there}"
    return ""


def check_params(arg_names: Sequence[str], aux_names: Sequence[str], arg_params: Mapping,
                 aux_params: Mapping, data_names: Sequence[str], strict: bool = False) -> None:
    """Raise :class:`ParamError` when params and symbol disagree.

    Every non-data argument and every aux state needs a value. A param the symbol does not
    read is a warning naming it (a checkpoint with stale entries is common; they are kept
    as given, as ``mx.contrib.amp`` keeps them), an error with ``strict`` (it may mean the
    wrong params file). A model input
    in ``data_names`` that the symbol does not have, or a float param that is neither
    float32 nor already low precision (float64: cast the model to float32 first)."""
    check_data_names(arg_names, arg_params, data_names)
    data = set(data_names)
    missing_arg = [n for n in arg_names if n not in data and n not in arg_params]
    missing_aux = [n for n in aux_names if n not in aux_params]
    if missing_arg or missing_aux:
        hint = _where_they_are(missing_arg + missing_aux, arg_params, aux_params)
        raise ParamError("params missing for the symbol's inputs: "
                         + ", ".join(missing_arg + missing_aux)
                         + (hint or (" (if some are model inputs, pass them in data_names)"
                                     if missing_arg else "")))
    extra_arg = sorted(set(arg_params) - set(arg_names))
    extra_aux = sorted(set(aux_params) - set(aux_names))
    if extra_arg or extra_aux:
        extra = extra_arg + extra_aux
        shown = ", ".join(extra[:10]) + (f" and {len(extra) - 10} more" if len(extra) > 10 else "")
        if strict:
            raise ParamError(f"params the symbol does not use: {shown}; are these params from "
                             "another model? (strict_params=True)")
        warn_user(f"params the symbol does not use: {shown}; they are returned as given, not "
                  "converted (strict_params=True makes this an error)")
    dtypes = {k: array_dtype(v) for k, v in {**arg_params, **aux_params}.items()}
    wide = {k: v for k, v in dtypes.items() if v in _WIDE_FLOATS}
    if wide:
        names = ", ".join(f"{k!r} ({v})" for k, v in sorted(wide.items())[:10])
        raise ParamError(f"params {names} are not float32: mixed precision conversion starts "
                         "from a float32 model; cast them first "
                         "(e.g. {k: v.astype('float32') for k, v in params.items()})")


def check_data_names(arg_names: Sequence[str], arg_params: Mapping,
                     data_names: Sequence[str]) -> None:
    """:class:`ParamError` naming the ``data_names`` that are not arguments of the symbol."""
    unknown = [n for n in data_names if n not in arg_names]
    if unknown:
        raise ParamError(f"data_names {unknown} are not inputs of the symbol (its inputs: "
                         f"{[n for n in arg_names if n not in arg_params][:20]})")


# float dtypes a model to convert cannot hold: wider than float32
_WIDE_FLOATS = frozenset({"float64"})


def recast_params(params: Mapping, dtypes: Mapping[str, str | None],
                  current: Mapping[str, str] | None = None, sequential: bool = False, *,
                  in_place: bool = False, each: Callable[[str, Any, Any], None] | None = None) -> dict:
    """A new dict with each array cast to ``dtypes[name]``; arrays already right are shared,
    numpy arrays (folded weights) written as NDArrays (:func:`write_array`).

    ``current`` may give each array's dtype name when the caller knows it already. The
    input dict and its arrays are never modified. ``sequential``: finish each cast before
    starting the next (see :func:`mxnet_amp.convert.convert_model_full`); otherwise small
    arrays of one shape are cast together (:func:`_cast_together`). ``in_place``: cast one
    at a time into ``params`` itself (returned), each entry replaced as soon as its cast is
    queued, so each original is freed before the next is cast (a checkpoint converted with
    only one copy of each weight alive); ``each(name, before, after)`` is then called for
    every param."""
    if in_place:
        if not isinstance(params, dict):
            raise TypeError(f"recast_params(in_place=True) needs a dict, got {type(params).__name__}")
        return _recast_in_place(params, dtypes, each)
    out = {}
    todo: dict[_BatchKey, list[str]] = {}
    for name, value in params.items():
        want = dtypes.get(name)
        have = current[name] if current is not None else array_dtype(value)
        if want is None or have == want:
            out[name] = write_array(value) if isinstance(value, np.ndarray) else value
        elif sequential:
            out[name] = cast_array(value, want)
            out[name].wait_to_read()
        elif isinstance(value, np.ndarray) or (want == "bfloat16" and not bf16_runs_natively()):
            out[name] = cast_array(value, want)   # through numpy, one array at a time
        else:
            out[name] = None   # keeps the order of ``params``
            todo.setdefault(_batch_key(value, have, want), []).append(name)
    for key, names in todo.items():
        for chunk in _chunks(names, key):
            arrays = [params[n] for n in chunk]
            cast = (_cast_together(arrays, key.want) if len(chunk) > 1
                    else [cast_array(arrays[0], key.want)])
            out.update(zip(chunk, cast))
    return out


def _recast_in_place(params: dict, dtypes: Mapping[str, str | None],
                     each: Callable[[str, Any, Any], None] | None) -> dict:
    for name in list(params):
        before = params[name]
        want = dtypes.get(name)
        if want is not None and array_dtype(before) != want:
            # replacing the entry frees the original before the next one is cast
            params[name] = cast_array(before, want)
        elif isinstance(before, np.ndarray):
            params[name] = write_array(before)
        if each is not None:
            each(name, before, params[name])
    return params


# arrays cast together: at most this many elements each (bigger ones gain nothing from it,
# and the stacked copy would add to the peak memory) and this many bytes per group
_BATCH_MAX_SIZE = 1 << 16
_BATCH_MAX_BYTES = 16 << 20


class _BatchKey(NamedTuple):
    """Arrays with one key can be cast by one :func:`_cast_together` call: the same shape,
    device and dtypes. An array cast alone has no shape here and its own id as ``place``."""

    shape: tuple[int, ...] | None
    place: Any
    have: str | None
    want: str


def _batch_key(array: Any, have: str, want: str) -> _BatchKey:
    """The key of ``array``'s batch (a key of its own for an array cast alone)."""
    shape = array.shape
    if not 0 < math.prod(shape) <= _BATCH_MAX_SIZE or not shape or array.stype != "default":
        return _BatchKey(None, id(array), None, want)
    return _BatchKey(shape, array.ctx, have, want)


def _chunks(names: list[str], key: _BatchKey) -> Iterator[list[str]]:
    """``names`` (of one :func:`_batch_key`) in groups of at most ``_BATCH_MAX_BYTES``; one
    by one for a key of an array cast alone."""
    if key.shape is None:
        yield from ([n] for n in names)
        return
    step = max(1, _BATCH_MAX_BYTES // (4 * max(1, math.prod(key.shape))))
    for i in range(0, len(names), step):
        yield names[i:i + step]


def _cast_together(arrays: list, dtype: str) -> list:
    """:func:`cast_array` of same-shaped arrays in three MXNet calls instead of one or two
    per array: ``stack``, one ``amp_cast``, ``split`` (the same elementwise cast, so the
    same bits; each result is an array of its own). A 100k-node graph casts ~25k small
    weights, and each MXNet call costs tens of microseconds whatever the array's size.
    The stacked copy is plain, so bfloat16 needs no extra copy (see :func:`cast_array`)."""
    n = str(len(arrays))
    stacked = _invoke("stack", arrays, (("axis", "0"), ("num_args", n)))[0]
    cast = _invoke("amp_cast", [stacked], (("dtype", dtype),))[0]
    return _invoke("split", [cast], (("num_outputs", n), ("axis", "0"), ("squeeze_axis", "1")))
