"""Issue 33's bad-input round: each reproduction gives a typed, actionable error (or works)."""
from __future__ import annotations

import dataclasses
import warnings

import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon import nn

import mxnet_amp as amp
from mxnet_amp.cli import demo
from mxnet_amp.cli.main import build_parser, main
from mxnet_amp.errors import AMPError, ArgumentError, GraphError, InputShapeError, InputValueError
from mxnet_amp.mx.io import load_checkpoint
from helpers import graph_of, run

RNG = np.random.RandomState(0)


def _classifier(loss="SoftmaxOutput"):
    """A Symbol-API classifier ending in a loss output layer, as Module users train them."""
    data = mx.sym.var("data")
    fc = mx.sym.FullyConnected(mx.sym.relu(mx.sym.FullyConnected(data, num_hidden=8, name="fc1")),
                               num_hidden=3, name="fc2")
    out = getattr(mx.sym, loss)(fc, name="softmax" if loss == "SoftmaxOutput" else "out")
    args = {"fc1_weight": mx.nd.array(RNG.randn(8, 4) * 0.3), "fc1_bias": mx.nd.zeros(8),
            "fc2_weight": mx.nd.array(RNG.randn(3, 8) * 0.3), "fc2_bias": mx.nd.zeros(3)}
    return out, args


# ------------------------------------------------------------------ data_names=['data'] (Module's call)

@pytest.mark.parametrize("loss", ["SoftmaxOutput", "LinearRegressionOutput", "LogisticRegressionOutput",
                                  "MAERegressionOutput", "SVMOutput"])
def test_data_names_without_the_label_converts_a_loss_output_classifier(loss):
    sym, args = _classifier(loss)
    label = [n for n in sym.list_arguments() if n.endswith("label")][0]
    new_sym, new_args, _ = amp.convert_model(sym, args, {}, "bfloat16", data_names=["data"])
    assert label in new_sym.list_arguments() and label not in new_args
    same, _, _ = amp.convert_model(sym, args, {}, "bfloat16", data_names=["data", label])
    assert new_sym.tojson() == same.tojson()
    # the label is an input, not a weight: no __dtype__ declared for it
    converted = amp.convert_symbol(sym, "bfloat16", data_names="data")
    assert "__dtype__" not in dict(graph_of(converted).nodes[graph_of(converted).index_of(label)].attrs)


def test_data_names_without_the_label_in_the_cli_and_checkpoints(tmp_path, capsys):
    sym, args = _classifier()
    prefix = str(tmp_path / "cls")
    amp.save_checkpoint(prefix, 0, sym, args, {})
    code = main(["convert", prefix, "--target-dtype", "bf16", "--out", prefix + "-bf16",
                 "--data-names", "data"])
    assert code == 0, capsys.readouterr().err
    new_sym, new_args, _ = load_checkpoint(prefix + "-bf16", 0)
    assert "softmax_label" in new_sym.list_arguments() and "softmax_label" not in new_args
    conversion, _, _, _ = amp.convert_checkpoint(prefix, 0, write=False, target_dtype="bfloat16",
                                                 data_names=["data"])
    assert "softmax_label" in conversion.data_names


def test_auto_with_data_names_without_the_label():
    sym, args = _classifier()
    x = RNG.randn(6, 4).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        new_sym, new_args, _, report = amp.auto_convert_model(
            sym, args, {}, {"data": x}, target_dtype="bfloat16", data_names=["data"], quiet=True,
            execution="emulated")
    assert "softmax_label" not in new_args and report is not None


# ------------------------------------------------------------------ raw errors of the Python API

def _net():
    net = nn.HybridSequential()
    net.add(nn.Dense(3, in_units=4))
    net.initialize()
    return net


@pytest.mark.skipif(mx.context.num_gpus() > 0, reason="a GPU build runs mx.gpu()")
def test_gpu_ctx_on_a_cpu_build_is_a_typed_error():
    with pytest.raises(ArgumentError, match=r"ctx=gpu\(0\).*GPU"):
        amp.convert_hybrid_block(_net(), "bfloat16", ctx=mx.gpu())
    sym, args = _classifier()
    with pytest.raises(ArgumentError, match="ctx"):
        amp.auto_convert_model(sym, args, {}, RNG.randn(2, 4), target_dtype="bfloat16", ctx=mx.gpu())


