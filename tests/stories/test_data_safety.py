"""Never lose a user's file, and say exactly what is wrong with bad input.

Every refusal here is checked four ways: the exit code or exception type, a message naming
the file / param / flag at fault, the input files byte-identical afterwards, and no output,
partial or temporary file left in the folder.
"""
from __future__ import annotations

import hashlib
import json
import os

import mxnet as mx
import numpy as np
import pytest

import mxnet_amp as amp
from mxnet_amp.checkpoint import convert_checkpoint
from mxnet_amp.cli.main import main
from mxnet_amp.errors import (AMPError, CheckpointError, GraphError, InputShapeError,
                              OutputPathError, OverwriteError, ParamError, error_text)
from mxnet_amp.gluon.model import block_model
from mxnet_amp.mx.io import load_checkpoint, save_checkpoint
from mxnet_amp.shape_check.check import check_param_shapes

from helpers import saved_small_model, small_model

# API argument names a command line message must not show (it has flags for them)
_API_NAMES = ("out_prefix", "out_epoch", "data_names", "excluded_sym_names", "data_shapes",
              "sample_inputs", "max_executions", "target_dtype_ops")


def _hashes(folder) -> dict:
    """Every file in ``folder`` (links as what they point to) with its content's hash."""
    out = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.islink(path):
            out[name] = "-> " + os.readlink(path)
        elif os.path.isfile(path):
            with open(path, "rb") as f:
                out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.fixture()
def ckpt(tmp_path):
    """small_model saved as ``tmp/m`` epoch 0 (the only files in tmp)."""
    return saved_small_model(tmp_path, "m")


def cli(capsys, argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, folder, argv, *fragments):
    """Run the command line; assert exit 2, one error line holding ``fragments`` and in
    CLI terms, and the folder exactly as before. Returns the error line."""
    before = _hashes(folder)
    code, _, err = cli(capsys, argv)
    lines = [line for line in err.strip().splitlines() if "warning" not in line]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("mxnet-amp: error: "), err
    for fragment in fragments:
        assert str(fragment) in lines[0], (fragment, lines[0])
    assert "Traceback" not in err
    assert not any(name in lines[0] for name in _API_NAMES), lines[0]
    assert _hashes(folder) == before   # inputs untouched, nothing new, no temporary file
    return lines[0]


# ----------------------------------------------------------------------------- outputs vs inputs

@pytest.mark.parametrize("extra, clash", [
    (["--out", "{m}", "--out-epoch", "1"], "{m}-symbol.json"),           # symbol has no epoch
    (["--out", "{m}"], "{m}-symbol.json"),
    (["--out", "{tmp}/sub/../m", "--out-epoch", "7"], "{m}-symbol.json"),  # same file, other spelling
    (["--out", "{tmp}/o", "--report", "{m}-symbol.json"], "{m}-symbol.json"),
    (["--out", "{tmp}/o", "--html", "{m}-0000.params"], "{m}-0000.params"),
    (["--out", "{tmp}/o", "--report", "{tmp}/o-0000.params"], "{tmp}/o-0000.params"),
    (["--out", "{tmp}/o", "--report", "{tmp}/r.json", "--html", "{tmp}/r.json"], "{tmp}/r.json"),
])
def test_cli_convert_refuses_to_overwrite_what_it_reads(ckpt, tmp_path, capsys, extra, clash):
    os.mkdir(tmp_path / "sub")
    fmt = dict(m=ckpt, tmp=tmp_path)
    argv = ["convert", ckpt, "--target-dtype", "float16", "-q"] + [a.format(**fmt) for a in extra]
    line = refused(capsys, tmp_path, argv, clash.format(**fmt))
    assert "same file" in line or "refusing to overwrite an input" in line


def test_cli_inspect_report_onto_an_input_is_refused(ckpt, tmp_path, capsys):
    refused(capsys, tmp_path, ["inspect", ckpt, "--report", ckpt + "-0000.params"],
            "--report file", ckpt + "-0000.params", "input params file")


