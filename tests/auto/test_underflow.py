"""Underflow judged by what it costs (mxnet_amp.auto.underflow): a flushed tensor is kept in
float32 only where the values lost matter."""
import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.auto import auto_convert_model

from auto_models import fc, nd, underflow_model

pytestmark = pytest.mark.filterwarnings("ignore:type inference leaves")


def padding_tap_model(seed=0):
    """A 3x3 convolution on 1x1 feature maps: only the centre tap meets data, the eight
    others only meet zero padding, and weight decay left them at ~1e-8 (below float16's
    2**-25): 8/9 of the weight flushes to zero in float16, and nothing is lost. Its bias
    (1e-9, all of it flushed) sits before a BatchNorm that subtracts it anyway."""
    rng = np.random.RandomState(seed)
    d = mx.sym.var("data")
    w = rng.uniform(1e-8, 2e-8, (16, 8, 3, 3)) * rng.choice([-1, 1], (16, 8, 3, 3))
    w[:, :, 1, 1] = rng.uniform(0.05, 0.26, (16, 8)) * rng.choice([-1, 1], (16, 8))
    conv = mx.sym.Convolution(d, kernel=(3, 3), pad=(1, 1), num_filter=16, name="conv")
    bn = mx.sym.BatchNorm(conv, fix_gamma=False, name="bn")
    h = mx.sym.Activation(bn, act_type="relu", name="relu")
    out = fc(mx.sym.flatten(h, name="flat"), "head", 5)
    args = {"conv_weight": w, "conv_bias": rng.uniform(1e-9, 2e-9, 16),
            "bn_gamma": np.ones(16), "bn_beta": np.zeros(16),
            "head_weight": rng.uniform(-0.3, 0.3, (5, 16)), "head_bias": np.zeros(5)}
    x = rng.uniform(-1, 1, (8, 8, 1, 1)).astype(np.float32)
    conv_out = np.einsum("oi,bi->bo", w[:, :, 1, 1], x[:, :, 0, 0])
    auxs = {"bn_moving_mean": conv_out.mean(0), "bn_moving_var": conv_out.var(0) + 1e-3}
    return out, nd(args), nd(auxs), x


@pytest.mark.parametrize("fold", [False, True])
def test_underflow_that_costs_nothing_keeps_nothing_in_float32(fold):
    sym, args, auxs, x = padding_tap_model()
    *_, report = auto_convert_model(sym, args, auxs, x, quiet=True, fold_batchnorm=fold)
    # the search keeps nothing; unfolded, the weight-range guard keeps conv (its bias all
    # flushes), and the report lists it with the guard's reason
    assert [(k.name, k.reason) for k in report.kept_fp32] == ([] if fold else [("conv", "weight range")])
    assert report.validated and report.executions == 2
    # the tensors were seen and left in low precision on purpose, and the report says why
    note = next(n for n in report.notes if "flush to zero but were left" in n)
    assert "conv_weight" in note


def test_underflow_that_costs_accuracy_is_still_kept():
    """The underflow model's fc_u outputs ~1e-9 everywhere: all of it is lost (its weights
    underflow too: unguarded, auto's search meets it)."""
    sym, args, x = underflow_model()
    *_, report = auto_convert_model(sym, args, {}, x, quiet=True, guard_weight_range=False)
    assert [(k.name, k.reason) for k in report.kept_fp32] == [("fc_u", "underflow")]
    assert "of its scale" in report.kept_fp32[0].detail
