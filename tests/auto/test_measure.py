"""Measuring (mxnet_amp.auto.measure): tensor ranges seen from a low precision dtype, and
converted outputs judged against the float32 reference (check_outputs)."""
import math

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.auto import DTYPE_LIMITS, check_outputs, tensor_range


def test_tensor_range():
    lim = DTYPE_LIMITS["float16"]
    r = tensor_range(np.array([0, 1e-9, -1e-9, 1e-6, 7e4, -3], dtype=np.float32), lim)
    assert r.max_abs == np.float32(7e4)
    assert r.flushed == pytest.approx(2 / 5) and r.subnormal == pytest.approx(1 / 5)
    # worked through in chunks (bounded temporaries on large weights): the same figures
    x = np.random.RandomState(0).standard_normal(1001).astype(np.float32) * 1e-5
    x[[3, 700]] = [7e4, 0]
    assert tensor_range(x, lim, chunk=64) == tensor_range(x, lim)
    x[500] = np.nan
    assert math.isnan(tensor_range(x, lim, chunk=64).max_abs)


def test_range_check_judges_the_finite_values_not_float32s_own_inf_and_nan():
    """Issue 24: inf or nan in the float32 run is no overflow of the low precision dtype
    (float32 lost those values itself; keeping the node in float32 changes nothing): a
    tensor is flagged by its largest finite value, which a nan beside it no longer hides."""
    from mxnet_amp.auto.measure import offending_tensors
    lim = DTYPE_LIMITS["float16"]
    overflow = np.array([7e4, 1.0], dtype=np.float32)
    stats = {(0, 0): tensor_range(overflow, lim),
             (1, 0): tensor_range(np.append(overflow, np.nan), lim),   # 7e4 beside a nan
             (2, 0): tensor_range(np.array([np.nan, 1.0], dtype=np.float32), lim),
             (3, 0): tensor_range(np.array([-np.inf, 1.0], dtype=np.float32), lim),
             (4, 0): tensor_range(np.array([1.0, 2.0], dtype=np.float32), lim)}
    assert stats[(3, 0)].max_abs == np.inf and stats[(3, 0)].finite_max == 1.0
    found = offending_tensors(stats, lim, underflow_fraction=0.1)
    assert [(key, reason, value) for key, reason, value in found] == [
        ((0, 0), "overflow", np.float32(7e4)), ((1, 0), "overflow", np.float32(7e4))]


def test_check_does_not_blame_low_precision_for_float32s_own_inf():
    """Issue 24 (YOLOv3 with random weights): elements where the float32 reference is inf
    or nan are not judged; the others are, and a non-finite output where float32 is finite
    still fails."""
    ref = np.array([[np.inf, 1.0, 2.0], [np.nan, 3.0, 4.0]], dtype=np.float32)
    out = np.array([[65504.0, 1.001, 2.0], [7.0, 3.0, 4.002]], dtype=np.float32)
    check = check_outputs([ref], [out.reshape(1, 2, 3)[0]])
    assert check.passed and check.relative_error < 1e-3 and math.isfinite(check.max_abs_error)
    out[0, 1] = np.inf
    assert not check_outputs([ref], [out]).passed
    out[0, 1] = 1.2                                 # a finite element beyond the tolerance
    assert not check_outputs([ref], [out]).passed


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_tensor_range_of_an_ndarray_matches_numpy(dtype):
    """Weights' ranges are read from the NDArray a chunk at a time (no whole copy of a large
    weight beside the model): the same figures as from the numpy array."""
    lim = DTYPE_LIMITS["float16"]
    x = np.random.RandomState(1).standard_normal((37, 29)).astype(np.float32) * 1e-5
    x[4, 5], x[30, 1] = 6e4, 0
    nd = mx.nd.array(x, dtype=dtype)
    assert tensor_range(nd, lim, chunk=100) == tensor_range(nd.asnumpy(), lim)


def test_default_check_judges_error_against_each_outputs_scale():
    """Small logits that decide nothing may be off by more than allclose allows."""
    ref = np.array([[20.0, 1e-3, -3.0]], dtype=np.float32)
    out = np.array([[20.05, 5e-3, -3.01]], dtype=np.float32)
    assert not check_outputs([ref], [out], "float16", rtol=1e-2, atol=1e-3).passed
    check = check_outputs([ref], [out], "float16")
    assert check.criterion == "scale" and check.passed
    assert check.relative_error == pytest.approx(0.05 / 20, rel=1e-3)
    assert check.tolerance_ratio == pytest.approx(0.05 / 20 / 1e-2, rel=1e-3)
    assert (check.top1_flips, check.top1_rows) == (0, 1)
    # per output: an error of 0.1 on an output of scale 1 fails beside one of scale 1000
    big = np.full((2, 3), 1000.0, dtype=np.float32)
    small = np.ones((4,), dtype=np.float32)
    assert check_outputs([big, small], [big, small + 0.001], "float16").passed
    assert not check_outputs([big, small], [big, small + 0.1], "float16").passed
    # bfloat16's bound is wider
    assert check_outputs([small], [small + 0.04], "bfloat16").passed


def test_default_check_needs_the_top1_class_except_on_near_ties():
    ref = np.array([[10.0, 8.5, 0.0], [10.0, 9.8, 0.0]], dtype=np.float32)
    # row 0 flips with a float32 margin of 1.5 (beyond 0.1 x scale 10): a changed decision
    out = np.array([[9.2, 9.3, 0.0], [10.0, 9.8, 0.0]], dtype=np.float32)
    check = check_outputs([ref], [out], tolerance=0.1)
    assert check.relative_error <= 0.1 and check.top1_flips == 1 and not check.passed
    # row 1 flips with a margin of 0.2: within the tolerance, a near-tie, allowed
    out = np.array([[10.0, 8.5, 0.0], [9.85, 9.9, 0.0]], dtype=np.float32)
    check = check_outputs([ref], [out], tolerance=0.1)
    assert check.top1_flips == 0 and check.passed


def test_check_fails_non_finite_outputs_and_accepts_zero_outputs():
    ref = np.array([[1.0, 2.0]], dtype=np.float32)
    out = np.array([[np.inf, 2.0]], dtype=np.float32)
    for kw in ({}, {"rtol": 1e-2}):
        check = check_outputs([ref], [out], **kw)
        assert not check.passed and check.tolerance_ratio == math.inf
    zero = np.zeros((3,), dtype=np.float32)
    assert check_outputs([zero], [zero.copy()]).passed
    assert check_outputs([ref], [ref.copy()], rtol=0, atol=0).criterion == "allclose"


def test_allclose_flags_nan_and_inf_where_fp32_is_finite_even_with_atol_zero():
    # relu-like outputs hold exact zeros: with atol=0 their 0/0 must not hide the other elements
    ref = np.array([[0.0, 1.0, 2.0]], dtype=np.float32)
    for bad in (np.nan, np.inf):
        out = np.array([[0.0, bad, 2.0]], dtype=np.float32)
        for rtol, atol in ((1e-2, 0.0), (0.0, 0.0), (1e-2, 1e-3)):
            check = check_outputs([ref], [out], rtol=rtol, atol=atol)
            assert not check.passed and check.tolerance_ratio == math.inf, (bad, rtol, atol)
    assert not check_outputs([ref], [ref + [[0.0, 0.5, 0.0]]], rtol=1e-2, atol=0).passed
    same = check_outputs([ref], [ref.copy()], rtol=0, atol=0)
    assert same.passed and same.tolerance_ratio == 0