def test_cli_auto_output_onto_its_sample_input_is_refused(ckpt, tmp_path, capsys):
    x = str(tmp_path / "x.npy")
    np.save(x, np.ones((2, 3, 8, 8), np.float32))
    refused(capsys, tmp_path, ["auto", ckpt, "--input", f"data:{x}", "--report", x, "-q"],
            "--report file", "--input file", x)


def test_input_symlinked_to_the_output_is_refused(tmp_path, capsys):
    """``m-*`` are links to the files ``real-*``: writing ``real`` would destroy ``m``."""
    sym, args, auxs = small_model()
    save_checkpoint(str(tmp_path / "real"), 0, sym, args, auxs)
    for suffix in ("-symbol.json", "-0000.params"):
        os.symlink(tmp_path / ("real" + suffix), tmp_path / ("m" + suffix))
    m, real = str(tmp_path / "m"), str(tmp_path / "real")
    before = _hashes(tmp_path)
    with pytest.raises(OverwriteError) as info:
        convert_checkpoint(m, 0, real, target_dtype="bfloat16")
    assert real + "-symbol.json" in str(info.value) and m + "-symbol.json" in str(info.value)
    assert _hashes(tmp_path) == before
    refused(capsys, tmp_path, ["convert", m, "--target-dtype", "bfloat16", "--out", real],
            real + "-symbol.json", m + "-symbol.json", os.path.realpath(real + "-symbol.json"))


def test_graph_picture_through_a_link_onto_an_input_is_refused(ckpt, tmp_path, capsys):
    os.symlink(ckpt + "-0000.params", tmp_path / "g.svg")
    refused(capsys, tmp_path, ["inspect", ckpt, "--graph", tmp_path / "g.svg"],
            "--graph file", "input params file", ckpt + "-0000.params")


def test_output_folder_linked_to_the_input_folder_is_refused(ckpt, tmp_path):
    os.symlink(tmp_path, tmp_path / "alias")
    before = _hashes(tmp_path)
    with pytest.raises(OverwriteError, match="alias/m-symbol.json"):
        convert_checkpoint(ckpt, 0, str(tmp_path / "alias" / "m"), out_epoch=2, target_dtype="float16")
    assert _hashes(tmp_path) == before


def test_hard_linked_input_is_refused(ckpt, tmp_path):
    os.mkdir(tmp_path / "other")
    for suffix in ("-symbol.json", "-0000.params"):
        os.link(ckpt + suffix, tmp_path / "other" / ("m" + suffix))
    with pytest.raises(OverwriteError):
        convert_checkpoint(ckpt, 0, str(tmp_path / "other" / "m"), target_dtype="float16")


@pytest.mark.parametrize("out_epoch", [None, 0, 1, 5])
def test_api_refuses_every_epoch_onto_the_input_prefix(ckpt, tmp_path, out_epoch):
    before = _hashes(tmp_path)
    with pytest.raises(OverwriteError) as info:
        convert_checkpoint(ckpt, 0, ckpt, out_epoch=out_epoch, target_dtype="float16")
    assert isinstance(info.value, CheckpointError) and isinstance(info.value, AMPError)
    assert str(info.value).count(ckpt + "-symbol.json") == 2   # the output and the input
    assert _hashes(tmp_path) == before
    # the original is still an fp32 checkpoint that converts
    convert_checkpoint(ckpt, 0, ckpt + "-ok", target_dtype="float16")


def test_api_output_folder_missing_writes_nothing(ckpt, tmp_path):
    before = _hashes(tmp_path)
    with pytest.raises(OutputPathError, match="does not exist"):
        convert_checkpoint(ckpt, 0, str(tmp_path / "nope" / "m"), target_dtype="float16")
    assert _hashes(tmp_path) == before


# ----------------------------------------------------------------------------- unwritable outputs

