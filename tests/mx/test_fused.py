"""A bf16 checkpoint saved already fused for the CPU (``fused_for='cpu'``, ``--fuse-cpu``):
the graph holds oneDNN's ``_sg_mkldnn_*`` nodes and the amp casts, reads the same params, and
every loader (``Module``, ``simple_bind``, ``SymbolBlock.imports`` + a plain ``hybridize()``,
the C predict API) computes what MXNet's bind-time fusion of the unfused checkpoint computes.
float16 is refused: MXNet runs it only on a GPU, where the fused nodes have no kernel."""
from __future__ import annotations

import json
import os
import warnings

import mxnet as mx
import numpy as np
import pytest

import mxnet_amp as amp
from mxnet_amp.cli.main import main as cli_main
from mxnet_amp.errors import FusionError
from mxnet_amp.mx.fused import SlowLoadWarning, fuse_for_cpu, generic_kernel_ops
from mxnet_amp.mx.hardware import bf16_runs_natively
from mxnet_amp.mx.io import graph_from_symbol

from upstream.c_predictor import Predictor

SHAPE = (2, 3, 16, 16)


def _fp32_checkpoint(prefix: str) -> None:
    """conv-BN-relu, a residual conv-BN + add (oneDNN's sum fusion), relu6 (clip), pool, FC."""
    data = mx.sym.var("data")
    x = mx.sym.Convolution(data, num_filter=16, kernel=(3, 3), pad=(1, 1), name="conv0")
    x = mx.sym.BatchNorm(x, fix_gamma=False, name="bn0")
    x = mx.sym.Activation(x, act_type="relu", name="relu0")
    y = mx.sym.Convolution(x, num_filter=16, kernel=(3, 3), pad=(1, 1), name="conv1")
    y = mx.sym.BatchNorm(y, fix_gamma=False, name="bn1")
    x = mx.sym.clip(y + x, 0, 6, name="relu6")
    x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="avg", name="pool0")
    sym = mx.sym.FullyConnected(mx.sym.flatten(x), num_hidden=10, name="fc0")
    shapes, _, aux_shapes = sym.infer_shape(data=SHAPE)
    rng = np.random.RandomState(0)
    args = {n: mx.nd.array(rng.randn(*s) * 0.3) for n, s in zip(sym.list_arguments(), shapes)
            if n != "data"}
    auxs = {n: mx.nd.array(rng.rand(*s) + 0.5 if n.endswith("var") else rng.randn(*s) * 0.1)
            for n, s in zip(sym.list_auxiliary_states(), aux_shapes)}
    mx.model.save_checkpoint(prefix, 0, sym, args, auxs)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """``{'fp32', 'plain', 'fused'}`` -> checkpoint prefix: the float32 model, its bf16
    conversion saved unfused, and the same conversion saved with ``fused_for='cpu'``."""
    root = tmp_path_factory.mktemp("fused")
    prefixes = {k: str(root / k) for k in ("fp32", "plain", "fused")}
    _fp32_checkpoint(prefixes["fp32"])
    sym, args, auxs = mx.model.load_checkpoint(prefixes["fp32"], 0)
    s16, a16, x16 = amp.convert_model(sym, args, auxs, target_dtype="bfloat16")
    amp.save_checkpoint(prefixes["plain"], 0, s16, a16, x16)
    amp.save_checkpoint(prefixes["fused"], 0, s16, a16, x16, fused_for="cpu")
    return prefixes


def _nodes(prefix: str) -> list[dict]:
    with open(prefix + "-symbol.json") as f:
        return json.load(f)["nodes"]


def _ops(prefix: str) -> list[str]:
    return [n["op"] for n in _nodes(prefix)]


def test_the_fused_checkpoint_fuses_where_a_generic_bf16_kernel_would_run(saved):
    """conv1 + BN + add + relu6 (clip: no oneDNN kernel outside a fused node) stays fused;
    conv0 + relu (oneDNN kernels either way) and the FC are written back unfused: a plain
    hybridize() re-creates a fused node's state at every call."""
    plain, fused = _ops(saved["plain"]), _ops(saved["fused"])
    assert "_sg_mkldnn_conv" not in plain
    assert fused.count("_sg_mkldnn_conv") == 1 and "clip" not in fused
    assert fused.count("Convolution") == 1 and "FullyConnected" in fused
    assert "_sg_mkldnn_fully_connected" not in fused
    # the conversion's casts are kept (MXNet's own tojson() would drop them)
    assert fused.count("amp_cast") == plain.count("amp_cast") > 0
    s_plain, a_plain, x_plain = amp.load_checkpoint(saved["plain"], 0)
    s_fused, a_fused, x_fused = amp.load_checkpoint(saved["fused"], 0)
    assert s_fused.list_arguments() == s_plain.list_arguments()
    assert s_fused.list_auxiliary_states() == s_plain.list_auxiliary_states()
    for name, value in {**a_plain, **x_plain}.items():
        got = {**a_fused, **x_fused}[name]
        assert got.dtype == value.dtype, name
        np.testing.assert_array_equal(got.astype("float32").asnumpy(),
                                      value.astype("float32").asnumpy())


