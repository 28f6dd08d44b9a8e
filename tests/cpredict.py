"""MXNet's C predict API (``MXPredCreate`` ...), called through ctypes for the tests.

The pip wheel of MXNet 1.9.1 has no Python binding for it (``amalgamation/python/
mxnet_predict.py`` is not shipped), but its ``libmxnet.so`` exports the C functions, which is
what C/C++ deployments call. MXPredCreate takes the symbol JSON text and the params file
bytes and binds without any dtype argument: each weight's dtype comes from the graph.
"""
from __future__ import annotations

import ctypes

import numpy as np

from mxnet.base import _LIB, check_call

_CPU = 1


class CPredictor:
    """One predictor built with ``MXPredCreate`` on the CPU; free it with :meth:`close`."""

    def __init__(self, symbol_json: str, param_bytes: bytes, shapes: dict[str, tuple]):
        keys = list(shapes)
        indptr, dims = [0], []
        for k in keys:
            dims.extend(shapes[k])
            indptr.append(len(dims))
        self.shapes = dict(shapes)
        self.handle = ctypes.c_void_p()
        check_call(_LIB.MXPredCreate(
            ctypes.c_char_p(symbol_json.encode()), ctypes.c_char_p(param_bytes),
            ctypes.c_int(len(param_bytes)), ctypes.c_int(_CPU), ctypes.c_int(0),
            ctypes.c_uint32(len(keys)), (ctypes.c_char_p * len(keys))(*[k.encode() for k in keys]),
            (ctypes.c_uint32 * len(indptr))(*indptr), (ctypes.c_uint32 * len(dims))(*dims),
            ctypes.byref(self.handle)))

    def output_type(self, index: int = 0) -> int:
        """MXNet type code of output ``index`` (0 = float32)."""
        code = ctypes.c_int()
        check_call(_LIB.MXPredGetOutputType(self.handle, ctypes.c_uint32(index), ctypes.byref(code)))
        return code.value

    def output_shape(self, index: int = 0) -> tuple[int, ...]:
        data = ctypes.POINTER(ctypes.c_uint32)()
        ndim = ctypes.c_uint32()
        check_call(_LIB.MXPredGetOutputShape(self.handle, ctypes.c_uint32(index),
                                             ctypes.byref(data), ctypes.byref(ndim)))
        return tuple(data[i] for i in range(ndim.value))

    def forward(self, **inputs: np.ndarray) -> np.ndarray:
        """Set the float32 inputs, run, and return output 0 (float32)."""
        for k, v in inputs.items():
            arr = np.ascontiguousarray(v, dtype=np.float32)
            check_call(_LIB.MXPredSetInput(self.handle, ctypes.c_char_p(k.encode()),
                                           arr.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                           ctypes.c_uint32(arr.size)))
        check_call(_LIB.MXPredForward(self.handle))
        out = np.empty(self.output_shape(0), dtype=np.float32)
        check_call(_LIB.MXPredGetOutput(self.handle, ctypes.c_uint32(0),
                                        out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                        ctypes.c_uint32(out.size)))
        return out

    def close(self) -> None:
        if self.handle:
            check_call(_LIB.MXPredFree(self.handle))
            self.handle = ctypes.c_void_p()