def test_report_in_an_unwritable_folder_is_refused_before_the_checkpoint(ckpt, tmp_path, capsys,
                                                                         monkeypatch):
    """The folder is made read-only for the process (as root, chmod would not stop a write,
    so the permission check is what is denied here)."""
    locked = tmp_path / "locked"
    os.mkdir(locked)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: (os.path.abspath(p) != str(locked)
                                                      and real_access(p, mode)))
    refused(capsys, tmp_path, ["convert", ckpt, "--target-dtype", "float16", "--out",
                               tmp_path / "o", "--report", locked / "r.json"],
            f"folder {locked} is not writable", "--report file")
    assert os.listdir(locked) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_report_in_a_read_only_folder_is_refused(ckpt, tmp_path, capsys):
    locked = tmp_path / "locked"
    os.mkdir(locked)
    os.chmod(locked, 0o500)
    try:
        refused(capsys, tmp_path, ["convert", ckpt, "--target-dtype", "float16", "--out",
                                   tmp_path / "o", "--report", locked / "r.json"], "not writable")
    finally:
        os.chmod(locked, 0o700)


@pytest.mark.parametrize("flag", ["--report", "--html", "--graph"])
def test_output_under_a_file_or_onto_a_folder_is_refused(ckpt, tmp_path, capsys, flag):
    name = "r.svg" if flag == "--graph" else "r.json"
    refused(capsys, tmp_path, ["convert", ckpt, "--target-dtype", "float16", "--out",
                               tmp_path / "o", flag, ckpt + "-symbol.json/" + name],
            "does not exist", flag)
    os.mkdir(tmp_path / name)
    refused(capsys, tmp_path, ["convert", ckpt, "--target-dtype", "float16", "--out",
                               tmp_path / "o", flag, tmp_path / name], "it is a folder")


# ----------------------------------------------------------------------------- param shapes

def _conv_bn_fc():
    data = mx.sym.var("data")
    c = mx.sym.Convolution(data, num_filter=8, kernel=(3, 3), name="c1")
    b = mx.sym.BatchNorm(c, name="bn")
    f = mx.sym.FullyConnected(mx.sym.Activation(b, act_type="relu"), num_hidden=4, name="fc")
    out = mx.sym.FullyConnected(f, num_hidden=2, name="fc2")
    shapes = {"c1_weight": (8, 3, 3, 3), "c1_bias": (8,), "bn_gamma": (8,), "bn_beta": (8,),
              "fc_weight": (4, 8 * 6 * 6), "fc_bias": (4,), "fc2_weight": (2, 4), "fc2_bias": (2,),
              "bn_moving_mean": (8,), "bn_moving_var": (8,)}
    return out, shapes


def _params(sym, shapes, seed=0):
    rng = np.random.default_rng(seed)
    aux_names = set(sym.list_auxiliary_states())
    arrays = {k: mx.nd.array(np.abs(rng.standard_normal(s)).astype("float32") + 0.1)
              for k, s in shapes.items()}
    return ({k: v for k, v in arrays.items() if k not in aux_names},
            {k: v for k, v in arrays.items() if k in aux_names})


# caught from the params alone: no data shape needed
_BAD_SHAPES = [
    ("c1_weight", (9, 3, 3, 3), "(8, 3, 3, 3)"),    # conv with one output channel too many
    ("bn_gamma", (9,), "(8,)"),
    ("bn_moving_var", (7,), "(8,)"),
    ("c1_bias", (9,), "(8,)"),
    ("fc2_weight", (2, 5), "(2, 4)"),               # FullyConnected in_units
    ("fc_bias", (3,), "(4,)"),
]


@pytest.mark.parametrize("name, bad, want", _BAD_SHAPES)
def test_convert_model_names_a_wrong_shaped_param(name, bad, want):
    sym, shapes = _conv_bn_fc()
    shapes[name] = bad
    args, auxs = _params(sym, shapes)
    with pytest.raises(ParamError) as info:
        amp.convert_model(sym, args, auxs, target_dtype="bfloat16")
    msg = str(info.value)
    assert repr(name) in msg and str(bad) in msg and want in msg, msg
    assert info.value.param == name and info.value.found == bad