def _module_out(prefix: str, x: np.ndarray) -> np.ndarray:
    sym, args, auxs = amp.load_checkpoint(prefix, 0)
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind([("data", x.shape)], for_training=False)
    mod.set_params(args, auxs)
    mod.forward(mx.io.DataBatch([mx.nd.array(x)]), is_train=False)
    return mod.get_outputs()[0].asnumpy()


def _simple_bind_out(prefix: str, x: np.ndarray) -> np.ndarray:
    sym, args, auxs = amp.load_checkpoint(prefix, 0)
    exe = sym.simple_bind(mx.cpu(), grad_req="null", data=x.shape)
    for name, value in {**args, **auxs}.items():
        value.copyto(exe.arg_dict.get(name, exe.aux_dict.get(name)))
    return exe.forward(is_train=False, data=mx.nd.array(x))[0].asnumpy()


def _imports_out(prefix: str, x: np.ndarray, **hybridize) -> np.ndarray:
    block = mx.gluon.SymbolBlock.imports(prefix + "-symbol.json", ["data"], prefix + "-0000.params")
    block.hybridize(**hybridize)
    return block(mx.nd.array(x)).asnumpy()


def _predictor_out(prefix: str, x: np.ndarray) -> np.ndarray:
    with open(prefix + "-symbol.json") as f, open(prefix + "-0000.params", "rb") as g:
        predictor = Predictor(f.read(), g.read(), {"data": x.shape})
    predictor.forward(data=x)
    return predictor.get_output(0)


@pytest.mark.skipif(not bf16_runs_natively(), reason="bf16 does not run natively on this CPU")
def test_every_loader_of_the_fused_checkpoint_computes_what_bind_time_fusion_computes(saved):
    """The reference is the unfused checkpoint in Module, which MXNet fuses at bind: the fused
    file gives the same numbers on every loader (so Module's partitioning of an already
    partitioned graph changes nothing, and a plain hybridize() runs the fused kernels), and
    it is within bf16 rounding of float32."""
    x = np.random.RandomState(1).uniform(-1, 1, SHAPE).astype("float32")
    ref = _module_out(saved["plain"], x)
    fp32 = _module_out(saved["fp32"], x)
    outs = {"module": _module_out(saved["fused"], x),
            "simple_bind": _simple_bind_out(saved["fused"], x),
            "imports": _imports_out(saved["fused"], x),
            "imports_static": _imports_out(saved["fused"], x, static_alloc=True, static_shape=True),
            "imports_mkldnn": _imports_out(saved["fused"], x, backend="MKLDNN"),
            "c_predict": _predictor_out(saved["fused"], x)}
    scale = np.abs(fp32).max()
    for path, out in outs.items():
        if path in ("imports", "imports_static"):
            # conv0+relu runs unfused there: bf16 rounding at one more place
            assert np.abs(out - ref).max() / scale < 0.03, path
        else:   # fused at bind (again): what bind-time fusion of the unfused file computes
            np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6, err_msg=path)
    assert np.abs(ref - fp32).max() / scale < 0.03
    unfused = _imports_out(saved["plain"], x)
    assert np.abs(unfused - ref).max() / scale < 0.03


def test_a_converted_blocks_export_and_the_cli_write_fused_checkpoints(saved, tmp_path):
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(8, 3, in_channels=3), mx.gluon.nn.Activation("relu"),
            mx.gluon.nn.Dense(4))
    net.initialize()
    net(mx.nd.zeros(SHAPE))
    block = amp.convert_hybrid_block(net, target_dtype="bfloat16")
    sym_file, _ = block.export(str(tmp_path / "blk"), fused_for="cpu")
    # conv + relu: oneDNN kernels unfused too, written back unfused; the file loads
    assert "_sg_mkldnn_conv" not in _ops(str(tmp_path / "blk"))
    assert mx.gluon.SymbolBlock.imports(sym_file, ["data"], sym_file.replace("-symbol.json", "-0000.params"))
    out = str(tmp_path / "cli")
    assert cli_main(["convert", saved["fp32"], "--target-dtype", "bfloat16", "--out", out,
                     "--fuse-cpu", "-q"]) == 0
    assert _ops(out).count("_sg_mkldnn_conv") == 1 and "amp_cast" in _ops(out)


