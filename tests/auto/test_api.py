"""The automatic mode's entry points (mxnet_amp.auto.api): auto_convert_model and
auto_convert_block end to end: checks, validate=, tolerances, exclusions, progress, inputs
left untouched, and the returned model being the plain conversion."""
import io
import sys

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.auto import auto_convert_block, auto_convert_model, check_outputs
from mxnet_amp.convert import convert_model
from mxnet_amp.errors import GraphError
from mxnet_amp.mx.io import symbol_json

from auto_models import clean_model, fc, nd, overflow_model, run
from helpers import gluoncv_resnet18

pytestmark = pytest.mark.filterwarnings("ignore:type inference leaves")


def test_clean_model_finishes_in_at_most_3_executions_with_nothing_excluded():
    sym, args, x = clean_model()
    new_sym, new_args, _, report = auto_convert_model(sym, args, {}, x, quiet=True)
    assert report.executions <= 3
    assert report.executions == len(report.steps)
    assert report.kept_fp32 == ()
    assert report.validated and report.tolerance_ratio <= 1
    assert report.low_precision_nodes == report.op_nodes == 3
    assert report.execution == "emulated"          # float16 never runs on CPU
    # the returned model is the plain conversion
    assert symbol_json(new_sym) == symbol_json(convert_model(sym, args, {})[0])


def test_user_validate_decides_and_sees_float32_arrays():
    sym, args, x = clean_model()
    seen = []

    def validate(ref, out):
        seen.append((len(ref), ref[0].dtype, out[0].dtype, ref[0].shape))
        return bool(np.abs(out[0] - ref[0]).max() < 1e-6)   # stricter than fp16 can do
    *_, report = auto_convert_model(sym, args, {}, x, validate=validate, quiet=True)
    assert seen and all(s == (1, np.float32, np.float32, (2, 4)) for s in seen)
    # every check but the reference and the attribution run
    assert len(seen) == report.executions - 1 - sum(s.kind == "attribution" for s in report.steps)
    assert report.validated
    assert report.kept_fp32 and all(k.reason == "accuracy" for k in report.kept_fp32)


def test_validate_that_rejects_everything_is_reported_not_hidden():
    sym, args, x = clean_model()
    with pytest.warns(UserWarning, match="did not validate"):
        *_, report = auto_convert_model(sym, args, {}, x, validate=lambda r, o: False, quiet=True)
    assert not report.validated
    assert any("float32 model itself" in n for n in report.notes)


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_on_a_terminal_only(monkeypatch, capsys):
    sym, args, x = clean_model()
    auto_convert_model(sym, args, {}, x, quiet=False)   # stderr captured: not a terminal
    assert "auto float16" not in capsys.readouterr().err
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    auto_convert_model(sym, args, {}, x, quiet=True)
    assert "auto float16" not in terminal.getvalue()
    auto_convert_model(sym, args, {}, x, quiet=False)
    assert "auto float16" in terminal.getvalue()


def test_inputs_are_not_modified():
    sym, args, x = overflow_model()
    before = symbol_json(sym)
    values = {k: v.asnumpy().copy() for k, v in args.items()}
    given = dict(args)
    xs = mx.nd.array(x)
    auto_convert_model(sym, given, {}, {"data": xs}, quiet=True)
    assert symbol_json(sym) == before
    assert given.keys() == args.keys() and all(given[k] is args[k] for k in args)
    assert all(np.array_equal(args[k].asnumpy(), values[k]) for k in args)
    np.testing.assert_array_equal(xs.asnumpy(), x)


def test_bad_sample_inputs_and_options_raise_clear_errors():
    sym, args, x = clean_model()
    with pytest.raises(GraphError, match="missing \\['data'\\]"):
        auto_convert_model(sym, args, {}, {"input": x}, quiet=True)
    with pytest.raises(GraphError, match="nope"):
        auto_convert_model(sym, args, {}, x, excluded_sym_names=["nope"], quiet=True)
    with pytest.raises(ValueError, match="max_executions"):
        auto_convert_model(sym, args, {}, x, max_executions=1, quiet=True)


def test_user_exclusions_are_kept_and_reported():
    sym, args, x = clean_model()
    *_, report = auto_convert_model(sym, args, {}, x, excluded_sym_names=["fc_b2"], quiet=True)
    assert [(k.name, k.reason) for k in report.kept_fp32] == [("fc_b2", "user")]
    assert report.low_precision_nodes == 2         # fc_b and relu_b


def test_returned_model_is_plain_conversion_with_the_kept_nodes():
    """Emulated checks read the caller's float32 weights rounded in the graph; the returned
    params are cast only at the end, and are exactly what convert_model gives with the
    same exclusions (same symbol, same bits, low precision dtypes)."""
    sym, args, x = overflow_model()
    csym, cargs, cauxs, report = auto_convert_model(sym, args, {}, {"data": mx.nd.array(x)},
                                                    quiet=True)
    assert report.execution == "emulated" and report.excluded_sym_names
    psym, pargs, pauxs = convert_model(sym, args, {}, excluded_sym_names=report.excluded_sym_names)
    assert symbol_json(csym) == symbol_json(psym)
    assert cargs.keys() == pargs.keys() and cauxs.keys() == pauxs.keys()
    for k in cargs:
        assert cargs[k].dtype == pargs[k].dtype, k
        np.testing.assert_array_equal(cargs[k].asnumpy(), pargs[k].asnumpy())
    assert any(v.dtype == np.float16 for v in cargs.values())