def test_conv_with_more_output_channels_than_its_bn_reads():
    """The conv's weight and num_filter agree (9), the BatchNorm after it was saved for 8."""
    data = mx.sym.var("data")
    c = mx.sym.Convolution(data, num_filter=9, kernel=(1, 1), no_bias=True, name="c")
    sym = mx.sym.FullyConnected(mx.sym.BatchNorm(c, name="bn"), num_hidden=2, name="fc")
    shapes = {"c_weight": (9, 3, 1, 1), "bn_gamma": (8,), "bn_beta": (8,), "bn_moving_mean": (8,),
              "bn_moving_var": (8,), "fc_weight": (2, 9 * 25), "fc_bias": (2,)}
    args, auxs = _params(sym, shapes)
    with pytest.raises(ParamError, match=r"'bn_gamma' has shape \(8,\) but the symbol expects \(9,\)"):
        amp.convert_model(sym, args, auxs, target_dtype="float16")


def test_fc_in_units_after_convs_need_the_data_shape():
    """After convolutions the FullyConnected in_units depend on the image size: only a
    data shape can tell, and with one the error names both the param and data_shapes."""
    sym, shapes = _conv_bn_fc()
    shapes["fc_weight"] = (4, 100)
    args, auxs = _params(sym, shapes)
    amp.convert_model(sym, args, auxs, target_dtype="float16")   # cannot be told: converts
    with pytest.raises(ParamError) as info:
        amp.convert_model(sym, args, auxs, target_dtype="float16", data_shapes={"data": (1, 3, 8, 8)})
    msg = str(info.value)
    assert "'fc_weight'" in msg and "(4, 100)" in msg and "(4, 288)" in msg and "data_shapes" in msg


def test_data_shape_the_symbol_cannot_take_is_an_input_shape_error():
    sym, shapes = _conv_bn_fc()
    args, auxs = _params(sym, shapes)
    with pytest.raises(InputShapeError, match=r"'data' of shape \(1, 3, 8\)"):
        amp.convert_model(sym, args, auxs, target_dtype="float16", data_shapes={"data": (1, 3, 8)})


def test_right_shapes_pass_with_and_without_data_shapes():
    sym, shapes = _conv_bn_fc()
    args, auxs = _params(sym, shapes)
    for data_shapes in (None, {"data": (2, 3, 8, 8)}):
        csym, cargs, _ = amp.convert_model(sym, args, auxs, target_dtype="bfloat16",
                                           data_shapes=data_shapes, fold_batchnorm=False)
        assert sorted(cargs) == sorted(args)


def _size_pinned():
    """A conv net that only takes an 8-wide input: a gate (FullyConnected over the last
    axis, flatten=False) multiplied back onto the map, then a pooling, a 1x1 conv and a
    flattening classifier."""
    data = mx.sym.var("data")
    c = mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), pad=(1, 1), name="c1")
    gate = mx.sym.softmax(mx.sym.FullyConnected(c, num_hidden=8, flatten=False, name="gate"), axis=-1)
    h = mx.sym.Pooling(c * gate, kernel=(3, 3), pad=(1, 1), pool_type="max", name="pool")
    out = mx.sym.FullyConnected(mx.sym.Convolution(h, num_filter=6, kernel=(1, 1), name="c2"),
                                num_hidden=2, name="fc")
    shapes = {"c1_weight": (4, 3, 3, 3), "c1_bias": (4,), "gate_weight": (8, 8), "gate_bias": (8,),
              "c2_weight": (6, 4, 1, 1), "c2_bias": (6,), "fc_weight": (2, 6 * 8 * 8), "fc_bias": (2,)}
    return out, shapes


