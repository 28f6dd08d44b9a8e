"""mxnet_amp.onnx.constants (onnx/constants): float32 constants given their neighbour's dtype."""
import numpy as np
import pytest

from mxnet_amp.onnx.constants import match_constant_dtypes, repair_float16_constants

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _mul_model(const_dtype=np.float32):
    """x (float16) * c (a float32 constant, as a converter writes it) -> y."""
    c = numpy_helper.from_array(np.array([0.5], dtype=const_dtype), "c")
    graph = helper.make_graph([helper.make_node("Mul", ["x", "c"], ["y"], name="mul")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2])], [c])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_float32_constant_beside_float16_gets_a_float16_copy():
    """The Mul reads a new float16 copy of c; the model then passes ONNX's checker."""
    model = _mul_model()
    changed = match_constant_dtypes(model, 13)
    assert changed == [("mul", "c")]
    assert list(model.graph.node[0].input) == ["x", "c_float16"]
    copy = {t.name: t for t in model.graph.initializer}["c_float16"]
    assert copy.data_type == TensorProto.FLOAT16 and numpy_helper.to_array(copy)[0] == 0.5
    onnx.checker.check_model(model, full_check=True)


def test_matching_dtypes_change_nothing():
    """A float16 constant beside a float16 input is left alone."""
    model = _mul_model(np.float16)
    assert match_constant_dtypes(model, 13) == []
    assert list(model.graph.node[0].input) == ["x", "c"]


def test_repair_rounds_float16_constants_from_the_float32_reference():
    """A float16 constant gets the float32 reference value rounded once (to float16, or to
    bfloat16 words with as_bfloat16)."""
    value = np.array([1 / 3], dtype=np.float32)
    reference = helper.make_graph([], "r", [], [], [numpy_helper.from_array(value, "k")])
    low = helper.make_graph([], "l", [], [], [numpy_helper.from_array(np.zeros(1, np.float16), "k")])
    assert repair_float16_constants(low, reference) == ["k"]
    assert np.frombuffer(low.initializer[0].raw_data, "<f2")[0] == np.float16(1 / 3)
    assert repair_float16_constants(low, reference, as_bfloat16=True) == ["k"]
    assert np.frombuffer(low.initializer[0].raw_data, "<u2")[0] == 0x3EAB
