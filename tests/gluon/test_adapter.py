"""The Gluon adapter: convert_hybrid_block / convert_block, export_block, emulate_block.

This CPU cannot run bfloat16 Convolution/FullyConnected, nor float16 at all, so converted
blocks run here through :func:`mxnet_amp.gluon.adapter.emulate_block` (the same converted graph
and params, every low precision tensor rounded to its dtype); running them natively is
tested where ``native_bf16`` says the CPU can.
"""
from __future__ import annotations

import functools
import json
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon
from mxnet.gluon import nn

from mxnet_amp.errors import AlreadyConvertedError, DeferredInitError, GraphError
from mxnet_amp.gluon.adapter import convert_block, convert_hybrid_block, emulate_block
from mxnet_amp.gluon.model import block_model, export_block
from mxnet_amp.ir.dtypes import dtype_name
from mxnet_amp.mx.io import graph_from_symbol, symbol_json
from mxnet_amp.mx.params import cast_array

from helpers import assert_dtype_tags

# every pass these tests run is checked by verify_graph

# bfloat16 keeps 8 significant bits: each rounding errs by <= 2**-9 relative, and over a
# 50-layer random-init net the measured relative L2 error of dense outputs is 0.5-1 %
BF16_REL_TOL = 0.05


# --------------------------------------------------------------------------- helpers

def _flat(out) -> list[np.ndarray]:
    if isinstance(out, (list, tuple)):
        return [a for o in out for a in _flat(o)]
    return [out.astype("float32").asnumpy()]


def _structure(out):
    """The nesting of a block's output, leaves replaced by their shapes."""
    if isinstance(out, (list, tuple)):
        return [_structure(o) for o in out]
    return tuple(out.shape)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def _snapshot(block) -> dict:
    """Name -> (dtype name, bytes) of every param: to check the block is left untouched."""
    return {p.name: (dtype_name(p.dtype), p.data().asnumpy().tobytes())
            for p in block.collect_params().values()}


def _num_casts(sym) -> int:
    return sum(n.op == "amp_cast" for n in graph_from_symbol(sym).nodes)


def _converted_symbol(block):
    return block._cached_graph[1]


def _assert_same_params(a, b):
    pa, pb = a.collect_params(), b.collect_params()
    assert sorted(pa.keys()) == sorted(pb.keys())
    for name in pa.keys():
        x, y = pa[name].data(), pb[name].data()
        assert dtype_name(x.dtype) == dtype_name(y.dtype), name
        assert x.asnumpy().tobytes() == y.asnumpy().tobytes(), name


def _export_import(block, tmp_path, input_names=("data",)):
    # each weight of the converted graph says its param's dtype (binding needs no type_dict)
    assert_dtype_tags(*block_model(block)[:3])
    sym_file, params_file = export_block(block, tmp_path / "net")
    loaded = gluon.SymbolBlock.imports(sym_file, list(input_names), params_file)
    return sym_file, params_file, loaded


# --------------------------------------------------------------------------- zoo models

def _gluoncv(name, **kwargs):
    def build():
        import gluoncv
        return gluoncv.model_zoo.get_model(name, pretrained=False, **kwargs)
    return build


def _vision(name):
    def build():
        from mxnet.gluon.model_zoo import vision
        return vision.get_model(name)
    return build


# name -> (builder, input shape, indices of dense outputs, family). Detection nets end in
# NMS: ids and boxes of near-tied candidates may swap, so only the (sorted) scores are
# compared; Xavier keeps their random box regressions from overflowing exp() in fp32.
ZOO = {
    "resnet50_v1": (_vision("resnet50_v1"), (1, 3, 64, 64), (0,), "classification"),
    "resnet18_v1b": (_gluoncv("resnet18_v1b"), (1, 3, 64, 64), (0,), "classification"),
    "mobilenetv3_small": (_gluoncv("mobilenetv3_small"), (1, 3, 64, 64), (0,), "classification"),
    "ssd_512_mobilenet1.0_voc": (_gluoncv("ssd_512_mobilenet1.0_voc", pretrained_base=False),
                                 (1, 3, 128, 128), (1,), "detection"),
    "yolo3_mobilenet1.0_voc": (_gluoncv("yolo3_mobilenet1.0_voc", pretrained_base=False),
                               (1, 3, 128, 128), (1,), "detection"),
    "fcn_resnet50_voc": (_gluoncv("fcn_resnet50_voc", pretrained_base=False, crop_size=64,
                                  base_size=64), (1, 3, 64, 64), (0, 1), "segmentation"),
    "simple_pose_resnet18_v1b": (_gluoncv("simple_pose_resnet18_v1b", pretrained_base=False),
                                 (1, 3, 64, 48), (0,), "pose"),
}