def test_size_pinned_by_a_layer_checked_at_that_size(monkeypatch):
    """The typical 224 contradicts the gate; MXNet's message names 8, the params are checked
    at 8 on the symbol as it is (no graph rebuilt), and a wrong weight is still named."""
    sym, shapes = _size_pinned()
    args, auxs = _params(sym, shapes)
    built = []
    real_load_json = mx.sym.load_json
    monkeypatch.setattr(mx.sym, "load_json", lambda text: built.append(1) or real_load_json(text))
    check_param_shapes(sym, args, auxs)
    assert built == []
    monkeypatch.undo()
    for name, bad, want in (("c2_weight", (6, 5, 1, 1), "(6, 4, 1, 1)"), ("gate_bias", (9,), "(8,)")):
        wrong = dict(shapes, **{name: bad})
        args, auxs = _params(sym, wrong)
        with pytest.raises(ParamError) as info:
            check_param_shapes(sym, args, auxs)
        msg = str(info.value)
        assert repr(name) in msg and str(bad) in msg and want in msg, msg


def test_zoo_models_with_right_shapes_pass_and_a_bad_weight_is_named():
    """Partial shapes the readers prove carry the check through pooling, concatenation
    and a flattening classifier of real networks, with no false alarm."""
    from mxnet.gluon.model_zoo import vision
    for name in ("resnet18_v1", "densenet121", "squeezenet1.0"):
        net = vision.get_model(name, pretrained=False)
        net.initialize()
        net(mx.nd.zeros((1, 3, 224, 224)))
        sym, args, auxs, _ = block_model(net)
        check_param_shapes(sym, args, auxs)
        check_param_shapes(sym, args, auxs, {"data": (1, 3, 224, 224)})
        # the last convolution: its input channels come through the whole network
        deep = [k for k in sym.list_arguments() if k in args and len(args[k].shape) == 4][-1]
        shape = args[deep].shape
        bad = dict(args)
        bad[deep] = mx.nd.ones((shape[0], shape[1] + 1) + shape[2:])
        with pytest.raises(ParamError, match=repr(deep)):
            check_param_shapes(sym, bad, auxs)


def test_gluon_block_with_a_wrong_shaped_param_is_named():
    from mxnet import gluon
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3, in_channels=3), gluon.nn.BatchNorm(in_channels=4),
            gluon.nn.Dense(2, in_units=4 * 6 * 6))
    net.initialize()
    gamma = net[1].gamma
    gamma._data = [mx.nd.ones((5,))]   # altered behind Gluon's back: the check still runs
    with pytest.raises(ParamError, match=rf"'{gamma.name}' has shape \(5,\)"):
        amp.convert_hybrid_block(net, target_dtype="bfloat16")


def test_checkpoint_with_a_wrong_shaped_param_cli_and_api(tmp_path, capsys):
    sym, shapes = _conv_bn_fc()
    shapes["bn_gamma"] = (9,)
    args, auxs = _params(sym, shapes)
    prefix = str(tmp_path / "bad")
    save_checkpoint(prefix, 0, sym, args, auxs)
    before = _hashes(tmp_path)
    with pytest.raises(ParamError, match=r"bad-0000.params does not match .*'bn_gamma' has shape \(9,\)"):
        convert_checkpoint(prefix, 0, target_dtype="float16")
    assert _hashes(tmp_path) == before
    refused(capsys, tmp_path, ["convert", prefix, "--target-dtype", "float16"],
            "'bn_gamma'", "(9,)", "(8,)")
    refused(capsys, tmp_path, ["inspect", prefix], "'bn_gamma'")


