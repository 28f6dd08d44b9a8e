"""Drop-in correctness on what users bring: Symbol-API checkpoints (weights without
``__dtype__``), Gluon exports, ``.export()`` of a converted block, BucketingModules, and
models converted before.

Each converted model must bind the ways MXNet users bind: ``Symbol.simple_bind`` without a
``type_dict``, ``Module.bind``, ``SymbolBlock.imports`` and the C predict API. bfloat16 runs
natively where this CPU can; float16 (and bfloat16 elsewhere) is checked through emulation.
"""
from __future__ import annotations

import json
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon import nn

import mxnet_amp as amp
from mxnet_amp.gluon.block import AMPSymbolBlock
from mxnet_amp.gluon.model import block_model
from mxnet_amp.ir.dtypes import array_dtype, MX_CODE
from mxnet_amp.mx.hardware import bf16_runs_natively

from helpers import assert_dtype_tags, casts_into, graph_of, rel_error, run
from upstream.c_predictor import Predictor

# every pass these tests run is checked by verify_graph

DTYPES = ("float16", "bfloat16")
BATCH = 2
IMAGE = (BATCH, 3, 16, 16)
# max |out - fp32| / max |fp32| on softmax outputs of these small random nets
TOLERANCE = {"float16": 5e-3, "bfloat16": 4e-2}


def _native(dtype: str) -> bool:
    return dtype == "bfloat16" and bf16_runs_natively()


def _num_casts(sym) -> int:
    nodes = json.loads(sym.tojson(remove_amp_cast=False))["nodes"]
    return sum(n["op"] in ("amp_cast", "amp_multicast") for n in nodes)


def _symbol_api_checkpoint(prefix: str) -> None:
    """conv -> BN -> relu -> pool -> FC -> SoftmaxOutput, written by mx.model.save_checkpoint."""
    data = mx.sym.var("data")
    x = mx.sym.Convolution(data, num_filter=8, kernel=(3, 3), pad=(1, 1), name="conv0")
    x = mx.sym.BatchNorm(x, fix_gamma=False, name="bn0")
    x = mx.sym.Activation(x, act_type="relu", name="relu0")
    x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool0")
    x = mx.sym.FullyConnected(mx.sym.flatten(x), num_hidden=10, name="fc0")
    sym = mx.sym.SoftmaxOutput(x, name="softmax")
    mod = mx.mod.Module(sym, data_names=["data"], label_names=["softmax_label"])
    mod.bind([("data", IMAGE)], [("softmax_label", (BATCH,))], for_training=False)
    mx.random.seed(0)
    mod.init_params(mx.init.Xavier())
    args, auxs = mod.get_params()
    rng = np.random.RandomState(0)
    # BN statistics away from identity, so that the aux states matter
    auxs = {"bn0_moving_mean": mx.nd.array(rng.randn(8) * 0.1),
            "bn0_moving_var": mx.nd.array(rng.rand(8) + 0.5)}
    mx.model.save_checkpoint(prefix, 0, sym, args, auxs)


def _gluon_net():
    # a fixed prefix: param names do not depend on how many blocks were built before
    net = nn.HybridSequential(prefix="net_")
    with net.name_scope():
        net.add(nn.Conv2D(8, 3, padding=1, in_channels=3), nn.BatchNorm(in_channels=8),
                nn.Activation("relu"), nn.MaxPool2D(2), nn.Dense(10, in_units=8 * 8 * 8))
    mx.random.seed(0)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.zeros(IMAGE))
    return net


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """``{source: (prefix, input shapes)}`` for a Symbol-API and a Gluon-exported model."""
    root = tmp_path_factory.mktemp("ckpt")
    legacy = str(root / "legacy")
    _symbol_api_checkpoint(legacy)
    gluon = str(root / "gluon")
    _gluon_net().export(gluon)
    return {"symbol_api": (legacy, {"data": IMAGE, "softmax_label": (BATCH,)}),
            "gluon": (gluon, {"data": IMAGE})}


def _inputs(shapes: dict) -> dict:
    rng = np.random.RandomState(1)
    return {k: (rng.rand(*s).astype("float32") if k == "data" else np.zeros(s, "float32"))
            for k, s in shapes.items()}