class _XavierMatrices(mx.init.Xavier):
    """Xavier for matrices; vectors (gluoncv's SSD makes BatchNorms with ``mx.sym`` whose
    params carry no initializer) get ones / zeros, as gluon's layers would give them."""

    def _init_weight(self, name, arr):
        if len(arr.shape) < 2:
            arr[:] = 1.0 if str(name).endswith(("gamma", "var")) else 0.0
        else:
            super()._init_weight(name, arr)


@functools.lru_cache(maxsize=None)
def zoo_model(name: str):
    """``(net, x, fp32 outputs)``: a random-init, not hybridized net run once on ``x``."""
    build, shape, _, family = ZOO[name]
    mx.random.seed(0)
    net = build()
    # Xavier keeps random box regressions of detection nets from overflowing exp() in fp32
    net.initialize(_XavierMatrices() if family == "detection" else "uniform")
    x = mx.nd.random.uniform(shape=shape)
    return net, x, _flat(net(x))


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_bfloat16_round_trip(name, tmp_path):
    net, x, ref = zoo_model(name)
    before = _snapshot(net)
    was_active, had_graph = net._active, bool(net._cached_graph)

    converted = convert_hybrid_block(net, target_dtype="bfloat16", fold_batchnorm=False)

    # the caller's block: same params, same state, same fp32 outputs
    assert _snapshot(net) == before
    assert (net._active, bool(net._cached_graph)) == (was_active, had_graph)
    after = _flat(net(x))
    assert all(np.array_equal(a, b) for a, b in zip(after, ref))

    # a SymbolBlock with the block's param names, holding copies, with casts in the graph
    assert isinstance(converted, gluon.SymbolBlock)
    sym = _converted_symbol(converted)
    used = set(sym.list_arguments()) | set(sym.list_auxiliary_states())
    assert set(converted.collect_params().keys()) == used - {"data"}
    assert used - {"data"} <= set(before)
    assert _num_casts(sym) > 0
    # copies of the block's weights: float32 ones equal, those stored in bfloat16 (the
    # default cast_optional_params=True) rounded once from them
    originals = {p.name: p.data() for p in net.collect_params().values()}
    stored = {pname: dtype_name(param.dtype) for pname, param in converted.collect_params().items()}
    assert "bfloat16" in stored.values()
    for pname, param in converted.collect_params().items():
        want = originals[pname]
        if stored[pname] != "float32":
            want = cast_array(want, stored[pname])
        assert param.data().asnumpy().tobytes() == want.asnumpy().tobytes()

    emulated = emulate_block(converted)
    out = emulated(x)
    got = _flat(out)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == np.float32
        assert np.isfinite(g).all()
    for k in ZOO[name][2]:
        g, r = got[k], ref[k]
        if ZOO[name][3] == "detection":
            g, r = np.sort(g, axis=None), np.sort(r, axis=None)
        assert _rel(g, r) < BF16_REL_TOL, (name, k, _rel(g, r))

    sym_file, _, loaded = _export_import(converted, tmp_path)
    with open(sym_file) as f:
        saved = json.load(f)
    assert sum(n["op"] == "amp_cast" for n in saved["nodes"]) == _num_casts(sym)
    assert symbol_json(_converted_symbol(loaded)) == symbol_json(sym)
    _assert_same_params(loaded, converted)
    again = _flat(emulate_block(loaded)(x))
    assert all(np.array_equal(a, b) for a, b in zip(again, got))


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_float16_type_checks_and_exports(name, tmp_path):
    net, x, _ = zoo_model(name)
    converted = convert_block(net, target_dtype="float16")
    sym = _converted_symbol(converted)
    # what binding does: the inputs in float32, each param in the dtype it is stored in
    # (a weight mx.sym made without a __dtype__, as in gluoncv's SSD expand layers, is not
    # decided by the graph alone once an amp_cast reads it)
    stored = {k: p.dtype for k, p in converted.collect_params().items()}
    args, outs, auxs = sym.infer_type(data="float32", **stored)
    inferred = dict(zip(sym.list_arguments() + sym.list_auxiliary_states(), args + auxs))
    assert all(np.dtype(inferred[k]) == np.dtype(v) for k, v in stored.items())
    assert all(np.dtype(t) == np.float32 for t in outs)  # outputs come back in fp32
    assert _num_casts(sym) > 0 and "float16" in {
        n.attrs.get("dtype") for n in graph_from_symbol(sym).nodes if n.op == "amp_cast"}
    _, _, loaded = _export_import(converted, tmp_path)
    assert symbol_json(_converted_symbol(loaded)) == symbol_json(sym)
    _assert_same_params(loaded, converted)


