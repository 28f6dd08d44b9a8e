"""mxnet_amp.onnx.weights (onnx/weights): each param's bytes inline, streamed or external."""
import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.ir.dtypes import np_dtype
from mxnet_amp.onnx.weights import SMALL_TENSOR_BYTES, external_tensor, param_bytes, plan_weights

onnx = pytest.importorskip("onnx")


def test_param_bytes_are_little_endian_in_the_stored_dtype():
    """float16 gives 2 bytes per value; bfloat16 the high half of each float32's bits."""
    half = mx.nd.array([1.0, -2.0], dtype="float16")
    assert param_bytes(half) == np.array([1.0, -2.0], dtype="<f2").tobytes()
    bf = mx.nd.array([1.0, -2.0]).astype(np_dtype("bfloat16"))
    assert param_bytes(bf) == np.array([0x3F80, 0xC000], dtype="<u2").tobytes()


def test_small_weights_stay_inline_and_large_ones_are_streamed():
    """Without external data a tensor under 1 KB is an inline initializer; a larger one is
    streamed (left out of the proto, appended to the file)."""
    params = {"small": mx.nd.ones((4,)), "big": mx.nd.ones((SMALL_TENSOR_BYTES,))}
    plan = plan_weights(params, ["small", "big"], "m.data", external=False, threshold=0)
    assert plan.location is None and plan.streamed == ["big"]
    inits = list(plan.initializers())
    assert [t.name for t in inits] == ["small"] and len(inits[0].raw_data) == 16


def test_external_data_is_64_byte_aligned_and_chosen_by_threshold():
    """external=None picks external data past the threshold; offsets are 64-byte aligned."""
    params = {"a": mx.nd.ones((300,)), "b": mx.nd.ones((300,))}
    plan = plan_weights(params, ["a", "b"], "m.data", external=None, threshold=100)
    assert plan.location == "m.data"
    assert plan.offsets == {"a": (0, 1200), "b": (1216, 1200)}
    assert plan.external_bytes == 1216 + 1216
    assert plan_weights(params, ["a", "b"], "m.data", external=None, threshold=10 ** 9).location is None


def test_the_data_file_holds_each_weight_at_its_offset(tmp_path):
    """data_writer writes each external weight's bytes at its planned offset."""
    a = mx.nd.array(np.arange(300, dtype="float32"))
    plan = plan_weights({"a": a}, ["a"], "m.data", external=True, threshold=0)
    path = tmp_path / "m.data"
    plan.data_writer()(str(path))
    raw = path.read_bytes()
    assert len(raw) == plan.external_bytes
    np.testing.assert_array_equal(np.frombuffer(raw[:1200], "<f4"), np.arange(300))


def test_external_tensor_records_location_offset_and_length():
    """The tensor becomes an EXTERNAL reference with the three keys ONNX reads."""
    from onnx import TensorProto
    t = external_tensor(TensorProto(name="w", data_type=1, dims=[2]), "m.data", 64, 8)
    assert t.data_location == TensorProto.EXTERNAL
    assert {e.key: e.value for e in t.external_data} == {"location": "m.data", "offset": "64", "length": "8"}