@pytest.mark.parametrize("sample", [lambda: np.zeros((0, 4), np.float32), lambda: mx.nd.zeros((1, 4))[0:0]])
def test_an_empty_batch_is_named(sample):
    sym, args = _classifier()
    with pytest.raises(InputShapeError, match="sample_inputs 'data' has shape.*empty batch"):
        amp.auto_convert_model(sym, args, {}, sample(), target_dtype="bfloat16", quiet=True)


def test_emulate_model_without_params_names_them():
    sym, args = _classifier()
    with pytest.raises(AMPError, match="arg_params is None"):
        amp.emulate_model(sym, None, None)


class _DictOut(nn.HybridBlock):
    def __init__(self):
        super().__init__()
        with self.name_scope():
            self.dense = nn.Dense(3, in_units=4)

    def hybrid_forward(self, F, x):
        return {"logits": self.dense(x)}


def test_a_block_returning_a_dict_is_a_graph_error():
    block = _DictOut()
    block.initialize()
    with pytest.raises(GraphError, match="block _DictOut cannot be converted.*dict"):
        amp.convert_hybrid_block(block, "bfloat16")


def test_tolerance_and_op_lists_and_plain_blocks_are_argument_errors():
    sym, args = _classifier()
    with pytest.raises(ArgumentError, match="tolerance must be finite and > 0, got 0"):
        amp.auto_convert_model(sym, args, {}, RNG.randn(2, 4), target_dtype="bfloat16", tolerance=0)
    with pytest.raises(ArgumentError, match=r"fp32_ops must be a list of op names.*\['Convolution'\]"):
        amp.convert_model(sym, args, {}, "bfloat16", fp32_ops="Convolution")
    with pytest.raises(ArgumentError, match="block must be a gluon HybridBlock"):
        amp.convert_hybrid_block(nn.Block(), "bfloat16")
    # still what a caller catching the builtin errors catches
    assert issubclass(ArgumentError, TypeError) and issubclass(ArgumentError, ValueError)


def test_target_dtype_in_the_place_of_the_sample_says_so():
    sym, args = _classifier()
    with pytest.raises(InputValueError, match="looks like target_dtype.*target_dtype='bfloat16' by keyword"):
        amp.auto_convert_model(sym, args, {}, "bfloat16")


@pytest.mark.parametrize("value", ["no", "False", 0, 1, None])
def test_bool_options_are_type_checked(value):
    sym, args = _classifier()
    with pytest.raises(ArgumentError, match="fold_batchnorm must be True or False"):
        amp.convert_model(sym, args, {}, "bfloat16", fold_batchnorm=value)
    assert amp.convert_model(sym, args, {}, "bfloat16", fold_batchnorm=np.bool_(False))


# ------------------------------------------------------------------ demo --batch

@pytest.mark.native_bf16   # native: 1 + --runs timed passes a model; elsewhere 1 (no timing)
def test_demo_batch_beyond_memory_runs_in_chunks_says_how_long_and_stops_at_ctrl_c(capsys, monkeypatch):
    # a batch whose samples cannot all be held at once runs chunk by chunk (memory that of a
    # chunk), says first how long it will take, and Ctrl-C then ends it (exit 130)
    said = []

    def say(text):
        said.append(text)
        raise KeyboardInterrupt
    monkeypatch.setattr(demo, "say", say)
    code = main(["demo", "--batch", "1000000000", "--runs", "1"])
    assert code == 130 and "interrupted" in capsys.readouterr().err
    from mxnet_amp.mx.hardware import bf16_runs_natively
    passes = 4 if bf16_runs_natively() else 2
    assert len(said) == 1 and f"to run 1000000000 samples {passes} times in" in said[0]
    assert "days" in said[0] and "Ctrl-C stops it" in said[0]


def test_demo_sample_whose_activations_do_not_fit_is_refused(capsys, monkeypatch):
    # 256 KiB "available": one 32x32 input fits, its activations in the two models do not
    monkeypatch.setattr(demo, "available_memory", lambda: 2**18)
    code = main(["demo", "--batch", "1000", "--size", "32"])
    err = capsys.readouterr().err
    assert code == 2 and "--size 32" in err and "activations" in err and "smaller --size" in err


