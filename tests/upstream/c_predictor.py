"""A minimal ctypes client of MXNet's C predict API (``c_predict_api.h``).

Upstream's ``test_predictor.py`` loads ``amalgamation/python/mxnet_predict.py``, which the
pip wheel does not ship; the functions it calls are exported by ``libmxnet.so`` itself,
so this small client calls them directly (written from the C header's signatures).
"""
from __future__ import annotations

import ctypes

import numpy as np
import mxnet as mx
from mxnet.base import check_call

_CPU = 1  # dev_type of the C API
_MONITOR = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p)


class Predictor:
    """``MXPredCreate`` on a symbol JSON and a params file's bytes, for the CPU.

    Parameters
    ----------
    symbol_json : str
    param_bytes : bytes
    input_shapes : dict of str to tuple of int
    """

    def __init__(self, symbol_json: str, param_bytes: bytes, input_shapes: dict):
        lib = mx.base._LIB
        self._lib = lib
        keys = list(input_shapes)
        indptr, dims = [0], []
        for key in keys:
            dims.extend(input_shapes[key])
            indptr.append(len(dims))
        self._handle = ctypes.c_void_p()
        check_call(lib.MXPredCreate(
            ctypes.c_char_p(symbol_json.encode()), ctypes.c_char_p(param_bytes),
            ctypes.c_int(len(param_bytes)), ctypes.c_int(_CPU), ctypes.c_int(0),
            ctypes.c_uint(len(keys)), (ctypes.c_char_p * len(keys))(*[k.encode() for k in keys]),
            (ctypes.c_uint * len(indptr))(*indptr), (ctypes.c_uint * len(dims))(*dims),
            ctypes.byref(self._handle)))
        self._callback = None

    def __del__(self):
        if getattr(self, "_handle", None):
            check_call(self._lib.MXPredFree(self._handle))
            self._handle = None

    def set_monitor_callback(self, callback, monitor_all: bool = False) -> None:
        """Call ``callback(name)`` for each tensor the forward pass produces."""
        def hook(name, _array, _unused):
            callback(name.decode())
        self._callback = _MONITOR(hook)  # kept alive as long as the predictor
        check_call(self._lib.MXPredSetMonitorCallback(self._handle, self._callback, None,
                                                      ctypes.c_bool(monitor_all)))

    def forward(self, **inputs) -> None:
        for key, value in inputs.items():
            value = np.ascontiguousarray(value, dtype=np.float32)
            check_call(self._lib.MXPredSetInput(
                self._handle, ctypes.c_char_p(key.encode()),
                value.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), ctypes.c_uint(value.size)))
        check_call(self._lib.MXPredForward(self._handle))

    def output_shape(self, index: int = 0) -> tuple:
        data, ndim = ctypes.POINTER(ctypes.c_uint)(), ctypes.c_uint()
        check_call(self._lib.MXPredGetOutputShape(self._handle, ctypes.c_uint(index),
                                                  ctypes.byref(data), ctypes.byref(ndim)))
        return tuple(data[i] for i in range(ndim.value))

    def output_type(self, index: int = 0) -> int:
        """The mshadow type code of output ``index`` (0 is float32)."""
        code = ctypes.c_int()
        check_call(self._lib.MXPredGetOutputType(self._handle, ctypes.c_uint(index), ctypes.byref(code)))
        return code.value

    def get_output(self, index: int = 0) -> np.ndarray:
        out = np.empty(self.output_shape(index), dtype=np.float32)
        check_call(self._lib.MXPredGetOutput(self._handle, ctypes.c_uint(index),
                                             out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                             ctypes.c_uint(out.size)))
        return out
