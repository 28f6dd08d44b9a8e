"""Bad input gets a typed error (an AMPError subclass) that names the node, op, param or file."""
from __future__ import annotations

import json
import os
import warnings
from dataclasses import replace

import mxnet as mx
import numpy as np
import pytest

import mxnet_amp as amp
from mxnet_amp.convert import convert_graph, convert_model_full
from mxnet_amp.emulation import emulate_model
from mxnet_amp.errors import (AlreadyConvertedError, AMPError, CheckpointError, GraphError,
                              ParamError, TargetDtypeError, TypeInferenceError, UnknownOpError)
from mxnet_amp.mx.io import graph_from_json, graph_from_symbol, load_checkpoint, save_checkpoint
from mxnet_amp.options import ConvertOptions, make_options
from mxnet_amp.policy_load import load_policy
from mxnet_amp.shape_check.check import check_param_shapes

RNG = np.random.RandomState(0)


def _arr(*shape):
    return mx.nd.array(RNG.randn(*shape).astype(np.float32) * 0.3)


def _mlp():
    data = mx.sym.var("data")
    h = mx.sym.FullyConnected(data, num_hidden=6, name="fc1")
    h = mx.sym.relu(h, name="act")
    out = mx.sym.FullyConnected(h, num_hidden=3, name="fc2")
    args = {"fc1_weight": _arr(6, 4), "fc1_bias": _arr(6), "fc2_weight": _arr(3, 6), "fc2_bias": _arr(3)}
    return out, args


def _run(sym, args, auxs, inputs):
    exe = sym.bind(mx.cpu(), {**args, **inputs}, aux_states=dict(auxs), grad_req="null")
    return [o.asnumpy() for o in exe.forward(is_train=False)]


# ----------------------------------------------------------------------------- symbol JSON

@pytest.mark.parametrize("text, fragment", [
    ('{"nodes": [{"op": "null", "name": "data", "inputs": []}', "truncated"),
    ("", "not valid JSON"),
    ('[1, 2, 3]', "no 'nodes' list"),
    ('{"nodes": [{"name": "x", "inputs": []}], "heads": [[0, 0, 0]]}', "node 0"),
    ('{"nodes": [{"op": "relu", "name": "r", "inputs": [[1, 0, 0]]}, '
     '{"op": "null", "name": "x", "inputs": []}], "heads": [[0, 0, 0]]}', "'r' reads node 1"),
    ('{"nodes": [{"op": "null", "name": "x", "inputs": []}, '
     '{"op": "relu", "name": "r", "inputs": [["a"]]}], "heads": [[1, 0, 0]]}', "'r' has a malformed input"),
    ('{"nodes": [{"op": "null", "name": "x", "inputs": []}], "heads": [[5, 0, 0]]}', "malformed head"),
    ('{"nodes": [{"op": "null", "name": "x", "inputs": []}], "heads": []}', "no outputs"),
])
def test_malformed_symbol_json_is_a_graph_error(text, fragment):
    with pytest.raises(GraphError) as info:
        graph_from_json(text, where="model-symbol.json")
    assert isinstance(info.value, AMPError)
    assert "model-symbol.json" in str(info.value)
    assert fragment in str(info.value)