def test_cli_input_shape_checks_the_classifier(tmp_path, capsys):
    sym, shapes = _conv_bn_fc()
    args, auxs = _params(sym, shapes)
    prefix = str(tmp_path / "m")
    save_checkpoint(prefix, 0, sym, args, auxs)
    code, out, err = cli(capsys, ["inspect", prefix, "--input-shape", "data:1x3x8x8"])
    assert code == 0, err
    refused(capsys, tmp_path, ["inspect", prefix, "--input-shape", "data:1x3x10x10"],
            "'fc_weight'", "(4, 288)", "(4, 512)", "--input-shape")
    refused(capsys, tmp_path, ["inspect", prefix, "--input-shape", "data:3xZ"],
            "bad --input-shape 'data:3xZ'")
    refused(capsys, tmp_path, ["inspect", prefix, "--input-shape", "image:1x3x8x8"],
            "--input-shape name ['image']", "'data'")
    refused(capsys, tmp_path, ["inspect", prefix, "--input-shape", "fc_weight:4x288"],
            "--input-shape name ['fc_weight']")


def test_cli_auto_input_of_the_wrong_shape_names_input(ckpt, tmp_path, capsys):
    # small_model's classifier reads 4 x 4 x 4 values: an 8x8 (or 9x9) image, not 12x12
    refused(capsys, tmp_path, ["auto", ckpt, "--input", "data:1x3x12x12", "-q"],
            "--input", "'fc_weight'", "(5, 64)", "(5, 144)")
    refused(capsys, tmp_path, ["auto", ckpt, "--input", "data:1x3x8", "-q"],
            "input 'data' of shape (1, 3, 8) (--input) does not fit the symbol")


def test_auto_api_sample_input_of_the_wrong_shape():
    sym, args, auxs = small_model()
    with pytest.raises(ParamError, match="sample_inputs"):
        amp.auto_convert_model(sym, args, auxs, np.ones((1, 3, 12, 12), np.float32),
                               target_dtype="bfloat16", quiet=True)


# ----------------------------------------------------------------------------- MXNet's messages

def test_error_text_keeps_the_cause_of_an_mxnet_error(tmp_path):
    with pytest.raises(mx.base.MXNetError) as info:
        mx.nd.ones((2, 2)) + mx.nd.ones((3, 3))
    assert str(info.value).startswith("Traceback")      # what MXNet gives
    text = error_text(info.value)
    assert "operands could not be broadcast together" in text
    assert "Traceback" not in text and "\n" not in text and not text.startswith("MXNetError")
    assert error_text(ValueError("first line\nsecond")) == "first line"
    assert error_text(KeyError()) == "KeyError"
    assert error_text("Error in operator fc: [07:21:21] ../src/x.cc:67: Unexpected shape") == \
        "Error in operator fc: Unexpected shape"


def test_missing_custom_op_is_named_in_api_and_cli(tmp_path, capsys):
    fc = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc")
    obj = json.loads(fc.tojson())
    obj["nodes"][-1].update(op="Custom", attrs={"op_type": "sq"})
    prefix = str(tmp_path / "c")
    with open(prefix + "-symbol.json", "w") as f:
        json.dump(obj, f)
    mx.nd.save(prefix + "-0000.params", {"arg:fc_weight": mx.nd.ones((3, 4))})
    with pytest.raises(GraphError) as info:
        load_checkpoint(prefix, 0)
    assert "Cannot find custom operator sq" in str(info.value)
    assert "Traceback" not in str(info.value)
    refused(capsys, tmp_path, ["convert", prefix, "--target-dtype", "float16"],
            "c-symbol.json", "Cannot find custom operator sq")


def test_unreadable_params_file_says_why(ckpt, tmp_path, capsys):
    path = ckpt + "-0000.params"
    with open(path, "wb") as f:
        f.write(b"not an MXNet file" * 8)
    line = refused(capsys, tmp_path, ["convert", ckpt, "--target-dtype", "float16"],
                   path, "Invalid NDArray file format")
    assert "Traceback" not in line


# ----------------------------------------------------------------------------- other bad input

