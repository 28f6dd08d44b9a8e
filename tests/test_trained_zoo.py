"""Zoo architectures trained here in seconds (tests/zoo_trainers.py, 16x16 inputs, one pass over 8 corrupted
copies of the training set): our
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
    "resnet18_v1": zt.Recipe("resnet18_v1", "resnet18_v1", size=16, copies=8),
    "resnet18_v2": zt.Recipe("resnet18_v2", "resnet18_v2", size=16, copies=8),
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
    other = zt.Recipe("resnet18_v1", "resnet18_v1", size=16, copies=8, lr=0.02)
    assert zt.recipe_hash(other) != zt.recipe_hash(RECIPES["resnet18_v1"])
