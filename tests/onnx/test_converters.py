"""mxnet_amp.onnx.converters (onnx/converters): amp_cast / amp_multicast in MXNet's exporter."""
import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.onnx.converters import OPSETS, converter_table, onnx_dtype, register_converters

onnx = pytest.importorskip("onnx")


def test_onnx_dtype_codes_are_tensorproto_codes():
    """float32, float16 and bfloat16 map to ONNX's TensorProto codes."""
    from onnx import TensorProto
    assert onnx_dtype("float32") == TensorProto.FLOAT
    assert onnx_dtype("float16") == TensorProto.FLOAT16
    assert onnx_dtype("bfloat16") == TensorProto.BFLOAT16


def test_the_cast_converters_are_registered_for_every_opset_once():
    """After registration the exporter converts amp_cast and amp_multicast at opsets 12 and 13
    (and falls back for a later one); calling again changes nothing."""
    has = converter_table()
    for opset in OPSETS:
        assert has("amp_cast", opset) and has("amp_multicast", opset)
    assert has("amp_cast", 14)        # falls back to 13
    assert not has("no_such_op", 13)
    register_converters()
    assert register_converters.cache_info().hits >= 1


def test_an_exported_cast_is_an_onnx_cast_to_its_dtype(tmp_path):
    """A model with amp_cast(float16) exports to an ONNX Cast whose 'to' is FLOAT16."""
    from onnx import TensorProto
    register_converters()
    x = mx.sym.var("data")
    sym = mx.sym.amp_cast(mx.sym.relu(x, name="r"), dtype="float16", name="c")
    path = str(tmp_path / "m.onnx")
    mx.onnx.export_model(sym, {}, [(2, 3)], [np.float32], path)
    model = onnx.load(path)
    casts = [n for n in model.graph.node if n.op_type == "Cast"]
    assert len(casts) == 1
    assert casts[0].attribute[0].i == TensorProto.FLOAT16