def test_resnet18_is_clean_in_two_executions():
    sym, args, auxs, x = gluoncv_resnet18()
    *_, report = auto_convert_model(sym, args, auxs, x, quiet=True)
    assert report.executions == 2 and report.kept_fp32 == () and report.validated


def test_auto_convert_block():
    from mxnet.gluon import nn
    from mxnet_amp.gluon import emulate_block
    mx.random.seed(0)
    net = nn.HybridSequential(prefix="net_")
    with net.name_scope():
        net.add(nn.Dense(8, in_units=16, activation="relu"), nn.Dense(4, in_units=8))
    net.initialize(mx.init.Uniform(1.0))
    big = net[0].weight.data()
    net[0].weight.set_data(mx.nd.abs(big) * 2e4)     # activations past 65504
    net[1].weight.set_data(net[1].weight.data() * 1e-4)
    x = mx.nd.array(np.random.RandomState(0).uniform(0, 1, (2, 16)))
    ref = net(x).asnumpy()
    block, report = auto_convert_block(net, x, quiet=True)
    assert {k.reason for k in report.kept_fp32} == {"overflow"}
    assert {k.op for k in report.kept_fp32} == {"FullyConnected"} and len(report.kept_fp32) == 2
    assert report.validated and report.executions == 2
    out = emulate_block(block)(x).asnumpy()
    assert np.isfinite(out).all() and check_outputs([ref], [out], tolerance=report.tolerance).passed
    assert np.array_equal(net(x).asnumpy(), ref)      # the source block still runs fp32
    # the block is the converted model the report describes: what convert_hybrid_block
    # builds with the chosen exclusions
    from mxnet_amp.gluon import convert_hybrid_block
    same = convert_hybrid_block(net, excluded_sym_names=report.excluded_sym_names)
    assert np.array_equal(emulate_block(same)(x).asnumpy(), out)
    dtypes = {k: v.dtype for k, v in block.collect_params().items()}
    assert dtypes == {k: v.dtype for k, v in same.collect_params().items()}


def test_several_outputs_are_all_checked():
    sym, args, x = overflow_model()
    a, b = sym.get_internals()["fc_a2_output"], sym.get_internals()["fc_b2_output"]
    group = mx.sym.Group([b, a])
    new_sym, _, _, report = auto_convert_model(group, args, {}, x, quiet=True)
    assert set(report.excluded_sym_names) == {"fc_a", "fc_a2"}
    assert report.validated and report.executions == 2
    assert len(new_sym.list_outputs()) == 2


def test_auto_with_atol_zero_keeps_in_float32_what_breaks_the_check():
    rng = np.random.RandomState(0)
    sym = mx.sym.Activation(fc(mx.sym.var("data"), "fc", 8), act_type="relu", name="relu")
    args = nd({"fc_weight": rng.uniform(-1, 1, (8, 16)), "fc_bias": np.zeros(8)})
    x = rng.uniform(-1, 1, (4, 16)).astype(np.float32)
    assert (run(sym, args, {}, x) == 0).any()     # the zeros that hid the error
    # float16's rounding (~5e-4 relative) is far beyond rtol=1e-6: fc cannot stay float16
    *_, report = auto_convert_model(sym, args, {}, x, "float16", rtol=1e-6, atol=0.0,
                                    execution="emulated", quiet=True)
    assert report.steps[1].kind == "check" and not report.steps[1].passed
    assert "fc" in report.excluded_sym_names and report.validated


def test_rtol_or_atol_switch_auto_to_allclose_and_the_report_says_so():
    sym, args, x = clean_model()
    *_, report = auto_convert_model(sym, args, {}, x, rtol=1e-2, quiet=True)
    assert report.criterion == "allclose" and (report.rtol, report.atol) == (1e-2, 1e-3)
    assert report.tolerance is None and "allclose(rtol=0.01, atol=0.001)" in report.summary()
    *_, report = auto_convert_model(sym, args, {}, x, quiet=True)
    assert report.criterion == "scale" and report.tolerance == 1e-2 and report.rtol is None
    assert f"max|out-ref|/max|ref| {report.relative_error:.3g} (tolerance 0.01)" in report.summary()
    with pytest.raises(ValueError, match="tolerance"):
        auto_convert_model(sym, args, {}, x, tolerance=0, quiet=True)


@pytest.mark.parametrize("eval_data", [3, "/data/val.rec"])
def test_bad_eval_data_is_refused_before_any_worker_process_starts(eval_data, monkeypatch):
    """The worker processes start early (before the graph is read): eval_data that cannot be
    read is refused first, so no process is started for it."""
    from mxnet_amp.auto import evaluation
    from mxnet_amp.errors import ArgumentError
    sym, args, _ = clean_model()
    started = []
    monkeypatch.setattr(evaluation, "ProcessPool", lambda *a, **k: started.append(a))
    with pytest.raises(ArgumentError, match="eval_data"):
        auto_convert_model(sym, args, {}, eval_data=eval_data, workers=2, metric="acc",
                           max_drop=0.01, quiet=True)
    assert started == []