def test_float64_param_is_a_param_error_naming_it(tmp_path, capsys):
    sym, args, auxs = small_model()
    args = dict(args, fc_weight=args["fc_weight"].astype("float64"))
    with pytest.raises(ParamError, match=r"'fc_weight' \(float64\)") as info:
        amp.convert_model(sym, args, auxs, target_dtype="bfloat16")
    assert "converted graph" not in str(info.value)
    prefix = str(tmp_path / "wide")
    save_checkpoint(prefix, 0, sym, args, auxs)
    refused(capsys, tmp_path, ["convert", prefix, "--target-dtype", "float16"],
            "'fc_weight' (float64)", "float32")


def test_aux_params_none():
    mlp = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc")
    args = {"fc_weight": mx.nd.ones((2, 3)), "fc_bias": mx.nd.zeros(2)}
    csym, cargs, cauxs = amp.convert_model(mlp, args, None, target_dtype="bfloat16")
    assert cauxs == {} and sorted(cargs) == ["fc_bias", "fc_weight"]
    sym, args, _ = small_model()
    with pytest.raises(ParamError, match="bn1_moving_mean"):
        amp.convert_model(sym, args, None, target_dtype="bfloat16")
    with pytest.raises(ParamError, match="aux_params must be a dict"):
        amp.convert_model(sym, args, [1, 2], target_dtype="bfloat16")


def test_variable_only_graph_converts_to_itself_with_a_warning(tmp_path, capsys):
    prefix = str(tmp_path / "v")
    save_checkpoint(prefix, 0, mx.sym.var("data"), {}, {})
    code, _, err = cli(capsys, ["convert", prefix, "--target-dtype", "float16", "-q"])
    assert code == 0, err
    assert "nothing to convert" in err and "list of arrays" not in err
    sym, args, auxs = load_checkpoint(prefix + "-amp", 0)
    assert sym.list_arguments() == ["data"] and args == {} and auxs == {}


@pytest.mark.parametrize("argv, fragments", [
    (["auto", "{m}", "--input", "data:2x3x8x8", "--rtol", "-1"], ["--rtol", "-1"]),
    (["auto", "{m}", "--input", "data:2x3x8x8", "--atol", "nan"], ["--atol", "nan"]),
    (["auto", "{m}", "--input", "data:2x3x8x8", "--max-executions", "1"], ["--max-executions"]),
    (["convert", "{m}", "--target-dtype", "float16", "--epoch", "-1"], ["--epoch", "-1"]),
    (["convert", "{m}", "--target-dtype", "float16", "--out-epoch", "-2"], ["--out-epoch", "-2"]),
    (["convert", "{m}", "--target-dtype", "float16", "--data-names", "nope"],
     ["--data-names", "'nope'"]),
    (["auto", "{m}", "--input", "nope:2x3x8x8"], ["--input", "'nope'"]),
])
def test_bad_numbers_and_names_are_named_by_their_flag(ckpt, tmp_path, capsys, argv, fragments):
    refused(capsys, tmp_path, [a.format(m=ckpt) for a in argv], *fragments)


def test_unknown_data_name_is_not_blamed_on_the_files(ckpt, tmp_path, capsys):
    line = refused(capsys, tmp_path, ["convert", ckpt, "--target-dtype", "float16",
                                      "--data-names", "nope"], "--data-names ['nope']")
    assert "does not match" not in line and "-0000.params" not in line
    with pytest.raises(ParamError, match=r"^data_names \['nope'\]"):
        convert_checkpoint(ckpt, 0, write=False, data_names="nope")


def test_negative_epoch_in_the_api():
    with pytest.raises(CheckpointError, match="epoch must be a non-negative integer"):
        load_checkpoint("m", -1)


def test_auto_with_a_non_finite_reference_writes_nothing(ckpt, tmp_path, capsys):
    x = np.ones((2, 3, 8, 8), np.float32)
    x[0, 0, 0, 0] = np.inf
    path = str(tmp_path / "x.npy")
    np.save(path, x)
    refused(capsys, tmp_path, ["auto", ckpt, "--input", f"data:{path}", "-q"],
            "inf or nan", "nothing written")
