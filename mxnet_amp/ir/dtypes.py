"""Dtype names and MXNet's integer type codes.

Inside mxnet-amp a dtype is its plain name (``'float32'``, ``'bfloat16'``, ``'int64'``);
numpy has no bfloat16, so names rather than numpy dtypes are what the graph carries.
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np

__all__ = ["array_dtype", "array_nbytes", "array_values", "FLOAT_DTYPES", "LOW_PRECISION", "MX_CODE", "MX_NAME", "DTYPE_ALIASES", "dtype_name",
           "is_float", "widest", "bfloat16_np", "dtype_of_code"]

# mshadow type flags (include/mshadow/base.h)
MX_CODE = {
    "float32": 0, "float64": 1, "float16": 2, "uint8": 3, "int32": 4, "int8": 5,
    "int64": 6, "bool": 7, "int16": 8, "uint16": 9, "uint32": 10, "uint64": 11, "bfloat16": 12,
}
MX_NAME = {code: name for name, code in MX_CODE.items()}

# short names users type (``--target-dtype fp16``, ``target_dtype="bf16"``), matched
# case-insensitively; numpy itself knows ``half`` but not ``fp16`` nor any bfloat16
DTYPE_ALIASES = {"fp16": "float16", "half": "float16", "bf16": "bfloat16",
                 "fp32": "float32", "single": "float32", "fp64": "float64"}

FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
LOW_PRECISION = frozenset({"float16", "bfloat16"})

# how wide a float dtype is, for amp_multicast semantics (bf16 and fp16 never meet in one graph)
_WIDTH = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}

# MXNet's numpy stand-in for bfloat16 (what NDArray.dtype reports for a bf16 array)
bfloat16_np = np.dtype([("bfloat16", np.uint16)])


def dtype_name(dtype: Any) -> str:
    """Return the plain name of ``dtype`` (a name, numpy dtype/type, or MXNet's bf16 stand-in)."""
    if isinstance(dtype, str):
        key = dtype.strip().lower()
        if key in MX_CODE:
            return key
        if key in DTYPE_ALIASES:
            return DTYPE_ALIASES[key]
    if isinstance(dtype, int) and not isinstance(dtype, bool) and dtype in MX_NAME:
        return MX_NAME[dtype]
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"not a dtype: {dtype!r}") from None
    if np_dtype == bfloat16_np:
        return "bfloat16"
    name = np_dtype.name
    if name not in MX_CODE:
        raise ValueError(f"dtype {name!r} has no MXNet type code")
    return name


def dtype_of_code(code: str | None) -> str | None:
    """The dtype name of a ``__dtype__`` attribute (MXNet's type code as text); None when
    there is none or it is no known code."""
    if code is None or not code.lstrip("-").isdigit():
        return None
    return MX_NAME.get(int(code))


def np_dtype(name: str) -> np.dtype:
    """What MXNet's NDArray API takes for dtype ``name`` (its stand-in for bfloat16)."""
    return bfloat16_np if name == "bfloat16" else np.dtype(name)


def is_float(dtype: str | None) -> bool:
    """True for a floating point dtype name."""
    return dtype in FLOAT_DTYPES


def widest(dtypes: Iterable[str]) -> str:
    """The widest float dtype among ``dtypes`` (names), as amp_multicast picks it."""
    return max(dtypes, key=lambda d: _WIDTH[d])


# NDArray.dtype is a numpy type (np.float32) or MXNet's bf16 stand-in: a few distinct values
_NAME_OF_ARRAY_DTYPE: dict[Any, str] = {}


def array_dtype(array: Any) -> str:
    """dtype name of an NDArray (bfloat16 included)."""
    dtype = array.dtype
    name = _NAME_OF_ARRAY_DTYPE.get(dtype)
    if name is None:
        name = _NAME_OF_ARRAY_DTYPE[dtype] = dtype_name(dtype)
    return name


def array_values(array: Any) -> np.ndarray:
    """An NDArray's values as a numpy array (a numpy array or a list as it is)."""
    return array.asnumpy() if hasattr(array, "asnumpy") else np.asarray(array)


def array_nbytes(array: Any) -> int:
    """Bytes of an NDArray's data (bfloat16 counted as 2 bytes)."""
    return int(np.prod(array.shape, dtype=np.int64)) * np_dtype(array_dtype(array)).itemsize