def test_cast_optional_params_stores_low_precision_weights_that_load_back(tmp_path):
    net, x, ref = zoo_model("resnet18_v1b")
    before = _snapshot(net)
    converted = convert_hybrid_block(net, target_dtype="bfloat16", cast_optional_params=True,
                                     fold_batchnorm=False)
    dtypes = {k: dtype_name(p.dtype) for k, p in converted.collect_params().items()}
    low = [k for k, d in dtypes.items() if d == "bfloat16"]
    assert low and any(k.endswith("conv0_weight") for k in low)
    # BatchNorm statistics stay float32
    assert all(dtypes[k] == "float32" for k in dtypes if k.endswith(("running_mean", "running_var")))
    for k in low:  # each is the original weight rounded to nearest even
        original = mx.nd.array(np.frombuffer(before[k][1], dtype=np.float32).reshape(
            converted.collect_params()[k].shape))
        expected = cast_array(original, "bfloat16")
        assert converted.collect_params()[k].data().asnumpy().tobytes() == expected.asnumpy().tobytes()
    assert _snapshot(net) == before
    _, params_file, loaded = _export_import(converted, tmp_path)
    assert {k: dtype_name(v.dtype) for k, v in mx.nd.load(params_file).items()} == {
        ("arg:" if k in _converted_symbol(converted).list_arguments() else "aux:") + k: d
        for k, d in dtypes.items()}
    _assert_same_params(loaded, converted)
    got = _flat(emulate_block(converted)(x))
    assert _rel(got[0], ref[0]) < BF16_REL_TOL
    assert np.array_equal(_flat(emulate_block(loaded)(x))[0], got[0])


def test_hybridized_block_and_symbol_block_convert_like_the_traced_block(tmp_path):
    """The three ways to get the graph (trace, cached graph, SymbolBlock) agree exactly."""
    net, x, ref = zoo_model("resnet18_v1b")
    traced = emulate_block(convert_hybrid_block(net, target_dtype="bfloat16"))(x)

    # a second instance (gluon gives it another name prefix) with the same weights
    hybrid = ZOO["resnet18_v1b"][0]()
    hybrid.initialize()
    for mine, theirs in zip(hybrid.collect_params().values(), net.collect_params().values()):
        mine.set_data(theirs.data())
    hybrid.hybridize()
    assert np.array_equal(hybrid(x).asnumpy(), ref[0])
    graph_before = hybrid._cached_graph
    from_cache = convert_hybrid_block(hybrid, target_dtype="bfloat16")
    assert hybrid._cached_graph is graph_before
    assert np.array_equal(emulate_block(from_cache)(x).asnumpy(), traced.asnumpy())

    hybrid.export(str(tmp_path / "fp32"))
    sb = gluon.SymbolBlock.imports(str(tmp_path / "fp32-symbol.json"), ["data"],
                                   str(tmp_path / "fp32-0000.params"))
    from_symbol_block = convert_block(sb, target_dtype="bfloat16")
    assert np.array_equal(emulate_block(from_symbol_block)(x).asnumpy(), traced.asnumpy())
    assert np.array_equal(sb(x).asnumpy(), ref[0])  # the SymbolBlock still runs in fp32


