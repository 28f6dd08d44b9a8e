"""mxnet_amp.onnx.tidy: node names, inference BatchNorms and plain float casts, on hand-built
ONNX graphs (the export's use of them: tests/onnx/test_export.py)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx extra: pip install -e '.[onnx]'")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from mxnet_amp.onnx.tidy import inference_batchnorms, name_nodes, plain_float_casts  # noqa: E402


def _graph(nodes, inputs=(("x", TensorProto.FLOAT, [2, 3]),), outputs=(("y", TensorProto.FLOAT, [2, 3]),),
           initializers=()):
    return helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                             [helper.make_tensor_value_info(*o) for o in outputs], list(initializers))


def test_unnamed_nodes_take_their_mxnet_nodes_name_and_every_name_is_unique():
    """An unnamed node is named after its output where that starts with an MXNet node's name
    (the longest: ``fc2_gemm`` is fc2's, not fc's); otherwise ``<owner>/<output>``, the
    owner the MXNet node found last (a converter's nodes are contiguous); a taken name gets
    ``_1``; a node MXNet named keeps its name.

        x -> Shape(fc_shape) -> Gemm(fc2_gemm) -> Relu(tmp9) -> Cast 'relu1' -> Identity(relu1_out)
    """
    nodes = [helper.make_node("Relu", ["x"], ["fc_shape"]),
             helper.make_node("Relu", ["fc_shape"], ["fc2_gemm"]),
             helper.make_node("Relu", ["fc2_gemm"], ["tmp9"]),
             helper.make_node("Relu", ["tmp9"], ["relu1"], name="relu1"),
             helper.make_node("Relu", ["relu1"], ["relu1_out"], name="relu1"),   # MXNet's duplicate
             helper.make_node("Relu", ["relu1_out"], ["y"])]
    graph = _graph(nodes)
    changed = name_nodes(graph, ["fc", "fc2", "relu1"])
    names = [n.name for n in graph.node]
    assert names == ["fc_shape", "fc2_gemm", "fc2/tmp9", "relu1", "relu1_1", "relu1/y"]
    assert changed == 5 and len(set(names)) == len(names)
    assert name_nodes(graph, ["fc", "fc2", "relu1"]) == 0          # a second run changes nothing


def _batchnorm_model(attrs, outputs=1):
    rng = np.random.default_rng(0)
    params = [numpy_helper.from_array(v.astype("float32"), n) for n, v in
              (("s", rng.uniform(0.5, 2, 3)), ("b", rng.standard_normal(3)), ("m", rng.standard_normal(3)),
               ("v", rng.uniform(0.5, 2, 3)))]
    outs = ["y"] + [f"extra{k}" for k in range(outputs - 1)]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], outs, name="bn", **attrs)
    graph = _graph([node], inputs=(("x", TensorProto.FLOAT, [4, 3, 2, 2]),),
                   outputs=[(o, TensorProto.FLOAT, [4, 3, 2, 2] if o == "y" else [3]) for o in outs], initializers=params)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), params


def test_inference_batchnorm_loses_momentum_and_reads_running_statistics():
    """With ``momentum`` 0.9 (MXNet's converter writes it; the schema's default when absent)
    ReferenceEvaluator blends in the batch's statistics; with 1.0 it normalises with the
    running ones, as the spec means for a single-output node (momentum plays no part):
    scale * (x - mean) / sqrt(var + eps) + bias. A training_mode=0 goes too."""
    without, _ = _batchnorm_model({"epsilon": 1e-5})
    assert inference_batchnorms(without.graph) == ["bn"]          # the default is 0.9 too
    model, params = _batchnorm_model({"epsilon": 1e-5, "momentum": 0.9})
    s, b, m, v = (numpy_helper.to_array(p) for p in params)
    x = np.random.default_rng(1).standard_normal((4, 3, 2, 2)).astype("float32")
    expected = (s[:, None, None] * (x - m[:, None, None]) / np.sqrt(v[:, None, None] + 1e-5)
                + b[:, None, None])
    (before,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert np.abs(before - expected).max() > 0.05             # batch statistics: not inference
    assert inference_batchnorms(model.graph) == ["bn"]
    assert {a.name: round(a.f, 6) for a in model.graph.node[0].attribute} == {"epsilon": 1e-5, "momentum": 1.0}
    assert inference_batchnorms(model.graph) == []                 # a second run changes nothing
    (after,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(after, expected, rtol=1e-5, atol=1e-5)


def test_a_training_batchnorm_keeps_its_momentum():
    """A node with its running-statistics outputs is a training node: left as it is."""
    model, _ = _batchnorm_model({"epsilon": 1e-5, "momentum": 0.9}, outputs=3)
    assert inference_batchnorms(model.graph) == []
    assert {a.name for a in model.graph.node[0].attribute} == {"epsilon", "momentum"}


def test_plain_float_casts_become_identity_and_where_exactly():
    """A Cast to float32 of a float32 tensor is an Identity, of a bool a Where(x, 1, 0); a
    Cast that converts (int64 -> float32) stays a Cast. Same results, same names."""
    nodes = [helper.make_node("Cast", ["x"], ["same"], name="same", to=TensorProto.FLOAT),
             helper.make_node("Greater", ["same", "zero"], ["gt"], name="gt"),
             helper.make_node("Cast", ["gt"], ["mask"], name="mask", to=TensorProto.FLOAT),
             helper.make_node("Cast", ["n"], ["nf"], name="nf", to=TensorProto.FLOAT),
             helper.make_node("Add", ["mask", "nf"], ["y"], name="y")]
    graph = _graph(nodes, inputs=(("x", TensorProto.FLOAT, [2, 3]), ("n", TensorProto.INT64, [2, 3])),
                   initializers=[numpy_helper.from_array(np.zeros(1, "float32"), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    feed = {"x": np.array([[-1, 0.5, 2], [3, -4, 0]], "float32"), "n": np.arange(6).reshape(2, 3)}
    (before,) = ReferenceEvaluator(model).run(None, feed)
    assert plain_float_casts(model) == ["same", "mask"]
    assert [(n.name, n.op_type) for n in model.graph.node] == [
        ("same", "Identity"), ("gt", "Greater"), ("mask", "Where"), ("nf", "Cast"), ("y", "Add")]
    onnx.checker.check_model(model, full_check=True)
    (after,) = ReferenceEvaluator(model).run(None, feed)
    np.testing.assert_array_equal(after, before)