def test_truncated_symbol_file_names_the_file(tmp_path):
    sym, args = _mlp()
    prefix = str(tmp_path / "m")
    save_checkpoint(prefix, 0, sym, args, {})
    path = prefix + "-symbol.json"
    text = open(path).read()
    with open(path, "w") as f:
        f.write(text[: len(text) // 2])
    with pytest.raises(GraphError, match="truncated") as info:
        load_checkpoint(prefix, 0)
    assert path in str(info.value)


def test_truncated_params_file_is_a_checkpoint_error(tmp_path):
    sym, args = _mlp()
    prefix = str(tmp_path / "m")
    save_checkpoint(prefix, 0, sym, args, {})
    path = prefix + "-0000.params"
    blob = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(blob[: len(blob) // 2])
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(prefix, 0)
    assert path in str(info.value) and isinstance(info.value, AMPError)


def test_missing_checkpoint_file_names_it(tmp_path):
    with pytest.raises(CheckpointError, match="not found") as info:
        load_checkpoint(str(tmp_path / "nothing"), 3)
    assert "nothing-symbol.json" in str(info.value)


def test_unregistered_op_names_node_and_op():
    sym, _ = _mlp()
    obj = json.loads(sym.tojson())
    obj["nodes"][[n["name"] for n in obj["nodes"]].index("act")]["op"] = "NoSuchPluginOp"
    graph = graph_from_json(json.dumps(obj))
    with pytest.raises(UnknownOpError) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pass first warns that no list names it
        convert_graph(graph, make_options("bfloat16"))
    assert "NoSuchPluginOp" in str(info.value) and "'act'" in str(info.value)


# ----------------------------------------------------------------------------- params

def test_missing_param_is_named():
    sym, args = _mlp()
    del args["fc2_bias"]
    with pytest.raises(ParamError, match="fc2_bias"):
        amp.convert_model(sym, args, {}, target_dtype="bfloat16", data_names=["data"])


def test_extra_param_is_named():
    sym, args = _mlp()
    args["conv9_weight"] = _arr(2, 2)
    with pytest.raises(ParamError, match="conv9_weight"):
        amp.convert_model(sym, args, {}, target_dtype="bfloat16", strict_params=True)


def _conv_bn_fc():
    data = mx.sym.var("data")
    c = mx.sym.Convolution(data, num_filter=8, kernel=(3, 3), name="c1")
    b = mx.sym.BatchNorm(c, name="bn")
    out = mx.sym.FullyConnected(b, num_hidden=4, name="fc")
    shapes = {"c1_weight": (8, 3, 3, 3), "c1_bias": (8,), "bn_gamma": (8,), "bn_beta": (8,),
              "fc_weight": (4, 8 * 6 * 6), "fc_bias": (4,)}
    aux = {"bn_moving_mean": (8,), "bn_moving_var": (8,)}
    return out, shapes, aux


@pytest.mark.parametrize("name, bad, want", [
    ("fc_weight", (5, 288), "(4, 288)"),
    ("fc_weight", (4, 100), "(4, 288)"),
    ("c1_weight", (8, 4, 3, 3), "(8, 3, 3, 3)"),
    ("c1_bias", (7,), "(8,)"),
    ("bn_moving_var", (9,), "(8,)"),
])
def test_wrong_param_shape_names_param_and_both_shapes(name, bad, want):
    sym, shapes, aux = _conv_bn_fc()
    (aux if name in aux else shapes)[name] = bad
    zeros = lambda d: {k: mx.nd.zeros(v) for k, v in d.items()}  # noqa: E731
    with pytest.raises(ParamError) as info:
        check_param_shapes(sym, zeros(shapes), zeros(aux), {"data": (1, 3, 8, 8)})
    msg = str(info.value)
    assert repr(name) in msg and str(bad) in msg and want in msg


def test_right_param_shapes_pass():
    sym, shapes, aux = _conv_bn_fc()
    zeros = lambda d: {k: mx.nd.zeros(v) for k, v in d.items()}  # noqa: E731
    check_param_shapes(sym, zeros(shapes), zeros(aux), {"data": (2, 3, 8, 8)})
    check_param_shapes(sym, zeros(shapes), zeros(aux))


# ----------------------------------------------------------------------------- target dtype

@pytest.mark.parametrize("dtype", ["float64", "int8", "fp8", "float32", None])
def test_unsupported_target_dtype(dtype):
    sym, args = _mlp()
    with pytest.raises(TargetDtypeError) as info:
        amp.convert_model(sym, args, {}, target_dtype=dtype)
    assert isinstance(info.value, AMPError) and isinstance(info.value, ValueError)
    assert repr(dtype) in str(info.value)


@pytest.mark.parametrize("spelling", ["bfloat16", "bf16", "float16", np.float16])
def test_supported_target_dtype_spellings(spelling):
    sym, args = _mlp()
    csym, _, _ = amp.convert_model(sym, args, {}, target_dtype=spelling)
    assert any(n.op == "amp_cast" for n in graph_from_symbol(csym).nodes)


# ----------------------------------------------------------------------------- converted twice

@pytest.mark.parametrize("target", ["float16", "bfloat16"])
def test_converting_a_converted_graph_is_a_clear_error(target):
    sym, args = _mlp()
    csym, cargs, cauxs = amp.convert_model(sym, args, {}, target_dtype=target)
    for again in ("float16", "bfloat16"):
        with pytest.raises(AlreadyConvertedError, match="amp_cast") as info:
            amp.convert_model(csym, cargs, cauxs, target_dtype=again)
        assert "_amp_cast_" in str(info.value)  # names the cast node
        with pytest.raises(AlreadyConvertedError):
            amp.convert_symbol(csym, target_dtype=again)


@pytest.mark.parametrize("target", ["float16", "bfloat16"])
def test_a_graph_converted_by_mx_contrib_amp_is_refused(target):
    from mxnet.contrib import amp as contrib_amp
    sym, args = _mlp()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        csym, cargs, cauxs = contrib_amp.convert_model(sym, args, {}, target_dtype=target)
    assert any(n.op == "amp_cast" for n in graph_from_symbol(csym).nodes)
    with pytest.raises(AlreadyConvertedError):
        amp.convert_model(csym, cargs, cauxs, target_dtype="bfloat16")


def test_fp32_model_holding_an_amp_multicast_converts_without_cast_chains():
    """gluoncv's SSD box decoder calls amp_multicast(cast_narrow=True) in fp32 models."""
    a, b = mx.sym.var("data"), mx.sym.var("anchors")
    m = mx.sym.amp_multicast(a, b, num_outputs=2, cast_narrow=True, name="mc")
    out = mx.sym.FullyConnected(m[0], num_hidden=4, name="fa") + mx.sym.FullyConnected(m[1], num_hidden=4, name="fb")
    conv = convert_graph(graph_from_symbol(out), make_options("bfloat16"))
    g = conv.graph
    multis = [n for n in g.nodes if n.op == "amp_multicast"]
    assert [n.name for n in multis] == ["mc"]  # the model's own, kept, none added
    for n in g.nodes:
        if n.op == "amp_cast":
            assert g.nodes[n.inputs[0].node].op != "amp_cast", n.name


# ----------------------------------------------------------------------------- custom ops

_SEEN_DTYPES: list = []


class _Scale(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        _SEEN_DTYPES.append(np.dtype(in_data[0].dtype).name)
        self.assign(out_data[0], req[0], in_data[0] * 2.0)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0] * 2.0)


@mx.operator.register("amp_test_scale")
class _ScaleProp(mx.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=True)

    def list_arguments(self):
        return ["data"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return _Scale()


def _custom_model():
    data = mx.sym.var("data")
    h = mx.sym.FullyConnected(data, num_hidden=6, name="fc1")
    h = mx.sym.Custom(h, op_type="amp_test_scale", name="scale")
    out = mx.sym.FullyConnected(h, num_hidden=3, name="fc2")
    args = {"fc1_weight": _arr(6, 4), "fc1_bias": _arr(6), "fc2_weight": _arr(3, 6), "fc2_bias": _arr(3)}
    return out, args


def test_custom_op_stays_fp32_and_runs():
    sym, args = _custom_model()
    csym, cargs, cauxs, conv = convert_model_full(sym, args, {}, make_options("bfloat16"))
    assert conv.result.node_dtypes["scale"] == "float32"
    assert conv.result.node_dtypes["fc1"] == "bfloat16"
    g = conv.graph
    scale = g.nodes[g.index_of("scale")]
    feed = g.nodes[scale.inputs[0].node]
    assert feed.op == "amp_cast" and feed.attrs["dtype"] == "float32"
    # the emulated model runs the Python op on float32 arrays and matches fp32
    x = mx.nd.array(RNG.randn(2, 4).astype(np.float32))
    ref = _run(sym, args, {}, {"data": x})[0]
    esym, eargs, eauxs = emulate_model(csym, cargs, cauxs)
    del _SEEN_DTYPES[:]
    got = _run(esym, eargs, eauxs, {"data": x})[0]
    assert _SEEN_DTYPES and set(_SEEN_DTYPES) == {"float32"}
    np.testing.assert_allclose(got, ref, rtol=0.05, atol=0.05 * np.abs(ref).max())
    assert np.abs(got - ref).max() > 0  # it did round somewhere


def test_unlisted_op_stays_fp32_with_a_warning_naming_it():
    """An op no list names (a plugin's op, or Custom taken out of the lists)."""
    sym, args = _custom_model()
    base = load_policy("bfloat16")
    policy = replace(base, fp32=base.fp32 - {"Custom"})
    assert policy.category_of("Custom") is None
    with pytest.warns(UserWarning, match="Custom"):
        conv = convert_graph(graph_from_symbol(sym), ConvertOptions(policy),
                             param_dtypes={k: "float32" for k in args})
    assert conv.result.node_dtypes["scale"] == "float32"
    assert "Custom" in conv.result.unlisted_ops


def test_listed_custom_op_gives_no_warning():
    """No warning about the listed custom op (the machine's HardwareWarning aside: on a CPU
    without native bfloat16 every conversion to it says so)."""
    from mxnet_amp.mx.hardware import HardwareWarning
    sym, args = _custom_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", HardwareWarning)
        amp.convert_model(sym, args, {}, target_dtype="bfloat16")


# ----------------------------------------------------------------------------- non-float inputs

def _token_model():
    ids = mx.sym.var("ids")
    emb = mx.sym.Embedding(ids, input_dim=20, output_dim=8, name="emb")
    h = mx.sym.FullyConnected(emb, num_hidden=5, flatten=False, name="fc")
    pos = mx.sym.one_hot(ids, depth=20, name="oh")  # a second, index-only use of the ids
    out = mx.sym.broadcast_add(mx.sym.sum(h, axis=-1, keepdims=True), mx.sym.sum(pos, axis=-1, keepdims=True), name="add")
    args = {"emb_weight": _arr(20, 8), "fc_weight": _arr(5, 8), "fc_bias": _arr(5)}
    return out, args


def test_int_token_ids_pass_through_uncast():
    sym, args = _token_model()
    csym, cargs, cauxs, conv = convert_model_full(sym, args, {}, make_options("bfloat16"),
                                                  input_dtypes={"ids": "int32"})
    g = conv.graph
    ids_index = g.index_of("ids")
    readers = [g.nodes[j] for j, _ in g.consumers()[ids_index]]
    assert sorted(n.name for n in readers) == ["emb", "oh"]  # no cast reads the ids
    assert conv.arg_dtypes["ids"] == "int32"
    assert conv.result.node_dtypes["fc"] == "bfloat16"
    ids = mx.nd.array(RNG.randint(0, 20, size=(2, 7)), dtype="int32")
    ref = _run(sym, args, {}, {"ids": ids})[0]
    esym, eargs, eauxs = emulate_model(csym, cargs, cauxs, input_dtypes={"ids": "int32"})
    got = _run(esym, eargs, eauxs, {"ids": ids})[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=0.03, atol=0.03 * np.abs(ref).max())


def test_int_input_where_a_float_is_required_is_a_typed_error():
    sym, args = _mlp()
    with pytest.raises(TypeInferenceError) as info:
        convert_model_full(sym, args, {}, make_options("bfloat16"), input_dtypes={"data": "int32"})
    assert isinstance(info.value, AMPError)
    assert "fc1" in str(info.value) and "int32" in str(info.value)


def test_errors_leave_inputs_alone(tmp_path):
    """A failing conversion neither writes nor changes anything."""
    sym, args = _mlp()
    before = sym.tojson()
    copies = {k: v.asnumpy().copy() for k, v in args.items()}
    with pytest.raises(AMPError):
        amp.convert_model(sym, args, {}, target_dtype="int8")
    with pytest.raises(AMPError):
        convert_model_full(sym, args, {}, make_options("bfloat16"), input_dtypes={"data": "int32"})
    assert sym.tojson() == before
    assert sorted(args) == sorted(copies)
    for k, v in args.items():
        assert v.dtype == np.float32 and np.array_equal(v.asnumpy(), copies[k])
    assert os.listdir(tmp_path) == []


# ----------------------------------------------------------------------------- plugin library ops

_PLUGIN_SRC = r'''
#include "mxnet/lib_api.h"
using namespace mxnet::ext;
MXReturnValue forward(const std::unordered_map<std::string, std::string>& attrs,
                      std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                      const OpResource& res) {
  float* in = inputs->at(0).data<float>();
  float* out = outputs->at(0).data<float>();
  for (int64_t i = 0; i < inputs->at(0).size(); i++) out[i] = in[i] > 0 ? in[i] : 0;
  return MX_SUCCESS;
}
MXReturnValue parseAttrs(const std::unordered_map<std::string, std::string>& attrs,
                         int* num_in, int* num_out) {
  *num_in = 1; *num_out = 1; return MX_SUCCESS;
}
MXReturnValue inferType(const std::unordered_map<std::string, std::string>& attrs,
                        std::vector<int>* intypes, std::vector<int>* outtypes) {
  if (intypes->at(0) != kFloat32) { MX_ERROR_MSG << "amp_test_plugin_relu takes float32 only"; return MX_FAIL; }
  outtypes->at(0) = intypes->at(0);
  return MX_SUCCESS;
}
MXReturnValue inferShape(const std::unordered_map<std::string, std::string>& attrs,
                         std::vector<std::vector<unsigned int>>* inshapes,
                         std::vector<std::vector<unsigned int>>* outshapes) {
  outshapes->at(0) = inshapes->at(0);
  return MX_SUCCESS;
}
REGISTER_OP(amp_test_plugin_relu).setForward(forward, "cpu").setParseAttrs(parseAttrs)
    .setInferType(inferType).setInferShape(inferShape);
MXReturnValue initialize(int version) { return MX_SUCCESS; }
'''


@pytest.fixture(scope="module")
def plugin_lib(tmp_path_factory):
    """Build a one-op MXNet plugin library (for mx.library.load); its path."""
    import shutil
    import subprocess
    root = os.path.dirname(mx.__file__)
    lib_api = os.path.join(root, "src", "lib_api.cc")
    compiler = shutil.which("g++")
    if compiler is None or not os.path.isfile(lib_api):
        pytest.skip("needs g++ and mxnet/src/lib_api.cc to build a plugin library")
    folder = tmp_path_factory.mktemp("plugin")
    src, lib = folder / "plugin.cc", folder / "libamp_test_plugin.so"
    src.write_text(_PLUGIN_SRC)
    subprocess.run([compiler, "-shared", "-fPIC", "-std=c++11", "-O1", str(src), lib_api,
                    "-I", os.path.join(root, "include"), "-o", str(lib)], check=True,
                   capture_output=True)
    return str(lib)


# The plugin is loaded in a child interpreter: a loaded library's ops stay in the process's
# registry for good, and the list tests check that registry against the shipped lists.
_PLUGIN_CHECKS = r"""
import sys, warnings
import numpy as np
import mxnet as mx
from mxnet_amp.convert import convert_model_full
from mxnet_amp.options import OpLists, make_options
from mxnet_amp.emulation import emulate_model
from mxnet_amp.mx.registry import registry_op_names

registry_op_names()  # fill the registry cache before the load, as a real session would
mx.library.load(sys.argv[1], False)
op = "amp_test_plugin_relu"
rng = np.random.RandomState(0)
def arr(*shape):
    return mx.nd.array(rng.randn(*shape).astype(np.float32) * 0.5)
data = mx.sym.var("data")
h = mx.sym.FullyConnected(data, num_hidden=6, name="fc1")
h = getattr(mx.sym, op)(h, name="plugin")
sym = mx.sym.FullyConnected(h, num_hidden=3, name="fc2")
args = {"fc1_weight": arr(6, 4), "fc1_bias": arr(6), "fc2_weight": arr(3, 6), "fc2_bias": arr(3)}
def run(s, a, x):
    return s.bind(mx.cpu(), {**a, "data": x}, grad_req="null").forward()[0].asnumpy()

# unlisted: stays fp32 with a warning naming it, and the model runs
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    csym, cargs, cauxs, conv = convert_model_full(sym, args, {}, make_options("bfloat16"))
assert any(op in str(w.message) for w in caught), [str(w.message) for w in caught]
assert conv.result.node_dtypes["plugin"] == "float32"
assert conv.result.node_dtypes["fc1"] == "bfloat16"
x = mx.nd.array(rng.randn(2, 4).astype(np.float32))
ref = run(sym, args, x)
esym, eargs, _ = emulate_model(csym, cargs, cauxs)
got = run(esym, eargs, x)  # the plugin refuses anything but fp32
np.testing.assert_allclose(got, ref, rtol=0.05, atol=0.05 * np.abs(ref).max())

# listed as fp32: no warning
with warnings.catch_warnings():
    warnings.simplefilter("error")
    _, _, _, conv = convert_model_full(sym, args, {}, make_options("bfloat16", OpLists(fp32_ops=[op])))
assert conv.result.node_dtypes["plugin"] == "float32"

# listed as target although it only takes fp32: falls back to fp32 and says so
_, _, _, conv = convert_model_full(sym, args, {}, make_options("bfloat16", OpLists(target_dtype_ops=[op])))
assert conv.result.node_dtypes["plugin"] == "float32"
assert any(name == "plugin" for name, _ in conv.result.fallbacks)
print("PLUGIN CHECKS OK")
"""


def test_plugin_library_op_stays_fp32_warns_unless_listed_and_falls_back(plugin_lib):
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", _PLUGIN_CHECKS, plugin_lib],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "PLUGIN CHECKS OK" in proc.stdout, proc.stderr[-3000:]


def test_params_file_of_another_model_is_a_param_error(tmp_path):
    from mxnet_amp.checkpoint import convert_checkpoint
    sym, args = _mlp()
    other = _conv_bn_fc()[0]
    prefix = str(tmp_path / "mixed")
    # the symbol of one model with the params of another, as a mixed-up checkpoint folder has
    save_checkpoint(prefix, 0, other, args, {})
    with pytest.raises(ParamError) as info:
        convert_checkpoint(prefix, 0, str(tmp_path / "out"), target_dtype="bfloat16")
    assert any(name in str(info.value) for name in ("bn_moving_mean", "c1_weight", "fc1_weight"))
    assert not os.path.exists(str(tmp_path / "out-symbol.json"))


def test_missing_weight_is_an_error_not_a_new_model_input():
    """A params dict lacking a weight must not turn that weight into a model input."""
    import mxnet as mx
    import mxnet_amp as amp
    from mxnet_amp.errors import ParamError
    x = mx.sym.var("data")
    sym = mx.sym.FullyConnected(mx.sym.FullyConnected(x, num_hidden=4, name="fc1"), num_hidden=2, name="fc2")
    args = {"fc1_weight": mx.nd.ones((4, 3)), "fc1_bias": mx.nd.zeros(4), "fc2_weight": mx.nd.ones((2, 4))}
    with pytest.raises(ParamError, match="fc2_bias"):
        amp.convert_model(sym, args, {}, target_dtype="bfloat16")
    # naming the inputs explicitly states the intent: fc2_bias as an input is then allowed
    out, _, _ = amp.convert_model(sym, args, {}, target_dtype="bfloat16", data_names=["data", "fc2_bias"])
    assert "fc2_bias" in out.list_arguments()


def test_every_error_lives_in_errors_and_is_an_amp_error():
    """DrawError, CLIError, InferenceFailed and GraphCheckError have one home, errors.py (no
    other module lists them: tests/house/test_imports.py checks every ``__all__``), and every
    class there is an AMPError."""
    from mxnet_amp import errors
    from mxnet_amp.mx import optypes, registry
    from mxnet_amp.ir import verify
    from mxnet_amp.report import draw
    for module in (draw, optypes, registry, verify):
        assert not {"DrawError", "CLIError", "InferenceFailed", "GraphCheckError"} & set(module.__all__)
    assert issubclass(errors.InferenceFailed, errors.TypeInferenceError)
    assert issubclass(errors.GraphCheckError, errors.GraphError)
    for name in errors.__all__[:-1]:  # every class, error_text aside
        assert issubclass(getattr(errors, name), errors.AMPError), name


def _every_error_class():
    import mxnet_amp.auto.workers  # noqa: F401  (errors defined beside their module)
    import mxnet_amp.errors as errors

    def below(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from below(sub)
    return sorted(set(below(errors.AMPError)), key=lambda c: c.__qualname__)


def test_every_error_survives_pickling():
    """A worker process or a Dask cluster sends errors back pickled: each AMPError comes back
    the same type with the same message (UnknownOpError and OnnxExportError could not be
    unpickled; newcomer audit, #42)."""
    import pickle

    from mxnet_amp.errors import OnnxExportError, UnknownOpError
    made = {UnknownOpError: lambda: UnknownOpError(["Convolutoin"], "fp32_ops"),
            OnnxExportError: lambda: OnnxExportError([("inv", "erfinv", "no converter")])}
    for cls in _every_error_class():
        err = made.get(cls, lambda: cls("what failed"))()
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is cls and str(back) == str(err), cls
    back = pickle.loads(pickle.dumps(made[UnknownOpError]()))
    assert back.names == ("Convolutoin",) and back.where == "fp32_ops"
    assert pickle.loads(pickle.dumps(made[OnnxExportError]())).nodes == (("inv", "erfinv", "no converter"),)
