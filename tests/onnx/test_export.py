"""ONNX export (mxnet_amp.export_onnx, mxnet-amp export-onnx / convert --onnx).

Verified with onnx's own checker, strict shape inference and ``onnx.reference.ReferenceEvaluator``
(pure numpy, runs float16 graphs): the ``onnx`` extra, in the ``test`` extra too.
"""
from __future__ import annotations

import os

import mxnet as mx
import numpy as np
import pytest

from helpers import rel_error, run, small_model

onnx = pytest.importorskip("onnx", reason="the onnx extra: pip install -e '.[onnx]'")
from onnx.reference import ReferenceEvaluator  # noqa: E402

import mxnet_amp as amp  # noqa: E402
from mxnet_amp.errors import OnnxExportError, OverwriteError  # noqa: E402

FLOAT, FLOAT16, BFLOAT16 = 1, 10, 16
X = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype("float32")


def _mixed_model():
    """conv -> relu -> fc, whose output meets a float32 softmax in a widest-type add: an
    amp_multicast; clip (relu6) and GELU, whose MXNet converters make constants."""
    d = mx.sym.var("data")
    c = mx.sym.Convolution(d, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv")
    r = mx.sym.clip(c, a_min=0.0, a_max=0.5, name="relu6")
    g = mx.sym.LeakyReLU(r, act_type="gelu", name="gelu")
    fc = mx.sym.FullyConnected(mx.sym.flatten(g, name="flat"), num_hidden=5, name="fc")
    sm = mx.sym.softmax(fc, name="sm")
    out = mx.sym.broadcast_add(fc, sm, name="mix")
    shapes, _, _ = out.infer_shape(data=X.shape)
    rng = np.random.default_rng(0)
    args = {n: mx.nd.array(rng.standard_normal(s).astype("float32") * 0.3)
            for n, s in zip(out.list_arguments(), shapes) if n != "data"}
    return out, args, {}


def _export(tmp_path, sym, args, auxs, dtype="float16", name="m.onnx", **kw):
    s, a, x = amp.convert_model(sym, args, auxs, target_dtype=dtype) if dtype else (sym, args, auxs)
    path = tmp_path / name
    rec = amp.export_onnx(s, a, x, {"data": X.shape}, path, **kw)
    return (s, a, x), rec, onnx.load(str(path))


def _evaluate(model, x=X):
    return [np.asarray(o, dtype="float32") for o in ReferenceEvaluator(model).run(None, {"data": x})]


def _emulated(converted, x=X):
    return run(*amp.emulate_model(*converted), {"data": x})


@pytest.mark.parametrize("model", [small_model, _mixed_model])
def test_each_amp_cast_is_an_onnx_cast_and_the_checks_pass(tmp_path, model):
    converted, rec, proto = _export(tmp_path, *model())
    graph = amp.mx.io.graph_from_symbol(converted[0])
    casts = {n.name: n for n in graph.nodes if n.op in ("amp_cast", "amp_multicast")}
    assert casts, "the conversion put casts in"
    onnx_casts = {n.name: n for n in proto.graph.node if n.op_type == "Cast"}
    for name, node in casts.items():
        if node.op == "amp_cast":
            to = {"float16": FLOAT16, "float32": FLOAT}[node.attrs["dtype"]]
            assert onnx_casts[name].attribute[0].i == to
        else:  # one Cast per input, to the widest dtype: float32 beside the softmax
            for k in range(len(node.inputs)):
                assert onnx_casts[f"{name}{k}"].attribute[0].i == FLOAT
    assert rec.amp_cast_nodes == len(casts)
    assert rec.amp_casts == sum(len(n.inputs) if n.op == "amp_multicast" else 1 for n in casts.values())
    assert rec.cast_nodes == len(onnx_casts)
    onnx.checker.check_model(str(rec.path), full_check=True)
    onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    # the weights in their stored dtypes, bit for bit
    stored = {**converted[1], **converted[2]}
    for tensor in proto.graph.initializer:
        if tensor.name in stored:
            want = stored[tensor.name].asnumpy()
            got = onnx.numpy_helper.to_array(tensor)
            assert got.dtype == want.dtype and np.array_equal(got, want), tensor.name


@pytest.mark.parametrize("model", [small_model, _mixed_model])
def test_float16_numerics_match_the_emulation(tmp_path, model):
    sym, args, auxs = model()
    converted, _, proto = _export(tmp_path, sym, args, auxs)
    ref = run(sym, args, auxs, {"data": X})
    emulated = _emulated(converted)
    got = _evaluate(proto)
    for g, e, r in zip(got, emulated, ref):
        assert rel_error(g, e) < 4e-3                      # float16 arithmetic, both ways
        assert rel_error(g, r) <= 1.5 * rel_error(e, r) + 0.005


def test_float16_constants_of_mxnet_converters_keep_their_values(tmp_path):
    # MXNet writes float16 constants as their bits read as a number: the clip at 0.5 would
    # clip at 14336, GELU's 1/2 and 1 would be 14336 and 15360
    _, _, proto = _export(tmp_path, *_mixed_model())
    values = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    assert float(values["relu6_max"]) == 0.5 and float(values["relu6_min"]) == 0.0
    assert values["relu6_max"].dtype == np.float16
    halves = [v for k, v in values.items() if k.startswith("gelu") and v.dtype == np.float16]
    assert halves and all(abs(float(v)) <= 2 for v in halves)


def test_bfloat16_exports_with_its_bits_and_says_what_onnx_cannot_hold(tmp_path):
    sym, args, auxs = small_model()
    converted, rec, proto = _export(tmp_path, sym, args, auxs, dtype="bfloat16")
    onnx.checker.check_model(str(rec.path), full_check=True)
    onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    assert rec.dtype == "bfloat16"
    graph = amp.mx.io.graph_from_symbol(converted[0])
    to = {n.name: n.attribute[0].i for n in proto.graph.node if n.op_type == "Cast"}
    for node in graph.nodes:
        if node.op == "amp_cast":
            assert to[node.name] == (BFLOAT16 if node.attrs["dtype"] == "bfloat16" else FLOAT)
    weights = {t.name: t for t in proto.graph.initializer}
    for name, array in converted[1].items():
        if amp.ir.dtypes.array_dtype(array) == "bfloat16":
            bits = array.astype("float32").asnumpy().view(np.uint32) >> 16
            assert weights[name].data_type == BFLOAT16
            assert np.frombuffer(weights[name].raw_data, "<u2").tolist() == bits.ravel().tolist()
    # ONNX's Conv takes no bfloat16 at opset 13: computed in float32 between casts, said
    assert ("conv1_fwd" in dict(rec.widened) or "conv1" in dict(rec.widened))
    assert "take no bfloat16" in rec.describe() or "takes no bfloat16" in rec.describe()


def test_dynamic_batch_and_names_kept(tmp_path):
    sym, args, auxs = small_model()
    converted, rec, proto = _export(tmp_path, sym, args, auxs, dynamic_batch=True)
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and [d.dim_value for d in dims[1:]] == [3, 8, 8]
    emulated = _emulated(converted, X[:1])
    for batch in (1, 3):
        x = np.concatenate([X] * 2)[:batch]
        got = _evaluate(proto, x)[0]
        assert got.shape[0] == batch
        assert rel_error(got[:1], emulated[0]) < 4e-3
    # the names MXNet's own exporter gives the float32 model
    path32 = str(tmp_path / "fp32.onnx")
    mx.onnx.export_model(sym, {**args, **auxs}, [X.shape], np.float32, path32)
    fp32 = onnx.load(path32).graph
    assert [i.name for i in proto.graph.input] == ["data"] == [i.name for i in fp32.input][:1]
    assert [o.name for o in proto.graph.output] == [o.name for o in fp32.output] == list(rec.outputs)


def _wide_model():
    """conv -> fc with a 64 KB float16 weight (and a conv weight under 1 KB)."""
    d = mx.sym.var("data")
    c = mx.sym.Convolution(d, num_filter=16, kernel=(3, 3), pad=(1, 1), name="conv1")
    out = mx.sym.FullyConnected(mx.sym.flatten(c), num_hidden=32, name="fc")
    shapes, _, _ = out.infer_shape(data=X.shape)
    rng = np.random.default_rng(0)
    return out, {n: mx.nd.array(rng.standard_normal(s) * 0.05) for n, s in
                 zip(out.list_arguments(), shapes) if n != "data"}, {}


def test_external_data_holds_the_weights_when_asked_for_by_size(tmp_path):
    sym, args, auxs = _wide_model()
    _, inline, inline_proto = _export(tmp_path, sym, args, auxs, name="inline.onnx")
    _, rec, _ = _export(tmp_path, sym, args, auxs, name="big.onnx", external_threshold=100)
    assert inline.data_path is None and not os.path.exists(str(inline.path) + ".data")
    assert rec.data_path == str(tmp_path / "big.onnx.data") and os.path.getsize(rec.data_path) == rec.data_bytes
    header = onnx.load(str(rec.path), load_external_data=False)
    external = [t.name for t in header.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    inline_small = [t.name for t in header.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
    assert external == ["fc_weight"]                 # 64 KB; the rest under 1 KB stays inline
    assert "conv1_weight" in inline_small and "fc_bias" in inline_small
    assert rec.model_bytes < inline.model_bytes / 2
    onnx.checker.check_model(str(rec.path), full_check=True)
    # moved elsewhere the pair still loads (the location is relative) and computes the same
    moved = tmp_path / "moved"
    moved.mkdir()
    for src in (rec.path, rec.data_path):
        os.rename(src, moved / os.path.basename(src))
    proto = onnx.load(str(moved / "big.onnx"))
    for a, b in zip(_evaluate(proto), _evaluate(inline_proto)):
        assert np.array_equal(a, b)


def test_unexportable_ops_are_all_named_before_anything_is_written(tmp_path):
    d = mx.sym.var("data")
    fc = mx.sym.FullyConnected(mx.sym.flatten(d), num_hidden=4, name="fc")
    out = mx.sym.softsign(mx.sym.erfinv(fc, name="inv"), name="soft")
    shapes, _, _ = out.infer_shape(data=X.shape)
    args = {n: mx.nd.ones(s) * 0.01 for n, s in zip(out.list_arguments(), shapes) if n != "data"}
    s, a, x = amp.convert_model(out, args, {}, target_dtype="float16")
    path = tmp_path / "m.onnx"
    with pytest.raises(OnnxExportError) as err:
        amp.export_onnx(s, a, x, {"data": X.shape}, path)
    assert {(n, op) for n, op, _ in err.value.nodes} == {("inv", "erfinv"), ("soft", "softsign")}
    assert "'inv' (erfinv)" in str(err.value) and "'soft' (softsign)" in str(err.value)
    assert os.listdir(tmp_path) == []


def test_never_overwrites_the_input_and_leaves_nothing_half_written(tmp_path):
    sym, args, auxs = small_model()
    s, a, x = amp.convert_model(sym, args, auxs, target_dtype="float16")
    prefix = str(tmp_path / "m")
    amp.save_checkpoint(prefix, 0, s, a, x)
    params = prefix + "-0000.params"
    before = open(params, "rb").read()
    kept = {k: v.asnumpy().copy() for k, v in a.items()}
    with pytest.raises(OverwriteError):
        amp.export_onnx(s, a, x, {"data": X.shape}, params, protect=[params, prefix + "-symbol.json"])
    assert open(params, "rb").read() == before
    with pytest.raises(amp.InputShapeError):
        amp.export_onnx(s, a, x, {"images": X.shape}, tmp_path / "bad.onnx")
    assert sorted(os.listdir(tmp_path)) == ["m-0000.params", "m-symbol.json"]
    amp.export_onnx(s, a, x, {"data": X.shape}, tmp_path / "ok.onnx")
    assert sorted(os.listdir(tmp_path)) == ["m-0000.params", "m-symbol.json", "ok.onnx"]
    assert all(np.array_equal(kept[k], a[k].asnumpy()) for k in kept)   # arguments untouched


def test_converters_are_registered_once_beside_mxnets_own():
    from mxnet.onnx.mx2onnx._export_onnx import MXNetGraph
    from mxnet_amp.onnx.converters import register_converters
    before = {v: dict(MXNetGraph.registry_[v]) for v in (12, 13)}
    register_converters()
    register_converters()
    for v in (12, 13):
        assert "amp_cast" in MXNetGraph.registry_[v] and "amp_multicast" in MXNetGraph.registry_[v]
        for op, fn in before[v].items():
            assert MXNetGraph.registry_[v][op] is fn


def test_bfloat16_bits_round_to_nearest_even():
    from mxnet_amp.onnx.retype import bfloat16_bits
    values = np.array([1.0, 1.00390625, 1.01171875, -2.5, np.inf, np.nan], "float32")
    bits = bfloat16_bits(values)
    # 1 + 2^-8 is a tie: to even (1.0); 1 + 3 * 2^-8 rounds up to 1 + 2^-6
    assert bits.tolist()[:5] == [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7F80]
    assert (bits[5] & 0x7F80) == 0x7F80 and (bits[5] & 0x7F)


def test_cli_convert_with_onnx_and_export_onnx(tmp_path, capsys):
    from mxnet_amp.cli.main import main
    sym, args, auxs = small_model()
    prefix = str(tmp_path / "m")
    amp.save_checkpoint(prefix, 0, sym, args, auxs)
    out = str(tmp_path / "m16.onnx")
    assert main(["convert", prefix, "--target-dtype", "float16", "--out", prefix + "-fp16",
                 "--onnx", out, "--input-shape", "data:2x3x8x8", "--dynamic-batch", "-q",
                 "--report", str(tmp_path / "r.json")]) == 0
    import json
    record = json.load(open(tmp_path / "r.json"))["extra"]["onnx"]
    assert record["opset"] == 13 and record["dynamic_batch"] and record["path"] == out
    assert record["amp_casts"] >= 1 and record["model_bytes"] == os.path.getsize(out)
    assert main(["export-onnx", prefix + "-fp16", "--input-shape", "data:2x3x8x8", "-o",
                 str(tmp_path / "again.onnx"), "--external-data"]) == 0
    assert os.path.exists(tmp_path / "again.onnx.data")
    assert "ONNX export:" in capsys.readouterr().out
    # the input checkpoint is never the output; no shape, no file
    assert main(["export-onnx", prefix, "--input-shape", "data:2x3x8x8", "-o", prefix + "-0000.params"]) != 0
    assert main(["convert", prefix, "--target-dtype", "float16", "--out", prefix + "-x",
                 "--onnx", str(tmp_path / "x.onnx")]) != 0
    assert not os.path.exists(prefix + "-x-symbol.json") and not os.path.exists(tmp_path / "x.onnx")


def test_bfloat16_constants_are_rounded_once_from_their_float32_values(tmp_path):
    # a clip at 1e6: past float16's range (inf there), a finite bfloat16
    from mxnet_amp.onnx.retype import bfloat16_bits
    d = mx.sym.var("data")
    c = mx.sym.Convolution(d, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv")
    out = mx.sym.clip(c, a_min=-0.1, a_max=1e6, name="cl")
    shapes, _, _ = out.infer_shape(data=X.shape)
    args = {n: mx.nd.ones(s) * 0.1 for n, s in zip(out.list_arguments(), shapes) if n != "data"}
    _, rec, proto = _export(tmp_path, out, args, {}, dtype="bfloat16")
    values = {t.name: t for t in proto.graph.initializer}
    for name, value in (("cl_max", 1e6), ("cl_min", -0.1)):
        assert values[name].data_type == BFLOAT16
        word = np.frombuffer(values[name].raw_data, "<u2")[0]
        assert word == bfloat16_bits(np.array([value], "float32"))[0], name


def test_unfolded_batchnorm_keeps_float32_parameters_and_its_fixed_gamma(tmp_path):
    """MXNet's BatchNorm reads float32 gamma, beta, mean and variance beside float16 data and
    computes in float32; ONNX's (opset 13) wants one dtype for all: the node computes in
    float32 between casts, its parameters written as stored, not rounded to float16. And
    ``fix_gamma=True`` (the symbol API's default), which MXNet's converter ignores, exports a
    gamma of ones: the float32 export then equals MXNet (it was 0.27 off)."""
    sym, args, auxs = small_model()
    s, a, x = amp.convert_model(sym, args, auxs, target_dtype="float16", fold_batchnorm=False)
    rec = amp.export_onnx(s, a, x, {"data": X.shape}, tmp_path / "bn.onnx")
    proto = onnx.load(str(rec.path))
    (bn,) = [n for n in proto.graph.node if n.op_type == "BatchNormalization"]
    stored = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    np.testing.assert_array_equal(stored[bn.input[1]], np.ones(4, "float32"))      # fix_gamma
    for name in bn.input[2:]:
        assert np.array_equal(stored[name], {**a, **x}[name].asnumpy()), name      # float32, exact
    casts = {n.output[0]: n for n in proto.graph.node if n.op_type == "Cast"}
    assert casts[bn.input[0]].attribute[0].i == FLOAT and casts["bn1"].input[0] == bn.output[0]
    assert casts["bn1"].attribute[0].i == FLOAT16                     # handed on in float16
    assert np.array_equal(args["bn1_gamma"].asnumpy(), a["bn1_gamma"].asnumpy())   # caller's kept
    # written as inference (momentum 1.0: mxnet_amp.onnx.tidy), ReferenceEvaluator computes it
    # as MXNet does (with MXNet's momentum 0.9 it blended in batch statistics: 0.02 off)
    (ref,) = run(sym, args, auxs, {"data": X})
    rec32 = amp.export_onnx(sym, args, auxs, {"data": X.shape}, tmp_path / "bn32.onnx")
    assert rel_error(_evaluate(onnx.load(str(rec32.path)))[0], ref) < 1e-5
    assert rel_error(_evaluate(proto)[0], _emulated((s, a, x))[0]) < 4e-3
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime, installed --no-deps (docs/onnx.md)")
    (got32,) = ort.InferenceSession(str(rec32.path), providers=["CPUExecutionProvider"]).run(None, {"data": X})
    assert rel_error(got32, ref) < 1e-5
    (got,) = ort.InferenceSession(str(rec.path), providers=["CPUExecutionProvider"]).run(None, {"data": X})
    (emulated,) = _emulated((s, a, x))
    assert rel_error(got, emulated) < 4e-3 and rel_error(got, ref) < 4e-3


def test_float16_range_computes_in_float32_between_casts(tmp_path):
    """MXNet's converter writes ``arange_like`` of a float16 tensor as an ONNX Range in float16,
    which ONNX's Range does not take (the trained zoo's BERT-style encoder failed the checks):
    the Range computes in float32 and its output is cast back, the record names it."""
    d = mx.sym.var("data")
    fc = mx.sym.FullyConnected(mx.sym.flatten(d), num_hidden=6, name="fc")
    out = mx.sym.broadcast_add(fc, mx.sym.contrib.arange_like(fc, axis=1, name="pos"), name="out")
    shapes, _, _ = out.infer_shape(data=X.shape)
    rng = np.random.default_rng(3)
    args = {n: mx.nd.array(rng.standard_normal(s).astype("float32") * 0.1)
            for n, s in zip(out.list_arguments(), shapes) if n != "data"}
    converted, rec, proto = _export(tmp_path, out, args, {})
    assert rec.widened == (("pos", "Range"),) and "pos (Range)" in rec.describe()
    (range_node,) = [n for n in proto.graph.node if n.op_type == "Range"]
    casts = {n.output[0]: n.attribute[0].i for n in proto.graph.node if n.op_type == "Cast"}
    assert all(casts[i] == FLOAT for i in range_node.input)           # read in float32
    (back,) = [n for n in proto.graph.node if n.op_type == "Cast" and n.input[0] == range_node.output[0]]
    assert back.attribute[0].i == FLOAT16 and back.output[0] == "pos"  # and handed on in float16
    (got,) = _evaluate(proto)
    (emulated,) = _emulated(converted)
    assert rel_error(got, emulated) < 4e-3


def _conv_chain():
    """conv -> relu -> conv, all float16 once converted: no node onnxruntime's CPU EP
    has a float16 kernel for."""
    d = mx.sym.var("data")
    c1 = mx.sym.Convolution(d, num_filter=8, kernel=(3, 3), pad=(1, 1), name="conv1")
    r1 = mx.sym.Activation(c1, act_type="relu", name="relu1")
    out = mx.sym.Convolution(r1, num_filter=4, kernel=(1, 1), name="conv2")
    shapes, _, _ = out.infer_shape(data=X.shape)
    rng = np.random.default_rng(2)
    return out, {n: mx.nd.array(rng.standard_normal(s).astype("float32") * 0.3)
                 for n, s in zip(out.list_arguments(), shapes) if n != "data"}, {}


def test_onnxruntime_cpu_computes_a_float16_export_in_float32(tmp_path):
    """Why benchmarks/onnx_export.py judges onnxruntime's CPU EP against float16 weights with
    float32 arithmetic, not against the emulation: where the EP has no float16 kernel it
    casts to float32 around the node and then removes every float32 -> float16 -> float32
    cast pair, the model's own included (microsoft/onnxruntime#8787), so no tensor between
    such ops is rounded, not even the model's output, cast back to float32. The float16 arithmetic itself is
    checked against the emulation with ``ReferenceEvaluator`` (above)."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime, installed --no-deps (docs/onnx.md)")
    from mxnet_amp.mx.params import cast_array
    from mxnet_amp.passes.strip_casts import strip_casts
    converted, rec, _ = _export(tmp_path, *_conv_chain())
    (got,) = ort.InferenceSession(str(rec.path), providers=["CPUExecutionProvider"]).run(None, {"data": X})
    sym = amp.mx.io.graph_to_symbol(strip_casts(amp.mx.io.graph_from_symbol(converted[0])))
    wide = [{k: cast_array(v, "float32") for k, v in p.items()} for p in converted[1:]]
    (float32_arithmetic,) = run(sym, *wide, {"data": X})
    (emulated,) = _emulated(converted)
    assert got.dtype == np.float32   # the converted model casts its output back
    assert rel_error(got, float32_arithmetic) < 1e-6           # float32 round-off only
    assert rel_error(got, emulated) > 1e-4                     # the float16 roundings it skips


def test_params_given_as_none_are_blamed_not_the_input_shapes(tmp_path):
    """``export_onnx(sym, None, None, ...)`` is an ArgumentError naming arg_params and the
    weights without values (it blamed the input shapes; newcomer audit, #42)."""
    from mxnet_amp.errors import ArgumentError
    sym, _, _ = small_model()
    with pytest.raises(ArgumentError, match=r"arg_params is None, so \w+_weight"):
        amp.export_onnx(sym, None, None, {"data": X.shape}, tmp_path / "m.onnx")
    assert os.listdir(tmp_path) == []


def test_cli_export_onnx_of_a_stripped_checkpoint_and_to_stdout(tmp_path, capsys):
    """A float16 checkpoint saved without its amp casts (mx.model.save_checkpoint) is exported
    with its casts restored (it failed with the cause cut off); ``-o -`` is refused before
    anything is written (it wrote the model to stdout, then failed); an unexportable node's
    cause is on the error line (newcomer audit, #42)."""
    from mxnet_amp.cli.main import main
    sym, args, auxs = small_model()
    s, a, x = amp.convert_model(sym, args, auxs, target_dtype="float16")
    prefix = str(tmp_path / "stripped")
    mx.model.save_checkpoint(prefix, 0, s, a, x)          # drops the amp casts
    out = str(tmp_path / "s.onnx")
    assert main(["export-onnx", prefix, "--input-shape", "data:2x3x8x8", "-o", out]) == 0
    assert "float16" in capsys.readouterr().out and os.path.getsize(out) > 0
    assert main(["export-onnx", prefix, "--input-shape", "data:2x3x8x8", "-o", "-"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "export-onnx -o -: the ONNX model is written to a file" in captured.err
    d = mx.sym.var("data")
    bad = mx.sym.erfinv(mx.sym.FullyConnected(mx.sym.flatten(d), num_hidden=4, name="fc"), name="inv")
    amp.save_checkpoint(str(tmp_path / "bad"), 0, bad,
                        {"fc_weight": mx.nd.ones((4, 192)), "fc_bias": mx.nd.zeros(4)}, {})
    assert main(["export-onnx", str(tmp_path / "bad"), "--input-shape", "data:2x3x8x8", "-o", out]) == 2
    assert ("1 node(s) cannot be exported to ONNX: 'inv' (erfinv): MXNet's ONNX exporter has no "
            "converter for erfinv") in capsys.readouterr().err


def _node_names_unique(proto):
    names = [n.name for n in proto.graph.node]
    return all(names) and len(set(names)) == len(names)


@pytest.mark.parametrize("dtype", [None, "float16", "bfloat16"])
def test_every_node_is_named_after_its_mxnet_node_and_uniquely(tmp_path, dtype):
    """MXNet's converters leave most nodes unnamed (graph tools then derive duplicate names):
    every node of the file has a name of its own, starting with the name of an MXNet node of
    the converted graph (a Cast: of the tensor it casts, itself named after its node)."""
    converted, rec, proto = _export(tmp_path, *_mixed_model(), dtype=dtype)
    assert _node_names_unique(proto)
    mxnet = [n.name for n in amp.mx.io.graph_from_symbol(converted[0]).nodes if not n.is_variable]
    assert all(any(n.name.startswith(m) for m in mxnet) for n in proto.graph.node), \
        [n.name for n in proto.graph.node if not any(n.name.startswith(m) for m in mxnet)]
    by_op = {n.op_type: n.name for n in proto.graph.node}
    assert by_op["Gemm"] == "fc_gemm" and by_op["Conv"].startswith("conv")   # conv_float32: bf16


def _two_heads():
    """``Group([b, a])`` with ``b = FC(a)``: list_outputs says b, a; mx.onnx writes a, b."""
    d = mx.sym.var("data")
    a = mx.sym.FullyConnected(mx.sym.flatten(d), num_hidden=6, name="a")
    b = mx.sym.FullyConnected(mx.sym.relu(a, name="r"), num_hidden=4, name="b")
    out = mx.sym.Group([b, a])
    shapes, _, _ = out.infer_shape(data=X.shape)
    rng = np.random.default_rng(4)
    return out, {n: mx.nd.array(rng.standard_normal(s).astype("float32") * 0.3)
                 for n, s in zip(out.list_arguments(), shapes) if n != "data"}, {}


@pytest.mark.parametrize("dtype", [None, "float16"])
def test_outputs_are_in_the_order_mx_onnx_export_model_writes(tmp_path, dtype):
    """A deploy script reading outputs by position: the file lists them as
    ``mx.onnx.export_model`` lists the float32 model's (by the node that makes each, not by
    ``list_outputs()``); ``symbol_outputs`` gives them in ``list_outputs()`` order."""
    sym, args, auxs = _two_heads()
    assert sym.list_outputs() == ["b_output", "a_output"]
    theirs = tmp_path / "mx.onnx"
    mx.onnx.export_model(sym, args, [X.shape], [np.float32], str(theirs))
    expected = [o.name for o in onnx.load(str(theirs)).graph.output]
    assert expected == ["a", "b"]
    converted, rec, proto = _export(tmp_path, sym, args, auxs, dtype=dtype)
    assert [o.name for o in proto.graph.output] == list(rec.outputs) == expected
    assert rec.symbol_outputs == ("b", "a")
    got = dict(zip(rec.outputs, _evaluate(proto)))
    ref = run(*(converted if dtype is None else amp.emulate_model(*converted)), {"data": X})
    for name, value in zip(rec.symbol_outputs, ref):
        assert rel_error(got[name], value) < (1e-5 if dtype is None else 4e-3), name


def _transformer_block():
    """The trained tests' transformer encoder (LayerNorm, batch_dot attention, softmax, FFN),
    random weights: the block onnxconverter-common failed on."""
    import trained_models as tm
    from mxnet_amp.gluon.model import block_model
    net = tm._transformer()
    net.initialize(mx.init.Xavier(magnitude=2.0))
    net.hybridize()
    x = mx.nd.random.uniform(shape=(2, tm.SEQ_LEN, 10))
    net(x)
    sym, args, auxs, _ = block_model(net, ["data"])
    return sym, args, auxs, x.asnumpy()


def _ssd():
    import gluoncv
    from mxnet_amp.gluon.model import block_model
    mx.random.seed(0)
    net = gluoncv.model_zoo.get_model("ssd_512_mobilenet1.0_voc", pretrained=False, pretrained_base=False)
    net.initialize()
    net.hybridize()
    x = mx.nd.random.uniform(shape=(1, 3, 512, 512))
    net(x)
    sym, args, auxs, _ = block_model(net, ["data"])
    return sym, args, auxs, x.asnumpy()


@pytest.mark.parametrize("build", [_transformer_block, _ssd])
def test_onnxconverter_common_float16_of_our_float32_export_loads_in_onnxruntime(tmp_path, build):
    """The peer's usual path to a float16 file, ``convert_float_to_float16(keep_io_types=True)``
    on our float32 export, gives a file onnxruntime loads and runs, close to float32. It
    failed on both: unnamed nodes (the peer's casts then share names) and, on the SSD, the
    casts to float32 MXNet's converters write (Greater's bool; box_decode's), which the peer
    retypes float16 without changing their ``to``."""
    occ = pytest.importorskip("onnxconverter_common.float16", reason="onnxconverter-common, installed --no-deps")
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime, installed --no-deps (docs/onnx.md)")
    import warnings
    sym, args, auxs, x = build()
    rec = amp.export_onnx(sym, args, auxs, {"data": x.shape}, tmp_path / "m.onnx")
    model = onnx.load(str(rec.path))
    assert _node_names_unique(model)
    onnx.checker.check_model(model, full_check=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # the peer's notes on tiny weights it flushes
        half = occ.convert_float_to_float16(model, keep_io_types=True)
    onnx.save(half, str(tmp_path / "half.onnx"))
    got = ort.InferenceSession(str(tmp_path / "half.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"data": x})
    want = ort.InferenceSession(str(rec.path), providers=["CPUExecutionProvider"]).run(None, {"data": x})
    assert [g.shape for g in got] == [w.shape for w in want]
    if build is _transformer_block:                 # the SSD's NMS picks are not comparable
        assert rel_error(got[0], want[0]) < 0.02
