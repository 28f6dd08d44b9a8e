"""Validation-driven automatic mixed precision (mxnet_amp.auto)."""
import io
import json
import math
import os
import sys

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.auto import (DTYPE_LIMITS, auto_convert_block, auto_convert_model,
                            check_outputs, tensor_range)
from mxnet_amp.convert import convert_model
from mxnet_amp.emulation import emulate_model
from mxnet_amp.errors import GraphError
from mxnet_amp.io import symbol_json

from helpers import assert_dtype_tags, gluoncv_resnet18

pytestmark = pytest.mark.filterwarnings("ignore:type inference leaves")


def fc(x, name, n):
    return mx.sym.FullyConnected(x, num_hidden=n, name=name)


def nd(d):
    return {k: mx.nd.array(v) for k, v in d.items()}


def run(sym, args, auxs, x):
    exe = sym.bind(mx.cpu(), {**args, "data": mx.nd.array(x)}, aux_states=dict(auxs), grad_req="null")
    return exe.forward(is_train=False)[0].asnumpy()


def clean_branch(d, rng, args, prefix="b"):
    h = mx.sym.Activation(fc(d, f"fc_{prefix}", 8), act_type="relu", name=f"relu_{prefix}")
    args.update({f"fc_{prefix}_weight": rng.uniform(-1, 1, (8, 16)), f"fc_{prefix}_bias": np.zeros(8),
                 f"fc_{prefix}2_weight": rng.uniform(-1, 1, (4, 8)), f"fc_{prefix}2_bias": np.zeros(4)})
    return fc(h, f"fc_{prefix}2", 4)


def overflow_model(seed=0):
    """Branch a: fc_a's activations reach ~1.2e5 (beyond 65504), fc_a2 scales them back."""
    rng = np.random.RandomState(seed)
    d = mx.sym.var("data")
    args = {"fc_a_weight": rng.uniform(0.5, 1, (8, 16)) * 2e4, "fc_a_bias": np.zeros(8),
            "fc_a2_weight": rng.uniform(-1, 1, (4, 8)) * 1e-4, "fc_a2_bias": np.zeros(4)}
    a = fc(mx.sym.Activation(fc(d, "fc_a", 8), act_type="relu", name="relu_a"), "fc_a2", 4)
    out = mx.sym.elemwise_add(a, clean_branch(d, rng, args), name="add")
    return out, nd(args), rng.uniform(0, 1, (2, 16)).astype(np.float32)


def underflow_model(seed=0):
    """Branch u: fc_u's outputs are ~1e-9 (flushed to zero in fp16), then rescaled by 1e9."""
    rng = np.random.RandomState(seed)
    d = mx.sym.var("data")
    args = {"fc_u_weight": rng.uniform(0.5, 1, (4, 16)) * 1e-9, "fc_u_bias": np.zeros(4)}
    u = mx.sym._internal._mul_scalar(fc(d, "fc_u", 4), scalar=1e9, name="rescale")
    out = mx.sym.elemwise_add(u, clean_branch(d, rng, args), name="add")
    return out, nd(args), rng.uniform(0, 1, (2, 16)).astype(np.float32)


def cancellation_model(seed=0, depth=6):
    """fc_c outputs 2048 + ~0.05: float16's spacing at 2048 is 2, so subtracting 2048 loses
    everything. No tensor is out of range: only the accuracy search can find fc_c."""
    rng = np.random.RandomState(seed)
    d = mx.sym.var("data")
    args = {"fc_c_weight": rng.uniform(0, 0.01, (4, 16)), "fc_c_bias": np.full(4, 2048.0)}
    c = mx.sym._internal._minus_scalar(fc(d, "fc_c", 4), scalar=2048.0, name="shift")
    c = mx.sym._internal._mul_scalar(c, scalar=10.0, name="scale")
    h = d
    for i in range(depth):
        h = mx.sym.Activation(fc(h, f"fc{i}", 16), act_type="tanh", name=f"act{i}")
        args.update({f"fc{i}_weight": rng.uniform(-0.3, 0.3, (16, 16)), f"fc{i}_bias": np.zeros(16)})
    out = mx.sym.Concat(c, h, dim=1, name="cat")
    return out, nd(args), rng.uniform(0, 1, (2, 16)).astype(np.float32)


