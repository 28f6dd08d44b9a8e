"""Trained models (tests/support/trained_models.py): accuracy after float16 / bfloat16 conversion,
and what the automatic mode does with them.

Bounds: a conversion may cost at most 0.5 accuracy points and change at most 0.5% of the
test predictions in float16, 1 point and 1% in bfloat16. float16 runs through emulation
(MXNet has no CPU float16 kernels); bfloat16 runs natively where this CPU can, else emulated.
Each model trains once per session (a few seconds each).
"""
import numpy as np
import pytest

import trained_models as tm
from mxnet_amp.auto import DTYPE_LIMITS, auto_convert_model
from mxnet_amp.convert import convert_model_full
from mxnet_amp.emulation import emulate_model
from mxnet_amp.mx.hardware import bf16_runs_natively
from mxnet_amp.options import make_options

pytestmark = pytest.mark.filterwarnings("ignore:type inference leaves")

BOUNDS = {"float16": (0.005, 0.005), "bfloat16": (0.01, 0.01)}   # (accuracy points, flipped share)
SAMPLE = 64          # the automatic mode's sample batch: training images, not test ones


@pytest.fixture(scope="module")
def trained():
    """name -> (Trained, float32 test logits); each model trained on first use."""
    cache = {}

    def get(name):
        if name not in cache:
            model = tm.train(name)
            cache[name] = model, tm.predict(model.sym, model.arg_params, model.aux_params,
                                            model.x_test)
        return cache[name]
    return get


def execution(dtype):
    return "native" if dtype == "bfloat16" and bf16_runs_natively() else "emulated"


def sample(model):
    return tm.train_inputs(model.name, SAMPLE)


@pytest.mark.parametrize("name", tm.MODELS)
def test_models_train_to_high_accuracy(trained, name):
    model, ref = trained(name)
    assert np.isfinite(ref).all()
    assert tm.accuracy(ref, model.y_test) >= 0.97


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["cnn", "transformer", "lstm"])
def test_conversion_keeps_accuracy(trained, name, dtype):
    model, ref = trained(name)
    logits = tm.converted_logits(model, dtype, execution(dtype))
    points, share = BOUNDS[dtype]
    assert np.isfinite(logits).all()
    assert abs(tm.accuracy(logits, model.y_test) - tm.accuracy(ref, model.y_test)) <= points
    assert tm.flips(logits, ref) <= share * len(model.y_test)
    # the model really ran in low precision: its converted graph differs from float32
    assert not np.array_equal(logits, ref)


def low_precision_nodes(model, dtype):
    """Op nodes the plain conversion computes in ``dtype``."""
    conversion = convert_model_full(model.sym, model.arg_params, model.aux_params, make_options(dtype))[3]
    return {n for n, d in conversion.result.node_dtypes.items() if d == dtype}


def overflowing_nodes(model):
    """Nodes the plain float16 conversion computes in float16 whose float32 output on the
    sample exceeds float16's range."""
    internals = model.sym.get_internals()
    found = set()
    for node in low_precision_nodes(model, "float16"):
        values = tm.predict(internals[node + "_output"], model.arg_params, model.aux_params,
                            sample(model))
        if np.abs(values).max() > DTYPE_LIMITS["float16"].max:
            found.add(node)
    return found


def test_overflow_model_breaks_in_plain_float16_and_auto_restores_it(trained):
    model, ref = trained("overflow")
    acc32 = tm.accuracy(ref, model.y_test)
    # (BatchNorm folding, the default, scales the overflowing layer's weights down: kept here)
    plain = tm.converted_logits(model, "float16", "emulated", fold_batchnorm=False)
    assert tm.accuracy(plain, model.y_test) < acc32 - 0.2     # the overflow wrecks it
    culprits = overflowing_nodes(model)
    assert culprits == {"raw_dense0_fwd"}
    sym, args, auxs, report = auto_convert_model(model.sym, model.arg_params, model.aux_params,
                                                 sample(model), "float16", quiet=True,
                                                 fold_batchnorm=False)
    assert report.executions <= 3 and report.validated
    # the search keeps the culprits; the report also lists the BatchNorm the weight-range
    # guard keeps (its statistics are beyond float16's range), which the conversion keeps
    searched = [k for k in report.kept_fp32 if k.reason != "weight range"]
    assert {k.name for k in searched} == culprits and {k.reason for k in searched} == {"overflow"}
    assert [k.name for k in report.kept_fp32 if k.reason == "weight range"] == ["raw_batchnorm0_fwd"]
    logits = tm.predict(*emulate_model(sym, args, auxs), model.x_test)
    assert abs(tm.accuracy(logits, model.y_test) - acc32) <= BOUNDS["float16"][0]
    assert tm.flips(logits, ref) <= BOUNDS["float16"][1] * len(model.y_test)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_auto_keeps_every_node_low_when_predictions_hold(trained, name, dtype):
    """The default check accepts the full conversion of a model whose predictions it keeps:
    2 executions, no node kept in float32."""
    model, _ = trained(name)
    _, _, _, report = auto_convert_model(model.sym, model.arg_params, model.aux_params,
                                         sample(model), dtype, quiet=True)
    assert report.executions == 2 and report.validated and report.kept_fp32 == ()
    assert report.criterion == "scale" and report.top1_flips == 0 and report.top1_rows == SAMPLE
    assert report.relative_error <= report.tolerance
    # every node the plain conversion puts in low precision is low precision here too
    assert report.low_precision_nodes == len(low_precision_nodes(model, dtype)) > 0


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_metric_driven_auto_keeps_nothing_where_the_metric_holds(trained, name):
    """Judged by top-1 on labelled test images (at most 0.5 points lost): float16 costs
    nothing, so every node stays low, in 2 executions, and the report gives the figures."""
    from mxnet_amp.auto.metrics import builtin_metric
    model, _ = trained(name)
    x, y = model.x_test[:200], model.y_test[:200]
    _, _, _, report = auto_convert_model(model.sym, model.arg_params, model.aux_params, x,
                                         "float16", quiet=True, max_drop=0.5,
                                         metric=builtin_metric("top1", y))
    assert report.criterion == "metric" and report.validated and report.executions == 2
    assert report.kept_fp32 == ()
    m = report.metric
    assert m["name"] == "top1" and m["reference"] >= 90 and m["drop"] <= 0.5
    assert m["value"] == pytest.approx(100 * tm.accuracy(
        tm.predict(*emulate_model(*convert_model_full(model.sym, model.arg_params,
                                                      model.aux_params,
                                                      make_options("float16"))[:3]), x), y))


def test_metric_driven_auto_restores_the_overflow_model(trained):
    """Plain float16 wrecks the overflow model's top-1; the metric-driven run keeps its
    overflowing layer in float32 and the metric is back within the allowed drop."""
    from mxnet_amp.auto.metrics import builtin_metric
    model, _ = trained("overflow")
    x, y = model.x_test[:200], model.y_test[:200]
    _, _, _, report = auto_convert_model(model.sym, model.arg_params, model.aux_params, x,
                                         "float16", quiet=True, max_drop=0.5,
                                         metric=builtin_metric("top1", y))
    assert report.validated and report.criterion == "metric"
    assert {k.name for k in report.kept_fp32 if k.reason != "weight range"} == overflowing_nodes(model)
    assert report.metric["drop"] <= 0.5