# --------------------------------------------------------------------------- multi input / output

class TwoInTwoOut(gluon.HybridBlock):
    """Two inputs; a dense output and a nested (softmax, sum) pair."""

    def __init__(self, nested: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.nested = nested
        with self.name_scope():
            self.fa = nn.Dense(16, in_units=8)
            self.fb = nn.Dense(16, in_units=4)
            self.head = nn.Dense(3, in_units=16)

    def hybrid_forward(self, F, a, b):
        h = F.relu(self.fa(a) + self.fb(b))
        probs = F.softmax(h)
        if self.nested:
            return self.head(h), (probs, F.sum(h, axis=1))
        return self.head(h), probs


def _two_inputs():
    rng = np.random.RandomState(1)
    return mx.nd.array(rng.randn(2, 8)), mx.nd.array(rng.randn(2, 4))


@pytest.mark.parametrize("nested", [False, True])
def test_two_inputs_two_outputs_traced(nested, tmp_path):
    mx.random.seed(0)
    net = TwoInTwoOut(nested=nested)
    net.initialize(mx.init.Xavier())
    a, b = _two_inputs()
    ref = net(a, b)
    converted = convert_hybrid_block(net, target_dtype="bfloat16", input_names=["a", "b"])
    assert [s.name for s in converted._cached_graph[0]] == ["a", "b"]
    fc_inputs = graph_from_symbol(_converted_symbol(converted))
    assert any(n.op == "amp_cast" and n.attrs["dtype"] == "bfloat16" for n in fc_inputs.nodes)
    out = emulate_block(converted)(a, b)
    assert _structure(out) == _structure(ref)
    for g, r in zip(_flat(out), _flat(ref)):
        assert _rel(g, r) < BF16_REL_TOL
    _, _, loaded = _export_import(converted, tmp_path, input_names=("a", "b"))
    again = emulate_block(loaded)(a, b)
    # the symbol file has no place for the nesting: SymbolBlock.imports gives a flat list
    assert [g.shape for g in _flat(again)] == [r.shape for r in _flat(ref)]
    assert all(np.array_equal(g, h) for g, h in zip(_flat(again), _flat(out)))


def test_two_inputs_hybridized_keep_or_rename_their_names():
    mx.random.seed(0)
    net = TwoInTwoOut(nested=True)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    a, b = _two_inputs()
    ref = net(a, b)
    default = convert_hybrid_block(net, target_dtype="bfloat16")
    assert [s.name for s in default._cached_graph[0]] == ["data0", "data1"]  # as export() names them
    renamed = convert_hybrid_block(net, target_dtype="bfloat16", input_names=["a", "b"])
    assert [s.name for s in renamed._cached_graph[0]] == ["a", "b"]
    assert "data0" not in _converted_symbol(renamed).list_arguments()
    out_default, out_renamed = emulate_block(default)(a, b), emulate_block(renamed)(a, b)
    assert _structure(out_default) == _structure(ref) == _structure(out_renamed)
    assert all(np.array_equal(g, h) for g, h in zip(_flat(out_default), _flat(out_renamed)))
    with pytest.raises(GraphError, match="takes 2 input"):
        convert_hybrid_block(net, target_dtype="bfloat16", input_names=["a"])
    with pytest.raises(GraphError, match="already names"):
        convert_hybrid_block(net, target_dtype="bfloat16", input_names=["a", net.fa.weight.name])


def test_hybridized_block_that_never_ran_is_traced_and_left_as_it_was():
    mx.random.seed(0)
    net = TwoInTwoOut()
    net.initialize()
    net.hybridize()
    converted = convert_hybrid_block(net, target_dtype="float16", input_names=["a", "b"])
    assert net._cached_graph == () and net._cached_op is None
    a, b = _two_inputs()
    out = emulate_block(converted)(a, b)
    ref = net(a, b)  # its first forward pass runs hybridized as usual
    assert net._cached_graph
    for g, r in zip(_flat(out), _flat(ref)):
        assert _rel(g, r) < 0.01


def test_tracing_with_too_few_input_names_says_what_to_do():
    net = TwoInTwoOut()
    net.initialize()
    with pytest.raises(GraphError, match="input_names"):
        convert_hybrid_block(net, target_dtype="bfloat16")


# --------------------------------------------------------------------------- errors and context

def test_deferred_initialisation_gets_a_clear_error():
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Dense(4))
    net.initialize()
    with pytest.raises(DeferredInitError, match="forward pass") as err:
        convert_hybrid_block(net, target_dtype="bfloat16")
    assert net[0].weight.name in str(err.value)
    net(mx.nd.ones((1, 3)))  # the block still works, and converts once shapes are known
    assert isinstance(convert_hybrid_block(net, target_dtype="bfloat16"), gluon.SymbolBlock)