def clean_model(seed=0):
    rng = np.random.RandomState(seed)
    args = {}
    out = clean_branch(mx.sym.var("data"), rng, args)
    return out, nd(args), rng.uniform(0, 1, (2, 16)).astype(np.float32)


def within_tolerance(report, sym, args, auxs, x, ref):
    out = run(*emulate_model(sym, args, auxs), x)
    return np.isfinite(out).all() and check_outputs([ref], [out], report.target_dtype,
                                                    report.tolerance).passed


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


def test_overflow_branch_gets_exactly_its_offending_nodes_excluded():
    sym, args, x = overflow_model()
    ref = run(sym, args, {}, x)
    plain = run(*emulate_model(*convert_model(sym, args, {})), x)
    assert not np.isfinite(plain).all()                  # the plain conversion overflows
    new_sym, new_args, new_auxs, report = auto_convert_model(sym, args, {}, x, quiet=True)
    assert_dtype_tags(new_sym, new_args, new_auxs)
    kept = {k.name: k for k in report.kept_fp32}
    # fc_a produces the overflow; fc_a2 would cast relu_a's overflowing output to fp16
    assert set(kept) == {"fc_a", "fc_a2"}
    assert all(k.reason == "overflow" and k.value > 65504 for k in kept.values())
    assert kept["fc_a2"].tensor == "relu_a"
    assert report.executions == 2
    assert report.validated
    assert within_tolerance(report, new_sym, new_args, new_auxs, x, ref)
    # the report exposes the returned model's conversion: its exclusions and decisions
    assert report.conversion.excluded == frozenset(report.excluded_sym_names) == {"fc_a", "fc_a2"}
    assert report.conversion.result.decisions["fc_a"].reason.startswith("excluded by name")
    assert report.conversion.symbol.tojson(remove_amp_cast=False) == new_sym.tojson(remove_amp_cast=False)
    assert "conversion" not in report.to_dict()


def test_underflow_branch_gets_exactly_its_offending_node_excluded():
    sym, args, x = underflow_model()
    ref = run(sym, args, {}, x)
    # fc_u's weights (~1e-9) underflow float16 too: unguarded, so that auto's own search
    # meets the underflow of its outputs
    with pytest.warns(UserWarning, match="fc_u_weight underflows float16"):
        plain = run(*emulate_model(*convert_model(sym, args, {}, guard_weight_range=False)), x)
    assert not check_outputs([ref], [plain], "float16").passed
    new_sym, new_args, new_auxs, report = auto_convert_model(sym, args, {}, x, quiet=True,
                                                             guard_weight_range=False)
    assert [(k.name, k.reason) for k in report.kept_fp32] == [("fc_u", "underflow")]
    assert report.kept_fp32[0].value == 1.0                # every value flushed
    assert report.executions == 2 and report.validated
    assert within_tolerance(report, new_sym, new_args, new_auxs, x, ref)


def test_accuracy_culprit_found_by_bounded_bisection():
    sym, args, x = cancellation_model()
    new_sym, new_args, new_auxs, report = auto_convert_model(sym, args, {}, x, quiet=True,
                                                             search="bisection")
    assert [(k.name, k.reason) for k in report.kept_fp32] == [("fc_c", "accuracy")]
    assert report.kept_fp32[0].value > 1          # its exclusion removed > 1x tolerance
    n = report.op_nodes                            # candidates: every node ran in fp16
    k = 1
    assert report.executions <= 3 + k * (math.ceil(math.log2(n)) + 1)
    assert report.validated
    assert within_tolerance(report, new_sym, new_args, new_auxs, x, run(sym, args, {}, x))


