"""Port of ``test_predictor_amp`` of MXNet 1.9.1's ``tests/python/gpu/test_predictor.py``.

Upstream converts imagenet1k-resnet-18 to float16 with ``target_dtype_ops=['Convolution']``,
runs it in a Module on a GPU, saves it with its casts (``save_checkpoint(...,
remove_amp_cast=False)``), loads the files into MXNet's C predictor, and checks that the
predictor's output matches the Module's (rtol/atol 0.1); with ``cast_optional_params=True``
it also checks the predictor's monitor callback is called.

Here, on the CPU, with the resnet-18 rebuilt locally: the predictor must accept the saved
converted model (its type inference decides every weight's dtype from the graph), for
float16 and bfloat16. Where this CPU runs the dtype (bfloat16 with avx512) the Module and
the predictor run and are compared as upstream does; float16 never runs on a CPU, so there
the saved files are checked through emulation against float32 instead.
"""
from __future__ import annotations

import numpy as np
import mxnet as mx
import pytest

import mxnet_amp as amp
from mxnet_amp.ir.dtypes import array_dtype

from .amp_utils import (DTYPES, IMAGE, assert_close_to_fp32, bound_module, count_ops, forward,
                        forward_fp32, runs_natively)
from .c_predictor import Predictor


def _compare_module_cpredict(sym, arg_params, aux_params, prefix, target_dtype, reference,
                             monitor: bool):
    """Upstream's ``compare_module_cpredict``, on the CPU."""
    data = np.ones(IMAGE, dtype=np.float32)
    label = np.ones((1,), dtype=np.float32)
    mod = bound_module(sym, arg_params, aux_params)
    mod.save_checkpoint(prefix, 0, remove_amp_cast=False)
    with open(f"{prefix}-symbol.json") as f:
        symbol_json = f.read()
    with open(f"{prefix}-0000.params", "rb") as f:
        param_bytes = f.read()
    predictor = Predictor(symbol_json, param_bytes, {"data": IMAGE, "softmax_label": (1,)})
    assert predictor.output_shape(0) == (1, 1000)
    assert predictor.output_type(0) == 0  # float32: outputs stay float32
    if runs_natively(target_dtype):
        seen = []
        if monitor:
            predictor.set_monitor_callback(seen.append, monitor_all=True)
        predictor.forward(data=data, softmax_label=label)
        if monitor:
            assert seen, "monitor callback not called"
        mod.forward(mx.io.DataBatch(data=[mx.nd.array(data)], label=[mx.nd.array(label)]),
                    is_train=False)
        module_out = mod.get_outputs()[0].astype("float32").asnumpy()
        # upstream allows 0.1 (GPU kernels may differ); one graph on one CPU gives the same bits
        np.testing.assert_array_equal(module_out, predictor.get_output(0))
    # what the predictor loaded is the converted model: the saved files compute float32's
    # answer up to low precision rounding
    ssym, sargs, sauxs = mx.model.load_checkpoint(prefix, 0)
    assert count_ops(ssym, "amp_cast") == count_ops(sym, "amp_cast") > 0
    assert {k: array_dtype(v) for k, v in sargs.items()} == \
        {k: array_dtype(v) for k, v in arg_params.items()}
    out = forward(ssym, sargs, sauxs, {"data": data, "softmax_label": label}, target_dtype)[0]
    assert_close_to_fp32(out, reference, target_dtype)


@pytest.mark.parametrize("target_dtype", DTYPES)
def test_predictor_amp(resnet18, tmp_path, target_dtype):
    """``test_predictor_amp``: params in float32, then in low precision (with the monitor)."""
    sym, arg_params, aux_params = resnet18
    inputs = {"data": np.ones(IMAGE, "float32"), "softmax_label": np.ones((1,), "float32")}
    reference = forward_fp32(sym, arg_params, aux_params, inputs)[0]
    for optional in (False, True):
        csym, cargs, cauxs = amp.convert_model(sym, arg_params, aux_params, target_dtype=target_dtype,
                                               target_dtype_ops=["Convolution"],
                                               cast_optional_params=optional)
        assert (array_dtype(cargs["conv0_weight"]) == target_dtype) == optional
        _compare_module_cpredict(csym, cargs, cauxs, str(tmp_path / f"amp-{optional}"), target_dtype,
                                 reference, monitor=optional)