@pytest.mark.parametrize("failure", [MemoryError(), mx.base.MXNetError("[12:00:00] src/storage/./cpu_device_storage.h:72: "
                                                                    "Failed to allocate CPU Memory")])
def test_demo_batch_that_runs_out_of_memory_past_the_bound_names_batch(capsys, monkeypatch, failure):
    # the up-front bound is a lower one: a batch it lets through may still not fit while running
    def run_out(*args, **kwargs):
        raise failure
    monkeypatch.setattr(demo, "_timed_runs", run_out)
    code = main(["demo", "--batch", "3", "--size", "32"])
    err = capsys.readouterr().err
    assert code == 2 and "--batch 3" in err and "smaller --chunk" in err
    assert "Traceback" not in err


def test_demo_other_failures_are_not_blamed_on_batch(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("something else")
    monkeypatch.setattr(demo, "_timed_runs", broken)
    with pytest.raises(RuntimeError, match="something else"):
        demo.run_demo(build_parser().parse_args(["demo", "--batch", "2", "--size", "32"]))


# ------------------------------------------------------------------ conflicting flags

@pytest.fixture()
def small_ckpt(tmp_path):
    from helpers import saved_small_model
    return saved_small_model(tmp_path, "small")


@pytest.mark.parametrize("flags, named", [
    (["--input", "data:2x3x8x8", "--tolerance", "0.05", "--rtol", "0.01"], ["--tolerance", "--rtol"]),
    (["--input", "data:2x3x8x8", "--tolerance", "0.05", "--atol", "0.01"], ["--tolerance", "--atol"]),
    (["--input", "data:2x3x8x8", "--input", "data:4x3x8x8"], ["--input", "'data' twice"]),
    (["--input", "data:2x3x8x8", "--inputs-npz", "NPZ"], ["--input", "--inputs-npz"]),
    (["--input", "data:2x3x8x8", "--max-drop", "1"], ["--max-drop", "--eval-data"]),
])
def test_conflicting_auto_flags_are_refused_naming_both(small_ckpt, tmp_path, capsys, flags, named):
    npz = str(tmp_path / "x.npz")
    np.savez(npz, data=RNG.randn(2, 3, 8, 8).astype(np.float32))
    out = str(tmp_path / "out")
    code = main(["auto", small_ckpt, "--target-dtype", "bf16", "--out", out,
                 *[npz if f == "NPZ" else f for f in flags]])
    err = capsys.readouterr().err
    assert code == 2, err
    assert all(word in err for word in named), err
    import os
    assert not os.path.exists(out + "-symbol.json")


def test_duplicate_input_shape_is_refused(small_ckpt, capsys):
    code = main(["inspect", small_ckpt, "--input-shape", "data:1x3x8x8", "--input-shape", "data:2x3x8x8"])
    err = capsys.readouterr().err
    assert code == 2 and "--input-shape gives 'data' twice" in err


# ------------------------------------------------------------------ warnings name the caller's line

def test_warnings_point_at_the_callers_line():
    sym, args = _classifier()
    stale = {**args, "old_weight": mx.nd.zeros(2)}
    x64 = RNG.randn(4, 4)   # float64: cast to float32, with a warning
    calls = [lambda: amp.convert_model(sym, stale, {}, "bfloat16"),
             lambda: amp.convert_symbol(mx.sym.var("only"), "bfloat16"),
             lambda: amp.auto_convert_model(sym, args, {}, x64, target_dtype="bfloat16", quiet=True,
                                            execution="emulated")]
    for call in calls:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        ours = [w for w in caught if issubclass(w.category, UserWarning)
                and "mxnet" not in w.filename.replace("mxnet_amp", "")]
        assert ours, [str(w.message) for w in caught]
        assert all(w.filename == __file__ for w in ours), [(w.filename, str(w.message)) for w in ours]


def test_the_package_warns_only_through_warn_user():
    """A bare warnings.warn with a fixed stacklevel points into the package from most callers."""
    import pathlib
    root = pathlib.Path(amp.__file__).parent
    bare = [str(p.relative_to(root)) for p in root.rglob("*.py")
            if p.name != "warn.py" and "warnings.warn(" in p.read_text()]
    assert bare == []


# ------------------------------------------------------------------ auto's report

def _conv_bn():
    data = mx.sym.var("data")
    conv = mx.sym.Convolution(data, kernel=(3, 3), num_filter=4, name="conv0")
    bn = mx.sym.BatchNorm(conv, fix_gamma=False, name="bn0")
    out = mx.sym.FullyConnected(mx.sym.relu(bn), num_hidden=3, name="fc")
    from helpers import init_params
    args, auxs = init_params(out, {"data": (2, 3, 8, 8)})
    return out, args, auxs


def test_a_batchnorm_left_unfolded_by_auto_names_autos_reason_not_excluded_sym_names():
    """Automatic mode keeps an overflowing conv float32: the BatchNorm after it stays unfolded,
    and the report says auto's reason for it (not excluded_sym_names, which nobody gave)."""
    from mxnet_amp.report.model import build_report
    sym, args, auxs = _conv_bn()
    args["conv0_weight"] = mx.nd.ones(args["conv0_weight"].shape) * 5e3   # 27 * 5e3 > 65504
    x = np.ones((2, 3, 8, 8), dtype=np.float32)
    *_, auto = amp.auto_convert_model(sym, args, auxs, x, target_dtype="float16", quiet=True,
                                      execution="emulated")
    assert ("conv0", "overflow") in [(k.name, k.reason) for k in auto.kept_fp32]
    report = build_report(auto.conversion)
    why = dict(report.kept_batchnorms)["bn0"]
    assert why.startswith("its producer 'conv0' stays float32: auto: overflow: ") and "max |x| of conv0" in why
    conv0 = next(n for n in report.fp32_nodes if n.name == "conv0")
    assert why.endswith(conv0.reason) and conv0.reason.startswith("auto: overflow: ")
    assert "excluded_sym_names" not in report.to_json() and report.excluded == ()


def test_a_batchnorm_the_user_kept_unfolded_says_excluded_by_name():
    from mxnet_amp.convert import convert_model_full
    from mxnet_amp.options import OpLists, make_options
    from mxnet_amp.report.model import build_report
    sym, args, auxs = _conv_bn()
    conversion = convert_model_full(sym, args, auxs, make_options("bfloat16", OpLists(excluded_sym_names=["conv0"])))[3]
    user = build_report(conversion)
    assert dict(user.kept_batchnorms)["bn0"] == ("its producer 'conv0' stays float32: excluded by name "
                                                 "(excluded_sym_names / --exclude)")
    assert user.excluded == ("conv0",)


def test_numpy_warnings_during_auto_are_report_notes_with_their_step(tmp_path):
    from mxnet_amp.report.model import build_report
    from mxnet_amp.report.pages import report_html
    sym, args = _classifier()

    def validate(reference, outputs):   # numpy arithmetic on inf: 'invalid value'
        return bool(np.isnan(np.add(np.array([np.inf]), np.array([-np.inf]))).all())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        *_, auto = amp.auto_convert_model(sym, args, {}, RNG.randn(4, 4).astype(np.float32),
                                          target_dtype="bfloat16", quiet=True, validate=validate,
                                          execution="emulated")
    assert not [w for w in caught if w.category is RuntimeWarning]   # not printed raw
    note = [n for n in auto.notes if n.startswith("numpy met 'invalid value'")]
    assert len(note) == 1 and "the check run" in note[0] and "validate (test_user_facing_33.py:" in note[0]
    assert note[0] in auto.to_dict()["notes"]
    report = build_report(auto.conversion)
    from mxnet_amp.auto.html import report_section
    page = report_html(dataclasses.replace(report, auto=report_section(auto)))
    import html
    assert html.escape(note[0]) in page


def test_the_html_report_names_the_fusion_barriers():
    from mxnet_amp.convert import convert_graph
    from mxnet_amp.mx.io import graph_from_symbol
    from mxnet_amp.options import make_options
    from mxnet_amp.report.model import build_report
    from mxnet_amp.report.pages import report_html
    data = mx.sym.var("data")
    conv = mx.sym.Convolution(data, kernel=(3, 3), num_filter=4, name="shared_conv")
    sym = mx.sym.Activation(conv, act_type="relu", name="relu") + conv
    report = build_report(convert_graph(graph_from_symbol(sym), make_options("bfloat16"), data_names=["data"]))
    assert report.fusion_barriers == ("shared_conv",)
    page = report_html(report)
    assert "Fusion barriers" in page and "<p class='names'>shared_conv</p>" in page