def test_accuracy_culprit_found_by_one_attribution_run_and_validated():
    """Reference, check, attribution, validation: 4 executions; the reason says what was
    compared, with units."""
    sym, args, x = cancellation_model()
    new_sym, new_args, new_auxs, report = auto_convert_model(sym, args, {}, x, quiet=True)
    assert [(k.name, k.reason) for k in report.kept_fp32] == [("fc_c", "accuracy")]
    assert [s.kind for s in report.steps] == ["reference", "check", "attribution", "validate"]
    assert report.validated and report.executions == 4
    assert report.attribution[0].name == "fc_c"
    assert report.attribution[0].contribution > 10 * report.attribution[1].contribution
    assert "relative error" in report.kept_fp32[0].detail
    assert "> tolerance 0.01" in report.kept_fp32[0].detail
    assert within_tolerance(report, new_sym, new_args, new_auxs, x, run(sym, args, {}, x))


@pytest.mark.parametrize("shape,n,k", [("chain", 150, 3), ("dag", 150, 4)])
def test_planted_culprits_found_exactly_in_at_most_2_plus_k_plus_1(shape, n, k):
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks"))
    from planted_culprits import planted
    p = planted(n, k, shape, seed=3)
    assert p.op_nodes == n and len(p.culprits) == k
    *_, report = auto_convert_model(p.sym, p.arg_params, {}, p.sample, quiet=True)
    assert sorted(x.name for x in report.by_reason("accuracy")) == sorted(p.culprits)
    assert report.validated and report.executions <= 2 + k + 1


def test_overflow_culprits_need_no_attribution_run():
    sym, args, x = overflow_model()
    *_, report = auto_convert_model(sym, args, {}, x, quiet=True)
    assert report.executions == 2 and not report.attribution
    assert report.kept_fp32[0].detail.startswith("overflow: max |x| of ")
    assert "> 65504" in report.kept_fp32[0].detail


def test_execution_budget_keeps_a_configuration_seen_to_pass():
    sym, args, x = cancellation_model()
    *_, report = auto_convert_model(sym, args, {}, x, quiet=True, max_executions=4,
                                    search="bisection")
    assert report.executions <= 4
    assert report.validated                        # the last passing superset is returned
    budget = report.by_reason("budget")
    assert len(budget) > 1                          # undecided candidates, named
    assert [k.name for k in budget][:3] == ["fc_c", "shift", "scale"]   # candidate order
    assert report.low_precision_nodes <= report.op_nodes - len(report.kept_fp32)
    assert any("budget" in n for n in report.notes)


def test_results_are_deterministic_for_a_fixed_seed():
    reports = []
    for _ in range(2):
        sym, args, x = cancellation_model(seed=5)
        *_, report = auto_convert_model(sym, args, {}, x, quiet=True)
        reports.append(json.dumps(report.to_dict(), sort_keys=True))
    assert reports[0] == reports[1]
    sym, args, x = overflow_model(seed=5)
    a = auto_convert_model(sym, args, {}, x, quiet=True)[3].to_dict()
    b = auto_convert_model(sym, args, {}, x, quiet=True)[3].to_dict()
    assert a == b


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


def test_bf16_uses_native_execution_only_where_it_runs(native_bf16):
    sym, args, x = overflow_model()
    *_, report = auto_convert_model(sym, args, {}, x, target_dtype="bfloat16", quiet=True)
    assert report.execution == ("native" if native_bf16 else "emulated")
    if not native_bf16:
        assert any("emulation" in n for n in report.notes)
    # 1.2e5 is nothing for bfloat16's range: nothing to exclude
    assert report.kept_fp32 == () and report.validated and report.executions == 2


def test_gpu_context_runs_fp16_natively():
    if mx.context.num_gpus() == 0:
        pytest.skip("no GPU: real fp16 execution needs one")
    sym, args, x = overflow_model()
    *_, report = auto_convert_model(sym, args, {}, x, ctx=mx.gpu(0), quiet=True)
    assert report.execution == "native"
    assert {k.name for k in report.kept_fp32} == {"fc_a", "fc_a2"} and report.validated


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


