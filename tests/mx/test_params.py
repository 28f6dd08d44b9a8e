"""recast_params casts small same-shaped weights together (stack, one amp_cast, split): the
result must be what casting each weight alone gives, bit for bit, in arrays of their own."""
from __future__ import annotations

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.ir.dtypes import array_dtype
from mxnet_amp.mx.params import _invoke, bfloat16_bits, cast_array, recast_params, write_array


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


def _special_values() -> np.ndarray:
    """Zeros, subnormals, NaNs with payloads, infinities, values at rounding ties, the
    largest finite value (rounds to inf) and random normals: float32."""
    bits = np.array([0, 0x80000000, 1, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00008000,
                     0x7F800000, 0xFF800000, 0x7F800001, 0x7FC00001, 0xFF800001, 0x7FFFFFFF,
                     0x7F80FFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F808000, 0x3F818000, 0x3F808001,
                     0x3F807FFF, 0x00800000, 0x00807FFF], np.uint32)
    rng = np.random.default_rng(0)
    spread = np.arange(0, 2**32, 65537, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([bits.view(np.float32), spread.view(np.float32),
                           rng.standard_normal(70_000).astype(np.float32)])


def test_bfloat16_bits_are_amp_casts_bits_here():
    """The numpy rounding (used where MXNet's amp_cast to bfloat16 runs slowly, without
    oneDNN's bf16 kernels) gives the bits MXNet's amp_cast gives on this machine, for every
    kind of float32: ties to even, subnormals flushed, NaN payloads, overflow to inf."""
    values = _special_values()
    cast = _invoke("amp_cast", [mx.nd.array(values)], (("dtype", "bfloat16"),))[0]
    expected = cast.asnumpy().view(np.uint16).reshape(-1)
    got = bfloat16_bits(values)
    assert got.dtype == np.uint16 and got.shape == values.shape
    assert np.array_equal(got, expected), np.flatnonzero(got != expected)[:10]
    # across the chunk boundary of the rounding loop too
    big = np.tile(values, 3)
    assert np.array_equal(bfloat16_bits(big), np.tile(expected, 3))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_write_array_is_cast_array_of_the_ndarray(dtype):
    """A folded weight written from numpy holds the bits the cast of its NDArray holds, and
    the caller's numpy array stays as it was (writable, same values)."""
    values = _special_values()[:50_000].reshape(500, 100)
    before = values.copy()
    written = write_array(values, None if dtype == "float32" else dtype)
    reference = mx.nd.array(values) if dtype == "float32" else cast_array(mx.nd.array(values), dtype)
    assert array_dtype(written) == dtype and written.shape == values.shape
    assert written.asnumpy().tobytes() == reference.asnumpy().tobytes()
    assert values.flags.writeable and values.tobytes() == before.tobytes()


def test_recast_params_writes_numpy_arrays():
    """numpy arrays (folded weights) come back as NDArrays, cast or not; NDArrays already
    right are shared."""
    kept = mx.nd.ones((3,))
    params = {"w": np.full((4, 4), 1.5, np.float32), "b": np.zeros(4, np.float32), "k": kept}
    out = recast_params(params, {"w": "bfloat16"})
    assert isinstance(out["w"], mx.nd.NDArray) and array_dtype(out["w"]) == "bfloat16"
    assert isinstance(out["b"], mx.nd.NDArray) and array_dtype(out["b"]) == "float32"
    assert out["k"] is kept
    assert cast_array(out["w"], "float32").asnumpy().tolist() == [[1.5] * 4] * 4