def test_float16_and_unknown_targets_are_refused_before_anything_is_written(saved, tmp_path, capsys):
    sym, args, auxs = mx.model.load_checkpoint(saved["fp32"], 0)
    s16, a16, x16 = amp.convert_model(sym, args, auxs, target_dtype="float16")
    prefix = str(tmp_path / "half")
    with pytest.raises(FusionError, match="float16.*GPU"):
        amp.save_checkpoint(prefix, 0, s16, a16, x16, fused_for="cpu")
    with pytest.raises(FusionError, match="'gpu'"):
        amp.save_checkpoint(prefix, 0, sym, args, auxs, fused_for="gpu")
    with pytest.raises(FusionError, match="float16"):
        amp.convert_checkpoint(saved["fp32"], 0, prefix, target_dtype="float16", fused_for="cpu")
    assert cli_main(["convert", saved["fp32"], "--target-dtype", "float16", "--out", prefix,
                     "--fuse-cpu", "-q"]) != 0
    assert "--fuse-cpu" in capsys.readouterr().err
    assert not os.listdir(tmp_path)



def _bf16_model(folder: str):
    """The conv-BN-relu / residual / relu6 model of :func:`_fp32_checkpoint`, in bfloat16."""
    _fp32_checkpoint(os.path.join(folder, "fp32"))
    sym, args, auxs = amp.load_checkpoint(os.path.join(folder, "fp32"), 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # where bf16 does not run here, the conversion says so
        return amp.convert_model(sym, args, auxs, target_dtype="bfloat16")


def _generic(sym) -> dict:
    graph = graph_from_symbol(sym)
    return generic_kernel_ops(graph, lambda: graph_from_symbol(fuse_for_cpu(sym, graph)))


def _slow_load_notes(caught) -> list:
    return [w for w in caught if issubclass(w.category, SlowLoadWarning)]


def test_an_unfused_bf16_save_with_relu6_says_how_to_load_it_fast(tmp_path):
    """relu6 (clip) after the residual add runs MXNet's generic bf16 kernel unless fused:
    save_checkpoint and export name it and both fast loads, at the caller's line, after
    the files are written."""
    sym, args, auxs = _bf16_model(str(tmp_path))
    assert _generic(sym) == {"clip": 1}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        amp.save_checkpoint(str(tmp_path / "bf16"), 0, sym, args, auxs)
    [note] = _slow_load_notes(caught)
    text = str(note.message)
    assert note.filename == __file__ and "clip (1 node)" in text
    assert "hybridize(backend='MKLDNN'" in text and "fused_for='cpu'" in text
    assert os.path.isfile(tmp_path / "bf16-0000.params")


def test_a_fused_save_a_float32_model_and_one_without_generic_ops_say_nothing(tmp_path):
    sym, args, auxs = _bf16_model(str(tmp_path))
    fp32 = amp.load_checkpoint(str(tmp_path / "fp32"), 0)
    plain = mx.sym.Convolution(mx.sym.var("data"), num_filter=4, kernel=(3, 3), name="c")
    plain = mx.sym.Activation(plain, act_type="relu", name="r")   # oneDNN's own bf16 kernels
    plain16 = amp.convert_symbol(plain, target_dtype="bfloat16")
    assert _generic(plain16) == {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        amp.save_checkpoint(str(tmp_path / "fused"), 0, sym, args, auxs, fused_for="cpu")
        amp.save_checkpoint(str(tmp_path / "fp32b"), 0, *fp32)
    assert _slow_load_notes(caught) == []
    assert _generic(fp32[0]) == {}   # float32: no note


def test_export_of_a_converted_block_with_relu6_says_it_too(tmp_path):
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(8, 3, in_channels=3), mx.gluon.nn.HybridLambda(
        lambda F, x: F.clip(x, 0, 6)))
    net.initialize()
    net.hybridize()
    net(mx.nd.ones((1, 3, 8, 8)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        new = amp.convert_block(net, target_dtype="bfloat16")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        new.export(str(tmp_path / "net"))
    [note] = _slow_load_notes(caught)
    assert note.filename == __file__ and "clip" in str(note.message)