def test_report_is_plain_data():
    sym, args, x = overflow_model()
    *_, report = auto_convert_model(sym, args, {}, x, quiet=True)
    d = json.loads(json.dumps(report.to_dict()))
    assert d["executions"] == 2 and d["execution"] == "emulated"
    assert {k["name"] for k in d["kept_fp32"]} == {"fc_a", "fc_a2"}
    assert report.excluded_sym_names == ["fc_a", "fc_a2"]
    assert "fc_a (FullyConnected): overflow" in report.summary()
    with pytest.raises(Exception):
        report.executions = 0                       # frozen


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
    assert report.kept_fp32 == () and report.validated and report.executions == 2
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


def test_metric_keeps_a_node_in_float32_only_where_the_metric_drops():
    """The cancellation model's output columns 0-3 come from fc_c (wrecked in float16),
    4-19 from the clean tanh stack. A metric of the clean columns does not drop: nothing is
    kept (the default check keeps fc_c). One of fc_c's columns drops: fc_c is kept, for the
    metric."""
    sym, args, x = cancellation_model()
    ref = run(sym, args, {}, x)

    def clean(outs):
        return -float(np.abs(outs[0][:, 4:] - ref[:, 4:]).max())

    def wrecked(outs):
        return -float(np.abs(outs[0][:, :4] - ref[:, :4]).max())
    *_, report = auto_convert_model(sym, args, {}, x, quiet=True, metric=clean, max_drop=0.01)
    assert report.kept_fp32 == () and report.executions == 2 and report.criterion == "metric"
    assert report.metric["name"] == "clean" and report.metric["drop"] <= 0.01
    *_, report = auto_convert_model(sym, args, {}, x, quiet=True, metric=wrecked, max_drop=0.01)
    assert [(k.name, k.reason) for k in report.kept_fp32] == [("fc_c", "metric")]
    assert report.validated and "wrecked" in report.criterion_text()


def test_metric_arguments_are_checked():
    sym, args, x = clean_model()
    with pytest.raises(ValueError, match="max_drop"):
        auto_convert_model(sym, args, {}, x, metric=lambda o: 0.0)
    with pytest.raises(ValueError, match="not both"):
        auto_convert_model(sym, args, {}, x, metric=lambda o: 0.0, max_drop=1,
                           validate=lambda r, o: True)
    with pytest.raises(ValueError, match="drop must be"):
        auto_convert_model(sym, args, {}, x, metric=lambda o: 0.0, max_drop=1, drop="percent")


def nms_model():
    """A detector's tail: a FullyConnected gives 8 boxes ``[class, score, x1, y1, x2, y2]``
    whose scores differ by 1e-5 (all 0.5 in float16: tied), then box_nms sorts them by
    score. Rounding reorders the kept boxes; the dense boxes before NMS barely change."""
    d = mx.sym.var("data")
    boxes = mx.sym.reshape(fc(d, "head", 48), shape=(0, 8, 6), name="boxes")
    out = mx.sym.contrib.box_nms(boxes, overlap_thresh=0.5, coord_start=2, score_index=1,
                                 id_index=0, name="nms")
    table = np.array([[0, 0.5 + 1e-5 * i, 10 * i, 0, 10 * i + 5, 5] for i in range(8)])
    args = {"head_weight": np.zeros((48, 4)), "head_bias": table.ravel()}
    return out, nd(args), np.ones((1, 4), np.float32)


def test_outputs_after_nms_are_judged_by_the_dense_tensors_before_them():
    sym, args, x = nms_model()
    ref = run(sym, args, {}, x)
    plain = run(*emulate_model(*convert_model(sym, args, {}, "float16")[:3]), x)
    assert not check_outputs([ref], [plain], "float16").passed   # NMS output reordered
    *_, report = auto_convert_model(sym, args, {}, x, quiet=True)
    assert report.validated and report.executions == 2 and report.kept_fp32 == ()
    note = next(n for n in report.notes if "box_nms" in n)
    assert "dense tensors before them" in note and "boxes" in note