def test_uninitialised_block_gets_a_clear_error():
    net = nn.Dense(4, in_units=3)
    with pytest.raises(DeferredInitError, match="initialize"):
        convert_hybrid_block(net, target_dtype="bfloat16")


def test_plain_block_is_rejected():
    class Plain(gluon.Block):
        def forward(self, x):
            return x
    with pytest.raises(TypeError, match="HybridBlock"):
        convert_hybrid_block(Plain())


def test_converting_a_converted_block_is_refused():
    net, _, _ = zoo_model("resnet18_v1b")
    converted = convert_hybrid_block(net, target_dtype="bfloat16", fold_batchnorm=False)
    with pytest.raises(AlreadyConvertedError):
        convert_hybrid_block(converted, target_dtype="bfloat16")


def test_params_go_where_the_block_lives_never_to_a_gpu():
    with mx.Context(mx.cpu(1)):  # not the default context, to see it is followed
        net = nn.Dense(4, in_units=3)
        net.initialize(ctx=mx.cpu(1))
    converted = convert_hybrid_block(net, target_dtype="bfloat16", fold_batchnorm=False)
    assert {c for p in converted.collect_params().values() for c in p.list_ctx()} == {mx.cpu(1)}
    explicit = convert_hybrid_block(net, target_dtype="bfloat16", ctx=mx.cpu(0))
    assert {c for p in explicit.collect_params().values() for c in p.list_ctx()} == {mx.cpu(0)}
    assert net.weight.list_ctx() == [mx.cpu(1)]


def test_converted_params_are_copies():
    net, _, _ = zoo_model("resnet18_v1b")
    before = _snapshot(net)
    converted = convert_hybrid_block(net, target_dtype="bfloat16", fold_batchnorm=False)
    for param in converted.collect_params().values():
        param.set_data(param.data() * 0 + 3)
    assert _snapshot(net) == before


def test_block_model_gives_the_graph_and_the_blocks_own_params():
    net, _, _ = zoo_model("resnet18_v1b")
    sym, args, auxs, names = block_model(net)
    assert names == ["data"]
    assert set(args) == set(sym.list_arguments()) - {"data"}
    assert set(auxs) == set(sym.list_auxiliary_states())
    params = net.collect_params()
    assert all(args[k] is params[k].data() for k in args)


# --------------------------------------------------------------------------- export