def _module(sym, shapes: dict, args, auxs):
    """A Module bound the plain way (no dtype given anywhere), params set."""
    data = [k for k in shapes if k == "data"]
    labels = [k for k in shapes if k != "data"]
    mod = mx.mod.Module(sym, data_names=data, label_names=labels, context=mx.cpu())
    mod.bind([(k, shapes[k]) for k in data], [(k, shapes[k]) for k in labels] or None,
             for_training=False)
    mod.set_params(args, auxs)
    return mod


def _module_forward(mod, inputs: dict) -> np.ndarray:
    batch = mx.io.DataBatch([mx.nd.array(inputs["data"])],
                            [mx.nd.array(v) for k, v in inputs.items() if k != "data"] or None)
    mod.forward(batch, is_train=False)
    return mod.get_outputs()[0].asnumpy()


def _check_against_fp32(dtype, sym, args, auxs, inputs, ref, native_out=None):
    """The converted model's output is within tolerance of fp32: the native output where
    this CPU runs it, else the emulated one."""
    if native_out is None:
        esym, eargs, eauxs = amp.emulate_model(sym, args, auxs)
        native_out = run(esym, eargs, eauxs, inputs)[0]
    err = rel_error(native_out, ref)
    assert err < TOLERANCE[dtype], err
    return native_out


# --------------------------------------------------------------------------- binding

