"""Recast arg/aux params to the dtypes type inference gives a converted graph."""
from __future__ import annotations

import functools
from typing import Mapping

from .dtypes import dtype_name
from .errors import ParamError

__all__ = ["array_dtype", "cast_array", "recast_params", "check_params", "default_data_names", "check_param_shapes"]


# NDArray.dtype is a numpy type (np.float32) or MXNet's bf16 stand-in: a few distinct values
_NAME_OF_ARRAY_DTYPE: dict = {}


def array_dtype(array) -> str:
    """dtype name of an NDArray (bfloat16 included)."""
    dtype = array.dtype
    name = _NAME_OF_ARRAY_DTYPE.get(dtype)
    if name is None:
        name = _NAME_OF_ARRAY_DTYPE[dtype] = dtype_name(dtype)
    return name


def cast_array(array, dtype: str):
    """A new NDArray holding ``array`` in ``dtype``, rounded to nearest even.

    ``NDArray.astype('bfloat16')`` truncates in MXNet 1.9.1 (twice the error of rounding);
    the ``amp_cast`` operator rounds, so casts go through it. For bfloat16 it reads a copy:
    a weight that a oneDNN kernel has used is held in oneDNN's blocked layout, ``amp_cast``
    keeps that layout, and MXNet 1.9.1's bfloat16 grouped convolution then fails on the
    result ("could not create a primitive descriptor for a reorder primitive"); a copy is
    plain. oneDNN runs no float16 kernels on a CPU, so a float16 weight skips the copy (one
    op per weight instead of two: a conversion's param casts are its largest cost).
    """
    from mxnet._ctypes.ndarray import _imperative_invoke
    source = array.copy() if dtype == "bfloat16" else array
    return _imperative_invoke(_amp_cast_handle(), [source], ["dtype"], [dtype], None, False, False)


@functools.lru_cache(maxsize=None)
def _amp_cast_handle() -> int:
    import ctypes

    from mxnet.base import _LIB, check_call
    handle = ctypes.c_void_p()
    check_call(_LIB.NNGetOpHandle(b"amp_cast", ctypes.byref(handle)))
    return handle.value


# names Gluon and the symbol API give weights; an input called so is a weight gone missing
_WEIGHT_SUFFIXES = ("_weight", "_bias", "_gamma", "_beta", "_running_mean", "_running_var",
                    "_moving_mean", "_moving_var")


def default_data_names(arg_names, arg_params: Mapping, where: str = "arg_params") -> list[str]:
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
        raise ParamError(f"{where} lack {', '.join(weights)}, which the symbol reads; if these "
                         "are really model inputs, name every input in data_names")
    return inputs


def check_params(arg_names, aux_names, arg_params: Mapping, aux_params: Mapping,
                 data_names) -> None:
    """Raise :class:`ParamError` when params and symbol disagree.

    Every non-data argument and every aux state needs a value; a param the symbol does not
    read is an error too (it usually means the wrong params file)."""
    data_names = set(data_names)
    missing_arg = [n for n in arg_names if n not in data_names and n not in arg_params]
    missing_aux = [n for n in aux_names if n not in aux_params]
    if missing_arg or missing_aux:
        raise ParamError("params missing for the symbol's inputs: "
                         + ", ".join(missing_arg + missing_aux)
                         + (" (if some are model inputs, pass them in data_names)" if missing_arg else ""))
    extra_arg = sorted(set(arg_params) - set(arg_names))
    extra_aux = sorted(set(aux_params) - set(aux_names))
    if extra_arg or extra_aux:
        raise ParamError("params the symbol does not use: " + ", ".join(extra_arg + extra_aux)
                         + "; are these params from another model?")


def _infer_shapes(sym, known: Mapping[str, tuple]):
    """``{input name: shape}`` from MXNet's partial shape inference (0 = unknown dim);
    raises MXNetError when the shapes contradict the graph."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # partial inference warns about unknown shapes
        args, _, auxs = sym.infer_shape_partial(**known)
    names = sym.list_arguments() + sym.list_auxiliary_states()
    return dict(zip(names, [tuple(s) if s is not None else None for s in list(args) + list(auxs)]))


def _readers(sym, name: str) -> str:
    from .io import graph_from_symbol
    graph = graph_from_symbol(sym)
    i = graph.index_of(name)
    users = sorted({f"{graph.nodes[j].name!r} ({graph.nodes[j].op})" for j, _ in graph.consumers()[i]})
    return ", ".join(users) or "no node"


def check_param_shapes(sym, arg_params: Mapping, aux_params: Mapping,
                       data_shapes: Mapping[str, tuple] | None = None) -> None:
    """Raise :class:`ParamError` when a param's shape contradicts the symbol.

    MXNet's shape inference runs with every param's shape (and ``data_shapes`` where
    given); on a contradiction the params are added one at a time, in the symbol's input
    order, to name the first one that breaks it, the nodes that read it and the shape the
    symbol expects there (0 marks a dimension that cannot be told without data shapes).
    Names neither in the symbol nor in the params are left to :func:`check_params`.

    Without ``data_shapes`` MXNet can check little (most ops infer nothing until their
    data shape is known), so give them where they are known.
    """
    import mxnet as mx
    inputs = sym.list_arguments() + sym.list_auxiliary_states()
    given = {k: tuple(v.shape) for k, v in {**arg_params, **aux_params}.items() if k in inputs}
    known = {k: tuple(v) for k, v in (data_shapes or {}).items() if k in inputs}
    try:
        inferred = _infer_shapes(sym, {**known, **given})
    except mx.base.MXNetError as err:
        first_error = str(err).strip().split("\n")[0]
    else:
        # aux states given as keywords are not checked by MXNet: compare what it inferred
        for name, shape in given.items():
            want = inferred.get(name)
            if want and all(want) and tuple(want) != shape:
                raise ParamError(f"param {name!r} has shape {shape} but the symbol expects "
                                 f"{tuple(want)} there (read by {_readers(sym, name)})")
        return
    partial = dict(known)
    expected = _infer_shapes(sym, partial) if partial else {}
    for name in inputs:
        if name not in given:
            continue
        try:
            expected_next = _infer_shapes(sym, {**partial, name: given[name]})
        except mx.base.MXNetError as err:
            want = expected.get(name)
            raise ParamError(
                f"param {name!r} has shape {given[name]} but the symbol expects "
                f"{want if want else 'another shape'} there (read by {_readers(sym, name)}); "
                f"MXNet: {str(err).strip().splitlines()[0][:300]}") from None
        partial[name] = given[name]
        expected = expected_next
    raise ParamError("the params' shapes contradict the symbol (data shapes "
                     f"{dict(known)}): {first_error[:300]}")


def recast_params(params: Mapping, dtypes: Mapping[str, str],
                  current: Mapping[str, str] | None = None) -> dict:
    """A new dict with each array cast to ``dtypes[name]``; arrays already right are shared.

    ``current`` may give each array's dtype name when the caller knows it already. The
    input dict and its arrays are never modified."""
    out = {}
    for name, value in params.items():
        want = dtypes.get(name)
        have = current[name] if current is not None else array_dtype(value)
        if want is None or have == want:
            out[name] = value
        else:
            out[name] = cast_array(value, want)
    return out
