"""Exports checked in true float16 and bfloat16 arithmetic: onnx >= 1.23's ReferenceEvaluator
(each op rounded to the dtype, float32 accumulation in MatMul and Conv, as a GPU computes),
run in an environment of its own (onnx 1.14.1 stays here for MXNet's exporter) as a
subprocess on files exported here (tools/onnx_reference.py).

The environment: ``MXNET_AMP_ONNXREF_PYTHON`` names its python. ``.ci/run`` makes it
(``.venv-onnxref``) and sets the variable, so CI runs these; on a machine without it they
skip and say how to make it. Judged on trained models (tests/support/trained_models.py,
seconds to train): ``error <= 1.5 x emulation error + 0.005`` against MXNet float32, the
criterion of benchmarks/onnx_export.py.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from helpers import load_tool, rel_error, run

onnx = pytest.importorskip("onnx", reason="the onnx extra: pip install -e '.[onnx]'")

import mxnet_amp as amp  # noqa: E402

ref = load_tool("onnx_reference")
PYTHON = ref.reference_python()
needs_reference = pytest.mark.skipif(
    PYTHON is None, reason=f"{ref.ENV_VAR} is not set: the true float16/bfloat16 check needs a python with "
                           "onnx>=1.23 (python3 -m venv .venv-onnxref && .venv-onnxref/bin/pip install "
                           "onnx==1.23.2 'numpy<2.5'; .ci/run does it)")
IMAGES = 64


@lru_cache(maxsize=None)
def _trained(name):
    import trained_models as tm
    model = tm.train(name)
    return model.sym, model.arg_params, model.aux_params, model.x_test[:IMAGES]


@needs_reference
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_reference_rounds_every_op_and_accumulates_in_float32(dtype):
    """What makes the check below mean something: on the probe graph ReferenceEvaluator
    rounds each op's result to the dtype and sums MatMul and Conv in float32."""
    verdict = ref.reference_probe(PYTHON, dtype)
    assert verdict["rounds_each_op"], verdict
    assert verdict["matmul_accumulator"] == verdict["conv_accumulator"] == "float32", verdict


def test_onnxruntime_cpu_computes_float32_between_ops():
    """The same probe in onnxruntime's CPU EP: float32 between ops (it removes the
    float32 -> float16 -> float32 cast pairs around ops it has no float16 kernel for), so it
    checks what a file holds, not its float16 arithmetic."""
    pytest.importorskip("onnxruntime", reason="onnxruntime, installed --no-deps (docs/onnx.md)")
    verdict = ref.onnxruntime_probe("float16")
    assert not verdict["rounds_each_op"] and verdict["between_ops"] == "float32 between ops", verdict


@needs_reference
@pytest.mark.parametrize("name,dtype,fold", [("cnn", "float16", True), ("cnn", "float16", False),
                                             ("cnn", "bfloat16", True), ("cnn", "bfloat16", False),
                                             ("transformer", "float16", True),
                                             ("transformer", "bfloat16", True)])
def test_export_in_true_low_precision_is_within_the_emulations_error(tmp_path, name, dtype, fold):
    """A trained model's export, run in ``dtype`` arithmetic, is as far from MXNet float32
    as our emulation of the same conversion (<= 1.5x + 0.005); with ``fold=False`` the
    BatchNorms stay in the file and are read as inference (momentum 1.0)."""
    sym, args, auxs, x = _trained(name)
    converted = amp.convert_model(sym, args, auxs, target_dtype=dtype, fold_batchnorm=fold)
    rec = amp.export_onnx(*converted, {"data": x.shape}, tmp_path / "m.onnx")
    assert rec.dtype == dtype
    (got,) = ref.reference_outputs(rec.path, {"data": x}, PYTHON)
    (want,) = run(sym, args, auxs, {"data": x})
    (emulated,) = run(*amp.emulate_model(*converted), {"data": x})
    err, emu = rel_error(got, want), rel_error(emulated, want)
    assert np.isfinite(got).all()
    assert err <= 1.5 * emu + 0.005, (err, emu)
    assert rel_error(got, emulated) > 0 or emu == 0          # computed, not copied


@needs_reference
def test_outputs_come_back_in_the_symbols_order_when_asked(tmp_path):
    """The file lists a ``Group([b, a])``'s outputs as mx.onnx does (a, b); asked for the
    export's ``symbol_outputs``, the reference returns them in MXNet's order."""
    import mxnet as mx
    d = mx.sym.var("data")
    a = mx.sym.FullyConnected(d, num_hidden=6, name="a")
    b = mx.sym.FullyConnected(a, num_hidden=4, name="b")
    sym = mx.sym.Group([b, a])
    x = np.random.default_rng(0).standard_normal((2, 5)).astype("float32")
    shapes, _, _ = sym.infer_shape(data=x.shape)
    args = {n: mx.nd.array(np.random.default_rng(1).standard_normal(s)) for n, s in
            zip(sym.list_arguments(), shapes) if n != "data"}
    rec = amp.export_onnx(sym, args, {}, {"data": x.shape}, tmp_path / "two.onnx")
    assert rec.outputs == ("a", "b") and rec.symbol_outputs == ("b", "a")
    got = ref.reference_outputs(rec.path, {"data": x}, PYTHON, outputs=list(rec.symbol_outputs))
    for value, want in zip(got, run(sym, args, {}, {"data": x})):
        assert rel_error(value, want) < 1e-5
