"""float16 conversions never write a weight as inf or as zeros without a word (issue 33):
the readers of a weight float16 cannot hold stay float32 by default, with the reason in the
report; ``guard_weight_range=False`` converts them as before, with a warning naming the
weight."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import mxnet as mx
import numpy as np
import pytest

import mxnet_amp as amp
from mxnet_amp.convert import convert_model_full
from mxnet_amp.mx.hardware import HardwareWarning
from mxnet_amp.mx.io import save_checkpoint
from mxnet_amp.options import make_options
from mxnet_amp.passes.weight_range import out_of_range_weights
from mxnet_amp.report.model import build_report
from mxnet_amp.report.pages import format_table, report_html

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RANGE = "weight dense0_weight is out of float16 range: max |w| 6.8e+04"


def _mlp(big=None, tiny=False):
    """data(2, 10) -> dense0 -> relu -> dense1; dense0_weight reaches ``big`` in 7 of its 80
    values, or (``tiny``) all its values are ~1e-9."""
    d = mx.sym.var("data")
    h = mx.sym.Activation(mx.sym.FullyConnected(d, num_hidden=8, name="dense0"), act_type="relu",
                          name="relu")
    out = mx.sym.FullyConnected(h, num_hidden=3, name="dense1")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 10)).astype("float32") * 0.1
    if big is not None:
        w[0, :7] = big
    if tiny:
        w = w * 1e-8
    args = {"dense0_weight": mx.nd.array(w), "dense0_bias": mx.nd.zeros(8) + 0.1,
            "dense1_weight": mx.nd.array(rng.standard_normal((3, 8)).astype("float32")),
            "dense1_bias": mx.nd.zeros(3)}
    return out, args


def _x():
    return mx.nd.array(np.full((2, 10), 0.01, dtype="float32"))


def _emulated_out(sym, args, auxs):
    esym, eargs, eauxs = amp.emulate_model(sym, args, auxs)
    ex = esym.bind(mx.cpu(), {**eargs, "data": _x()}, aux_states=eauxs)
    return ex.forward()[0].asnumpy()


def test_overflowing_weight_keeps_its_reader_float32_and_the_output_finite():
    sym, args = _mlp(big=6.8e4)
    options = make_options("float16")
    new_sym, new_args, new_auxs, conversion = convert_model_full(sym, args, {}, options)
    decision = conversion.result.decisions["dense0"]
    assert decision.category.name == "FP32" and decision.reason.startswith(RANGE)
    assert new_args["dense0_weight"].dtype == np.float32
    assert np.array_equal(new_args["dense0_weight"].asnumpy(), args["dense0_weight"].asnumpy())
    assert conversion.result.node_dtypes["dense1"] == "float16"   # the rest still converts
    out = _emulated_out(new_sym, new_args, new_auxs)
    assert np.isfinite(out).all()
    report = build_report(conversion)
    assert RANGE in report.to_json() and RANGE in report_html(report, "")
    assert RANGE in format_table(report)


def test_underflowing_weight_keeps_its_reader_float32():
    sym, args = _mlp(tiny=True)
    _, new_args, _, conversion = convert_model_full(sym, args, {}, make_options("float16"))
    reason = conversion.result.decisions["dense0"].reason
    assert reason.startswith("weight dense0_weight underflows float16: 80 of 80 nonzero values "
                             "flush to 0"), reason
    assert new_args["dense0_weight"].dtype == np.float32
    assert new_args["dense0_weight"].asnumpy().any()


def test_option_off_converts_as_before_with_a_warning_naming_the_param():
    sym, args = _mlp(big=6.8e4)
    with pytest.warns(UserWarning, match="dense0_weight is out of float16 range.*converted to "
                                         "float16 anyway"):
        new_sym, new_args, new_auxs = amp.convert_model(sym, args, {}, target_dtype="float16",
                                                        guard_weight_range=False)
    assert new_args["dense0_weight"].dtype == np.float16
    assert np.isinf(new_args["dense0_weight"].asnumpy()).sum() == 7
    assert not np.isfinite(_emulated_out(new_sym, new_args, new_auxs)).all()


def test_default_convert_model_never_writes_inf():
    sym, args = _mlp(big=6.8e4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a decision, not a warning
        warnings.simplefilter("ignore", HardwareWarning)   # where this machine cannot run it
        _, new_args, _ = amp.convert_model(sym, args, {}, target_dtype="float16")
    assert all(np.isfinite(v.asnumpy().astype("float32")).all() for v in new_args.values())


def test_bfloat16_is_not_affected():
    sym, args = _mlp(big=6.8e4)
    assert out_of_range_weights(args, "bfloat16") == {}
    _, _, _, conversion = convert_model_full(sym, args, {}, make_options("bfloat16"))
    assert conversion.result.node_dtypes["dense0"] == "bfloat16"


def test_a_few_tiny_values_are_not_enough():
    """A weight that loses fewer than half its nonzeros (the usual near-zero tail) converts."""
    w = np.random.default_rng(1).standard_normal(100).astype("float32")
    w[:10] = 1e-9
    assert out_of_range_weights({"w": mx.nd.array(w)}, "float16") == {}
    assert out_of_range_weights({"w": mx.nd.array(np.full(4, 65519.0, "float32"))}, "float16") == {}
    assert "out of float16 range" in out_of_range_weights(
        {"w": mx.nd.array(np.full(4, 65520.0, "float32"))}, "float16")["w"]


def test_hybrid_block_keeps_the_reader_float32():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(8, in_units=10), mx.gluon.nn.Dense(3, in_units=8))
    net.initialize()
    w = net[0].weight.data().asnumpy()
    w[0, :7] = 6.8e4
    net[0].weight.set_data(mx.nd.array(w))
    converted = amp.convert_hybrid_block(net, target_dtype="float16", hybridize=False)
    dtypes = {p.name: p.dtype for p in converted.collect_params().values()}
    assert dtypes[net[0].weight.name] == np.float32
    assert dtypes[net[1].weight.name] == np.float16


@pytest.mark.parametrize("guard", [True, False])
def test_cli_convert_says_why_and_stores_the_weight_float32(tmp_path, guard):
    sym, args = _mlp(big=6.8e4)
    prefix = str(tmp_path / "m")
    save_checkpoint(prefix, 0, sym, args, {})
    env = {**os.environ, "PYTHONPATH": REPO}
    done = subprocess.run([sys.executable, "-m", "mxnet_amp", "convert", prefix, "--target-dtype",
                           "fp16", "--report", str(tmp_path / "r.json")]
                          + ([] if guard else ["--no-guard-weight-range"]),
                          capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr
    saved = mx.nd.load(prefix + "-amp-0000.params")
    report = json.loads((tmp_path / "r.json").read_text())
    if guard:
        assert RANGE in done.stdout and RANGE in json.dumps(report)
        assert saved["arg:dense0_weight"].dtype == np.float32
    else:
        assert "dense0_weight is out of float16 range" in done.stderr
        assert "--guard-weight-range off" in done.stderr
        assert saved["arg:dense0_weight"].dtype == np.float16


# ----------------------------------------------------------------------------- int32 weight

def _int32_weight_model():
    from helpers import small_model
    sym, args, auxs = small_model()
    args["fc_weight"] = args["fc_weight"].astype("int32")
    return sym, args, auxs


def test_an_int32_weight_is_named_by_the_api():
    from mxnet_amp.errors import ParamError
    sym, args, auxs = _int32_weight_model()
    with pytest.raises(ParamError, match=r"param fc_weight is int32, but fc \(FullyConnected\) "
                                         r"reads it as input 1 in a float dtype") as err:
        amp.convert_model(sym, args, auxs, target_dtype="bfloat16")
    assert "the converted graph" not in str(err.value) and err.value.param == "fc_weight"


def test_an_int32_weight_is_named_with_its_file_by_the_cli(tmp_path):
    sym, args, auxs = _int32_weight_model()
    prefix = str(tmp_path / "m")
    save_checkpoint(prefix, 0, sym, args, auxs)
    env = {**os.environ, "PYTHONPATH": REPO}
    done = subprocess.run([sys.executable, "-m", "mxnet_amp", "convert", prefix, "--target-dtype",
                           "bf16"], capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 2
    assert f"error: {prefix}-0000.params: param fc_weight is int32" in done.stderr, done.stderr
    assert sorted(os.listdir(tmp_path)) == ["m-0000.params", "m-symbol.json"]


def test_a_weight_is_judged_step_by_step_as_it_is_whole(monkeypatch):
    """Read a few values at a time (small temporaries; Ctrl-C heard between steps), a
    weight gives the reason it gives read whole: overflow, underflow share, nothing."""
    import numpy as np

    from mxnet_amp.passes import weight_range
    rng = np.random.default_rng(0)
    cases = [rng.standard_normal(1000).astype(np.float32),
             np.array([1e-9, 1.0] * 150 + [1e-9] * 400 + [0.0] * 300, np.float32),
             np.concatenate([np.full(990, 1e-9), [7e4], [np.inf] * 9]).astype(np.float32),
             np.full(10, np.nan, np.float32)]
    whole = [weight_range._why(c) for c in cases]
    monkeypatch.setattr(weight_range, "_STEP", 7)
    assert [weight_range._why(c) for c in cases] == whole
    assert whole[0] is None and "underflows float16: 550 of 700" in whole[1] and "out of float16 range" in whole[2]
    assert whole[3] is None
