"""mxnet_amp.onnx.retype (onnx/retype): a float16 stand-in graph relabelled bfloat16."""
import numpy as np
import pytest

from mxnet_amp.onnx.retype import bfloat16_bits, retype_float16_as_bfloat16, widen_where_onnx_lacks_dtype

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def test_bfloat16_bits_round_to_nearest_even_and_keep_nan():
    """1.0 is 0x3F80; 1 + 2**-8 (a tie) rounds to even 0x3F80, 1 + 3*2**-9 up to 0x3F81; NaN stays NaN."""
    words = bfloat16_bits(np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -9, np.nan], dtype=np.float32))
    assert list(words[:3]) == [0x3F80, 0x3F80, 0x3F81]
    assert words[3] == 0x7FC0


def _cast_graph():
    """x (float32) -> Cast(to FLOAT16) -> Add(k: a float16 constant) -> y (float16)."""
    k = numpy_helper.from_array(np.array([0.1], dtype=np.float16), "k")
    nodes = [helper.make_node("Cast", ["x"], ["h"], name="cast", to=TensorProto.FLOAT16),
             helper.make_node("Add", ["h", "k"], ["y"], name="add")]
    return helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1])], [k])


def test_retype_relabels_casts_outputs_and_constants():
    """Cast's 'to', the output's element type and the constant all become BFLOAT16; the
    constant's value is re-rounded from its float16 value."""
    graph = _cast_graph()
    count = retype_float16_as_bfloat16(graph)
    assert count == 2    # the Cast attribute and the constant
    assert graph.node[0].attribute[0].i == TensorProto.BFLOAT16
    assert graph.output[0].type.tensor_type.elem_type == TensorProto.BFLOAT16
    k = graph.initializer[0]
    assert k.data_type == TensorProto.BFLOAT16
    assert np.frombuffer(k.raw_data, "<u2")[0] == bfloat16_bits(np.array([np.float16(0.1)], np.float32))[0]


def test_constants_named_as_words_keep_their_raw_data():
    """A constant listed in 'words' holds bfloat16 words already: only its label changes."""
    graph = _cast_graph()
    graph.initializer[0].raw_data = np.array([0x1234], dtype="<u2").tobytes()
    retype_float16_as_bfloat16(graph, frozenset({"k"}))
    assert np.frombuffer(graph.initializer[0].raw_data, "<u2")[0] == 0x1234


def test_an_op_without_bfloat16_computes_in_float32_between_casts():
    """At opset 13 ONNX's Conv takes no bfloat16: its float16 (stand-in) input is cast to
    float32 and its output cast back; the model stays valid."""
    w = numpy_helper.from_array(np.ones((1, 1, 1, 1), dtype=np.float16), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 1, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 1, 2, 2])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    assert widen_where_onnx_lacks_dtype(model, 13) == [("conv", "Conv")]
    ops = [n.op_type for n in model.graph.node]
    assert ops == ["Cast", "Cast", "Conv", "Cast"]
    onnx.checker.check_model(model, full_check=True)
