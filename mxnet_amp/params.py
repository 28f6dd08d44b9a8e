"""Recast arg/aux params to the dtypes type inference gives a converted graph."""
from __future__ import annotations

from typing import Mapping

from .dtypes import dtype_name
from .errors import ParamError

__all__ = ["array_dtype", "cast_array", "recast_params", "check_params"]


def array_dtype(array) -> str:
    """dtype name of an NDArray (bfloat16 included)."""
    return dtype_name(array.dtype)


def cast_array(array, dtype: str):
    """A new NDArray holding ``array`` in ``dtype``, rounded to nearest even.

    ``NDArray.astype('bfloat16')`` truncates in MXNet 1.9.1 (twice the error of rounding);
    the ``amp_cast`` operator rounds, so casts go through it.
    """
    import ctypes

    from mxnet._ctypes.ndarray import _imperative_invoke
    from mxnet.base import _LIB, check_call
    handle = ctypes.c_void_p()
    check_call(_LIB.NNGetOpHandle(b"amp_cast", ctypes.byref(handle)))
    return _imperative_invoke(handle.value, [array], ["dtype"], [dtype], None, False, False)


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
                         + (f" (if some are model inputs, pass them in data_names)" if missing_arg else ""))
    extra_arg = sorted(set(arg_params) - set(arg_names))
    extra_aux = sorted(set(aux_params) - set(aux_names))
    if extra_arg or extra_aux:
        raise ParamError("params the symbol does not use: " + ", ".join(extra_arg + extra_aux)
                         + "; are these params from another model?")


def recast_params(params: Mapping, dtypes: Mapping[str, str]) -> dict:
    """A new dict with each array cast to ``dtypes[name]``; arrays already right are shared.

    The input dict and its arrays are never modified."""
    out = {}
    for name, value in params.items():
        want = dtypes.get(name)
        if want is None or array_dtype(value) == want:
            out[name] = value
        else:
            out[name] = cast_array(value, want)
    return out
