"""Zoo architectures trained here in seconds (tests/zoo_trainers.py, 16x16 inputs, a few epochs): our
conversion flips no test prediction that mx.contrib.amp's keeps, in float16 and bfloat16.

The full set of architectures, at 32x32 and trained for minutes, is the benchmark
``benchmarks/trained_zoo.py`` (docs/trained_zoo.md). float16 runs emulated (no CPU float16
kernels); bfloat16 natively where this CPU runs it (unfused, and through a Module with
oneDNN's conv+BatchNorm fusion), else emulated.
"""
import numpy as np
import pytest

import trained_models as tm
import zoo_trainers as zt
from mxnet_amp import convert_model
from mxnet_amp.hardware import bf16_runs_natively

pytestmark = pytest.mark.filterwarnings("ignore")

# tiny recipes (a minute of training at most): post-activation residual + BatchNorm (what
# fold_batchnorm and oneDNN's conv+BN fusion touch) and pre-activation residual
RECIPES = {
    "resnet18_v1": zt.Recipe("resnet18_v1", "resnet18_v1", epochs=4, copies=1, lr=3e-3),
    "resnet18_v2": zt.Recipe("resnet18_v2", "resnet18_v2", epochs=4, copies=1, lr=3e-3),
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    cache = str(tmp_path_factory.mktemp("zoo_cache"))
    got = {}

    def get(name):
        if name not in got:
            model = zt.train(RECIPES[name], cache)
            got[name] = model, tm.predict(model.sym, model.arg_params, model.aux_params, model.x_test), cache
        return got[name]
    return get


def _contrib(sym, args, auxs, **kw):
    from mxnet.contrib import amp
    return amp.convert_model(sym, dict(args), dict(auxs), **kw)


def _paths(dtype):
    if dtype == "bfloat16" and bf16_runs_natively():
        return ("native", "module")
    return ("emulated",)


def _logits(converted, x, path):
    if path == "module":
        return zt.module_logits(*converted, x)
    return tm.logits_of(*converted, x, path)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(RECIPES))
def test_ours_flips_no_more_than_contrib(trained, name, dtype):
    model, ref, _ = trained(name)
    assert tm.accuracy(ref, model.y_test) >= 0.3          # 3x chance: it learned something to flip
    ours = convert_model(model.sym, model.arg_params, model.aux_params, target_dtype=dtype)
    contrib = _contrib(model.sym, model.arg_params, model.aux_params, target_dtype=dtype)
    for path in _paths(dtype):
        a, b = _logits(ours, model.x_test, path), _logits(contrib, model.x_test, path)
        assert np.isfinite(a).all(), path
        assert tm.flips(a, ref) <= tm.flips(b, ref), (path, tm.flips(a, ref), tm.flips(b, ref))


def test_trained_checkpoints_are_reused_by_recipe(trained):
    model, _, cache = trained("resnet18_v1")
    again = zt.train(RECIPES["resnet18_v1"], cache)
    assert again.cached and not model.cached
    assert all(np.array_equal(again.arg_params[k].asnumpy(), v.asnumpy())
               for k, v in model.arg_params.items())
    other = zt.Recipe("resnet18_v1", "resnet18_v1", epochs=5, copies=1, lr=3e-3)
    assert zt.recipe_hash(other) != zt.recipe_hash(RECIPES["resnet18_v1"])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(RECIPES))
def test_auto_keeps_no_node_in_float32_on_trained_zoo_nets(trained, name, dtype):
    """Issue 24: on trained nets (BatchNorm folded, padding taps, conv biases before a
    BatchNorm) the automatic mode keeps nothing in float32 that the plain conversion did
    not need: every node stays low, in 2 executions (reference and check)."""
    from mxnet_amp.auto import auto_convert_model
    model, _, _ = trained(name)
    _, _, _, report = auto_convert_model(model.sym, model.arg_params, model.aux_params,
                                         model.x_test[:64], dtype, quiet=True,
                                         execution="emulated")
    assert report.validated and report.kept_fp32 == () and report.executions == 2
    assert report.low_precision_nodes > 0
