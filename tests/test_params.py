"""recast_params casts small same-shaped weights together (stack, one amp_cast, split): the
result must be what casting each weight alone gives, bit for bit, in arrays of their own."""
from __future__ import annotations

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.dtypes import array_dtype
from mxnet_amp.params import cast_array, recast_params


def _params():
    rng = np.random.default_rng(3)
    shapes = [(4, 3, 3, 3)] * 5 + [(7,)] * 4 + [(2, 5)] * 3 + [(300, 300), (1,)]
    params = {f"p{i}": mx.nd.array(rng.normal(0, 1, s) * 10.0 ** rng.integers(-42, 38, s), dtype="float32")
              for i, s in enumerate(shapes)}
    # values where rounding matters: ties, overflow, subnormals, inf, nan
    params["edge"] = mx.nd.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, 65504, 65520, 1e-8, 1e-40,
                                  np.inf, -np.inf, np.nan, -0.0, 3e38], dtype="float32")
    params["alias"] = params["p0"]
    return params


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cast_together_is_cast_alone(dtype):
    params = _params()
    before = {k: v.asnumpy().copy() for k, v in params.items()}
    want = {k: dtype for k in params}
    want["p1"] = None          # left as it is
    want["p2"] = "float32"     # already right
    out = recast_params(params, want)
    assert list(out) == list(params)
    for k, v in out.items():
        if want[k] in (None, "float32"):
            assert v is params[k]
            continue
        alone = cast_array(params[k], dtype)
        assert array_dtype(v) == dtype and v.shape == params[k].shape, k
        assert v.asnumpy().tobytes() == alone.asnumpy().tobytes(), k
    for k, v in params.items():   # the inputs are untouched
        assert np.array_equal(v.asnumpy(), before[k], equal_nan=True), k
    # each result is an array of its own
    out["p3"][:] = 0
    assert out["p4"].asnumpy().any() and out["p0"].asnumpy().any()
    assert out["alias"] is not out["p0"]


def test_sequential_gives_the_same():
    params = _params()
    want = {k: "float16" for k in params}
    together, alone = recast_params(params, want), recast_params(params, want, sequential=True)
    for k in params:
        assert together[k].asnumpy().tobytes() == alone[k].asnumpy().tobytes(), k