def test_export_keeps_casts_as_mxnet_export_with_remove_amp_cast_false(tmp_path):
    """1.9.1's export() drops casts unless told not to; the converted block's own export()
    and export_block write what MXNet's export(remove_amp_cast=False) writes."""
    net, x, _ = zoo_model("resnet18_v1b")
    converted = convert_hybrid_block(net, target_dtype="bfloat16", fold_batchnorm=False)
    sym_file, params_file = export_block(converted, tmp_path / "ours")
    # no forward pass before export: the params are there anyway
    mx.gluon.SymbolBlock.export(converted, str(tmp_path / "theirs"), remove_amp_cast=False)
    with open(sym_file) as f, open(tmp_path / "theirs-symbol.json") as g:
        assert json.load(f) == json.load(g)
    ours, theirs = mx.nd.load(params_file), mx.nd.load(str(tmp_path / "theirs-0000.params"))
    assert sorted(ours) == sorted(theirs)
    assert all(ours[k].asnumpy().tobytes() == theirs[k].asnumpy().tobytes() for k in ours)
    converted.export(str(tmp_path / "own"))
    with open(sym_file) as f, open(tmp_path / "own-symbol.json") as g:
        assert json.load(f) == json.load(g)
    converted.export(str(tmp_path / "stripped"), remove_amp_cast=True)
    stripped = mx.sym.load(str(tmp_path / "stripped-symbol.json"))
    assert _num_casts(stripped) < _num_casts(_converted_symbol(converted))


def test_export_block_is_atomic(tmp_path, monkeypatch):
    net = nn.Dense(4, in_units=3)
    net.initialize()
    converted = convert_hybrid_block(net, target_dtype="bfloat16", fold_batchnorm=False)
    sym_file, params_file = export_block(converted, tmp_path / "net", epoch=3)
    assert os.path.basename(params_file) == "net-0003.params"
    with open(sym_file, "rb") as f:
        old_sym = f.read()
    with open(params_file, "rb") as f:
        old_params = f.read()

    def broken_save(path, data):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError("disk full")
    monkeypatch.setattr(mx.nd, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        export_block(converted, tmp_path / "net", epoch=3)
    with open(sym_file, "rb") as f:
        assert f.read() == old_sym
    with open(params_file, "rb") as f:
        assert f.read() == old_params
    assert sorted(os.listdir(tmp_path)) == ["net-0003.params", "net-symbol.json"]


# --------------------------------------------------------------------------- native bf16

def test_native_bfloat16_forward_matches_emulation(native_bf16):
    if not native_bf16:
        pytest.skip("this CPU's oneDNN cannot run bfloat16 Convolution/FullyConnected "
                    "(needs avx512); emulation covers the numerics here")
    net, x, ref = zoo_model("resnet18_v1b")
    converted = convert_hybrid_block(net, target_dtype="bfloat16", fold_batchnorm=False)
    native = converted(x).asnumpy()
    assert native.dtype == np.float32 and np.isfinite(native).all()
    assert _rel(native, ref[0]) < BF16_REL_TOL
    assert _rel(native, emulate_block(converted)(x).asnumpy()) < BF16_REL_TOL


def test_native_bfloat16_grouped_conv_with_weights_stored_in_bfloat16(native_bf16):
    """A net that has run holds its weights in oneDNN's blocked layout; cast to bf16 as they
    are, MXNet 1.9.1's grouped convolution fails on them natively ("could not create a
    primitive descriptor for a reorder primitive"). cast_array reads a plain copy."""
    if not native_bf16:
        pytest.skip("this CPU's oneDNN cannot run bfloat16 Convolution (needs avx512)")
    net = nn.HybridSequential()
    net.add(nn.Conv2D(8, 3, padding=1, in_channels=3), nn.BatchNorm(), nn.Activation("relu"),
            nn.Conv2D(8, 3, padding=1, groups=8, in_channels=8), nn.GlobalAvgPool2D(), nn.Dense(4))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    x = mx.nd.random.uniform(-1, 1, shape=(2, 3, 16, 16))
    ref = net(x).asnumpy()  # oneDNN now holds the conv weights reordered
    converted = convert_hybrid_block(net, target_dtype="bfloat16", cast_optional_params=True,
                                     fold_batchnorm=False)
    assert any(dtype_name(p.data().dtype) == "bfloat16" for p in converted.collect_params().values())
    out = converted(x)
    out = (out.astype("float32") if np.dtype(out.dtype).names else out).asnumpy()
    assert np.isfinite(out).all() and _rel(out, ref) < BF16_REL_TOL