@pytest.mark.parametrize("cast_optional_params", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("source", ["symbol_api", "gluon"])
def test_checkpoint_converts_and_binds_without_a_type_dict(checkpoints, source, dtype,
                                                           cast_optional_params):
    prefix, shapes = checkpoints[source]
    sym, args, auxs = mx.model.load_checkpoint(prefix, 0)
    inputs = _inputs(shapes)
    ref = _module_forward(_module(sym, shapes, args, auxs), inputs)
    s2, a2, x2 = amp.convert_model(sym, args, auxs, target_dtype=dtype,
                                   cast_optional_params=cast_optional_params)
    assert_dtype_tags(s2, a2, x2)
    weight = a2["conv0_weight" if source == "symbol_api" else "net_conv0_weight"]
    assert array_dtype(weight) == (dtype if cast_optional_params else "float32")

    exe = s2.simple_bind(mx.cpu(), grad_req="null", **shapes)
    for name, value in {**a2, **x2}.items():
        slot = exe.arg_dict.get(name, exe.aux_dict.get(name))
        assert array_dtype(slot) == array_dtype(value), name
        value.copyto(slot)
    mod = _module(s2, shapes, a2, x2)
    if _native(dtype):
        out = exe.forward(is_train=False, **{k: mx.nd.array(v) for k, v in inputs.items()})
        out = out[0].asnumpy()
        np.testing.assert_allclose(_module_forward(mod, inputs), out, rtol=1e-6, atol=1e-7)
        _check_against_fp32(dtype, s2, a2, x2, inputs, ref, native_out=out)
    # emulation checks the numerics everywhere (float16 never runs on a CPU)
    _check_against_fp32(dtype, s2, a2, x2, inputs, ref)


@pytest.mark.parametrize("cast_optional_params", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("source", ["symbol_api", "gluon"])
def test_saved_conversion_loads_in_gluon_and_the_c_predictor(checkpoints, source, dtype,
                                                            cast_optional_params, tmp_path):
    prefix, shapes = checkpoints[source]
    out_prefix = str(tmp_path / "amp")
    conversion, a2, x2, _ = amp.convert_checkpoint(prefix, 0, out_prefix, target_dtype=dtype,
                                                   cast_optional_params=cast_optional_params)
    sym_file, params_file = f"{out_prefix}-symbol.json", f"{out_prefix}-0000.params"
    s2, la, lx = amp.load_checkpoint(out_prefix, 0)
    assert_dtype_tags(s2, la, lx)
    assert _num_casts(s2) == _num_casts(conversion.symbol) > 0

    block = mx.gluon.SymbolBlock.imports(sym_file, list(shapes), params_file)
    saved = {**la, **lx}
    assert {k: array_dtype(p.data()) for k, p in block.collect_params().items()} == \
        {k: array_dtype(v) for k, v in saved.items()}

    # MXNet's C predict API (what C/C++ deployments call), through ctypes: MXPredCreate
    # binds with no dtype argument at all
    with open(sym_file) as f, open(params_file, "rb") as g:
        predictor = Predictor(f.read(), g.read(), shapes)
    assert predictor.output_type(0) == 0  # float32 out
    assert predictor.output_shape(0) == (BATCH, 10)
    if _native(dtype):
        inputs = _inputs(shapes)
        mod_out = _module_forward(_module(s2, shapes, la, lx), inputs)
        predictor.forward(**inputs)
        np.testing.assert_allclose(predictor.get_output(0), mod_out, rtol=1e-6, atol=1e-7)
        gluon_out = block(*[mx.nd.array(inputs[k]) for k in shapes]).asnumpy()
        # the executor fuses conv+BN+relu (oneDNN subgraph), Gluon's CachedOp does not:
        # each rounds to bfloat16 at other places
        assert rel_error(gluon_out, mod_out) < TOLERANCE[dtype]


@pytest.mark.parametrize("cast_optional_params", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_entry_point_tags_weights_with_their_param_dtypes(checkpoints, dtype,
                                                               cast_optional_params):
    """convert_symbol tags as convert_model does (weights it is told of are float32 as
    given, low precision where cast_optional_params stores them so); convert_hybrid_block and
    auto_convert_model tag their results too."""
    options = dict(target_dtype=dtype, cast_optional_params=cast_optional_params)
    for source, (prefix, shapes) in checkpoints.items():
        sym, args, auxs = mx.model.load_checkpoint(prefix, 0)
        # (convert_symbol has no params to fold)
        s_model, a2, x2 = amp.convert_model(sym, args, auxs, fold_batchnorm=False, **options)
        s_sym = amp.convert_symbol(sym, data_names=list(shapes), **options)
        assert s_sym.tojson(remove_amp_cast=False) == s_model.tojson(remove_amp_cast=False)
        if source == "gluon":
            # Gluon exports tag their weights: the default data_names find the input alone
            assert amp.convert_symbol(sym, **options).tojson(remove_amp_cast=False) == \
                s_model.tojson(remove_amp_cast=False)
        s_auto, a_auto, x_auto, _ = amp.auto_convert_model(
            sym, args, auxs, _inputs(shapes), quiet=True, max_executions=4, **options)
        assert_dtype_tags(s_auto, a_auto, x_auto)
    net16 = amp.convert_hybrid_block(_gluon_net(), **options)
    bsym, bargs, bauxs, _ = block_model(net16)
    assert_dtype_tags(bsym, bargs, bauxs)


def test_symbol_api_graph_without_data_names_counts_every_input_as_data(checkpoints):
    """As mx.contrib.amp: inputs without __dtype__ are data, so an untagged Symbol-API graph
    converted without params or data_names keeps every input float32 and still binds."""
    prefix, shapes = checkpoints["symbol_api"]
    sym, _, _ = mx.model.load_checkpoint(prefix, 0)
    s2 = amp.convert_symbol(sym, target_dtype="bfloat16", cast_optional_params=True)
    exe = s2.simple_bind(mx.cpu(), grad_req="null", **shapes)
    assert {array_dtype(a) for a in [*exe.arg_arrays, *exe.aux_arrays]} == {"float32"}


# --------------------------------------------------------------------------- export()

@pytest.mark.parametrize("cast_optional_params", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_export_of_converted_block_reimports_with_same_outputs_and_casts(dtype,
                                                                          cast_optional_params,
                                                                          tmp_path):
    net16 = amp.convert_block(_gluon_net(), target_dtype=dtype,
                              cast_optional_params=cast_optional_params)
    assert isinstance(net16, AMPSymbolBlock)
    sym_file, params_file = net16.export(str(tmp_path / "net16"))
    assert (sym_file, params_file) == (str(tmp_path / "net16-symbol.json"),
                                       str(tmp_path / "net16-0000.params"))
    again = mx.gluon.SymbolBlock.imports(sym_file, ["data"], params_file)
    n_casts = _num_casts(block_model(net16)[0])
    assert n_casts > 0 and _num_casts(block_model(again)[0]) == n_casts
    x = mx.nd.array(_inputs({"data": IMAGE})["data"])
    if _native(dtype):
        np.testing.assert_array_equal(again(x).asnumpy(), net16(x).asnumpy())
    np.testing.assert_array_equal(amp.emulate_block(again)(x).asnumpy(),
                                  amp.emulate_block(net16)(x).asnumpy())
    # asked for, export() strips the casts as SymbolBlock.export does
    net16.export(str(tmp_path / "stripped"), remove_amp_cast=True)
    assert _num_casts(mx.sym.load(str(tmp_path / "stripped-symbol.json"))) < n_casts


def test_emulated_block_export_keeps_its_rounding(tmp_path):
    """emulate_block's rounding is made of amp_casts too: its export() keeps them."""
    net = _gluon_net()
    emulated = amp.emulate_block(amp.convert_block(net, target_dtype="float16"))
    sym_file, params_file = emulated.export(str(tmp_path / "emu"))
    again = mx.gluon.SymbolBlock.imports(sym_file, ["data"], params_file)
    x = mx.nd.array(_inputs({"data": IMAGE})["data"])
    np.testing.assert_array_equal(again(x).asnumpy(), emulated(x).asnumpy())
    assert not np.array_equal(again(x).asnumpy(), net(x).asnumpy())


# --------------------------------------------------------------------------- converted before

def _copies(params: dict) -> dict:
    return {k: v.copy() for k, v in params.items()}


@pytest.mark.parametrize("dtype", DTYPES)
def test_contrib_converted_checkpoint_stripped_of_casts_is_refused(checkpoints, dtype, tmp_path):
    prefix, shapes = checkpoints["symbol_api"]
    sym, args, auxs = mx.model.load_checkpoint(prefix, 0)
    from mxnet.contrib import amp as contrib_amp
    csym, cargs, cauxs = contrib_amp.convert_model(sym, _copies(args), _copies(auxs),
                                                   target_dtype=dtype, cast_optional_params=True)
    stripped = str(tmp_path / "contrib")
    mx.model.save_checkpoint(stripped, 0, csym, cargs, cauxs)  # drops the amp casts
    s, a, x = mx.model.load_checkpoint(stripped, 0)
    assert _num_casts(s) == 0 and array_dtype(a["conv0_weight"]) == dtype

    with pytest.raises(amp.AlreadyConvertedError, match=f"conv0_weight.*already {dtype}"):
        amp.convert_model(s, a, x, target_dtype=dtype)
    with pytest.raises(amp.AlreadyConvertedError, match="conv0_weight"):
        amp.convert_checkpoint(stripped, 0, str(tmp_path / "again"), target_dtype=dtype)
    assert not any(f.startswith("again") for f in os.listdir(tmp_path))
    # the symbol alone has no params: its bfloat16/float16 tags declare what the caller
    # binds, so those weights are read as declared (never rounded again)
    again = amp.convert_symbol(s, target_dtype=dtype)
    assert again.attr_dict()["conv0_weight"]["__dtype__"] == str(MX_CODE[dtype])

    # what the message suggests: float32 copies (exact) convert, and store low again
    a32 = {k: v.astype("float32") for k, v in a.items()}
    x32 = {k: v.astype("float32") for k, v in x.items()}
    s2, a2, x2 = amp.convert_model(s, a32, x32, target_dtype=dtype, cast_optional_params=True,
                                   fold_batchnorm=False)   # the weights as they were, rounded
    assert_dtype_tags(s2, a2, x2)
    assert array_dtype(a2["conv0_weight"]) == dtype
    np.testing.assert_array_equal(a2["conv0_weight"].astype("float32").asnumpy(),
                                  a32["conv0_weight"].asnumpy())


def test_block_cast_to_float16_is_refused_naming_its_params():
    net = _gluon_net()
    net.cast("float16")
    with pytest.raises(amp.AlreadyConvertedError, match=r"net_conv0_weight.*already float16"):
        amp.convert_block(net, target_dtype="float16")


# --------------------------------------------------------------------------- BucketingModule

VOCAB, HIDDEN = 20, 16


def _lstm_sym_gen(seq_len):
    data, label = mx.sym.var("data"), mx.sym.var("softmax_label")
    embed = mx.sym.Embedding(data, input_dim=VOCAB, output_dim=HIDDEN, name="embed")
    cell = mx.rnn.LSTMCell(HIDDEN, prefix="lstm_")
    out, _ = cell.unroll(seq_len, inputs=embed, merge_outputs=True, layout="NTC")
    pred = mx.sym.FullyConnected(mx.sym.reshape(out, (-1, HIDDEN)), num_hidden=VOCAB, name="pred")
    sym = mx.sym.SoftmaxOutput(pred, mx.sym.reshape(label, (-1,)), name="softmax")
    return sym, ("data",), ("softmax_label",)


def _bucket_batch(seq_len):
    tokens = np.random.RandomState(seq_len).randint(0, VOCAB, (BATCH, seq_len))
    return mx.io.DataBatch([mx.nd.array(tokens)], [mx.nd.zeros((BATCH, seq_len))],
                           bucket_key=seq_len,
                           provide_data=[mx.io.DataDesc("data", (BATCH, seq_len))],
                           provide_label=[mx.io.DataDesc("softmax_label", (BATCH, seq_len))])


def _bucketing_module():
    mod = mx.mod.BucketingModule(_lstm_sym_gen, default_bucket_key=8, context=mx.cpu())
    mod.bind(_bucket_batch(8).provide_data, _bucket_batch(8).provide_label, for_training=False)
    mx.random.seed(0)
    mod.init_params(mx.init.Xavier())
    return mod


def _bucket_output(mod, seq_len):
    mod.forward(_bucket_batch(seq_len), is_train=False)
    return mod.get_outputs()[0].asnumpy()


@pytest.mark.parametrize("cast_optional_params", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_bucketing_module_converts_every_bucket(dtype, cast_optional_params):
    mod = _bucketing_module()
    before = {k: v.asnumpy().copy() for k, v in mod.get_params()[0].items()}
    ref = {n: _bucket_output(mod, n) for n in (8, 5)}
    mod16 = amp.convert_bucketing_module(mod, dtype, cast_optional_params=cast_optional_params)
    assert isinstance(mod16, mx.mod.BucketingModule) and mod16 is not mod
    after = mod.get_params()[0]
    assert all(array_dtype(after[k]) == "float32" and np.array_equal(after[k].asnumpy(), v)
               for k, v in before.items())

    first = _bucket_batch(8)
    mod16.bind(first.provide_data, first.provide_label, for_training=False)
    args, auxs = mod16.get_params()
    assert array_dtype(args["pred_weight"]) == (dtype if cast_optional_params else "float32")
    # bucket 5 was never bound before conversion: switch_bucket builds it converted
    mod16.switch_bucket(5, _bucket_batch(5).provide_data, _bucket_batch(5).provide_label)
    bucket5 = mod16.symbol
    assert _num_casts(bucket5) > 0
    assert_dtype_tags(bucket5, args, auxs)
    for n in (8, 5):
        if _native(dtype):
            _check_against_fp32(dtype, None, None, None, None, ref[n],
                                native_out=_bucket_output(mod16, n))
    inputs = {"data": _bucket_batch(5).data[0].asnumpy(), "softmax_label": np.zeros((BATCH, 5))}
    _check_against_fp32(dtype, bucket5, args, auxs, inputs, ref[5])


def test_bucketing_module_needs_initialised_params():
    mod = mx.mod.BucketingModule(_lstm_sym_gen, default_bucket_key=8, context=mx.cpu())
    with pytest.raises(amp.ParamError, match="not initialised"):
        amp.convert_bucketing_module(mod, "bfloat16")
    with pytest.raises(TypeError, match="BucketingModule"):
        amp.convert_bucketing_module(mx.mod.Module(_lstm_sym_gen(4)[0]), "bfloat16")


def test_bucketing_excluded_names_apply_in_the_buckets_that_have_them():
    """An unrolled net's last step exists in the long bucket only: excluding it there must
    not break the short bucket."""
    mod16 = amp.convert_bucketing_module(_bucketing_module(), "bfloat16",
                                         excluded_sym_names=["lstm_t7_i2h"])
    first = _bucket_batch(8)
    mod16.bind(first.provide_data, first.provide_label, for_training=False)
    long_graph = graph_of(mod16.symbol)
    assert "bfloat16" not in casts_into(long_graph, "lstm_t7_i2h")
    assert "bfloat16" in casts_into(long_graph, "lstm_t6_i2h")
    mod16.switch_bucket(5, _bucket_batch(5).provide_data, _bucket_batch(5).provide_label)
    assert "bfloat16" in casts_into(graph_of(mod16.symbol), "lstm_t4_i2h")
