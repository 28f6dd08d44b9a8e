"""fp16 / bf16 emulation: every tensor the converted graph holds in low precision is rounded."""
import json

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.convert import convert_model_full
from mxnet_amp.emulation import emulate, emulate_model, round_array, round_numpy
from mxnet_amp.errors import TargetDtypeError
from mxnet_amp.mx.io import symbol_json
from mxnet_amp.mx.params import cast_array
from mxnet_amp.options import OpLists, make_options

from helpers import gluoncv_resnet18

# every pass these tests run is checked by verify_graph
pytestmark = [pytest.mark.filterwarnings("ignore:type inference leaves")]

F16, F32 = np.float16, np.float32


def r16(a):
    """numpy's float16 rounding, back in float32."""
    return np.asarray(a, dtype=F32).astype(F16).astype(F32)


def run(sym, args, auxs=None, **inputs):
    """Run ``sym`` the way users do (Symbol.bind); outputs as float32 numpy arrays."""
    values = dict(args)
    values.update({k: mx.nd.array(v, dtype=F32) for k, v in inputs.items()})
    exe = sym.bind(mx.cpu(), values, aux_states=dict(auxs or {}), grad_req="null")
    return [o.asnumpy() for o in exe.forward(is_train=False)]


def emulated(sym, args, auxs=None, target_dtype="float16", **kw):
    csym, cargs, cauxs, _ = convert_model_full(sym, args, auxs or {}, make_options(target_dtype, **kw))
    return emulate_model(csym, cargs, cauxs)


def identity_fc():
    """FullyConnected (a float16 target op) computing y = x for x of shape (n, 1)."""
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=1, no_bias=True, name="fc")
    return sym, {"fc_weight": mx.nd.ones((1, 1))}


def test_70000_through_fp16_target_op_becomes_inf():
    sym, args = identity_fc()
    x = np.array([[70000.0], [-70000.0], [65504.0], [1000.0]], dtype=F32)
    assert np.isfinite(run(sym, args, data=x)[0]).all()        # float32 holds it
    out = run(*emulated(sym, args), data=x)[0].ravel()
    assert out[0] == np.inf and out[1] == -np.inf
    assert out[2] == 65504.0 and out[3] == 1000.0


def test_overflow_of_an_op_output_becomes_inf():
    # inputs fit float16; the product does not, so the rounded output overflows
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, no_bias=True, name="fc")
    args = {"fc_weight": mx.nd.array([[100.0, 100.0], [1.0, 1.0]])}
    x = np.array([[400.0, 400.0]], dtype=F32)
    assert run(sym, args, data=x)[0].tolist() == [[80000.0, 800.0]]
    assert run(*emulated(sym, args), data=x)[0].tolist() == [[np.inf, 800.0]]


def test_1e8_underflows_to_zero_and_subnormals_survive():
    sym, args = identity_fc()
    x = np.array([[1e-8], [-1e-8], [2.0 ** -25], [6e-8], [1e-5], [1.0]], dtype=F32)
    out = run(*emulated(sym, args), data=x)[0].ravel()
    assert out[0] == 0 and out[1] == 0 and out[2] == 0             # 2**-25 ties to even: 0
    assert out[3] == np.float32(2.0 ** -24)                         # smallest subnormal
    np.testing.assert_array_equal(out, r16(x).ravel())              # subnormal 1e-5 as numpy
    assert out[4] != np.float32(1e-5)


def test_bf16_emulation_overflow_and_flush():
    sym, args = identity_fc()
    x = np.array([[3.4e38], [1e-39], [1.00390625], [1.01171875], [3.0e38]], dtype=F32)
    out = run(*emulated(sym, args, target_dtype="bfloat16"), data=x)[0].ravel()
    assert out[0] == np.inf                  # beyond bfloat16's largest finite 3.3895e38
    assert out[1] == 0                       # bfloat16 subnormals flush to zero
    assert out[2] == 1.0 and out[3] == 1.015625   # ties to even
    assert np.isfinite(out[4])


def test_small_fc_matches_numpy_float16_rounding():
    rng = np.random.RandomState(0)
    x = rng.randn(6, 10).astype(F32) * 3
    w1, b1 = rng.randn(7, 10).astype(F32), rng.randn(7).astype(F32)
    w2, b2 = rng.randn(5, 7).astype(F32) * 0.3, rng.randn(5).astype(F32)
    h = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=7, name="fc1")
    h = mx.sym.Activation(h, act_type="relu", name="relu1")
    sym = mx.sym.FullyConnected(h, num_hidden=5, name="fc2")
    args = {k: mx.nd.array(v) for k, v in
            {"fc1_weight": w1, "fc1_bias": b1, "fc2_weight": w2, "fc2_bias": b2}.items()}
    out = run(*emulated(sym, args), data=x)[0]

    # numpy: inputs and weights rounded, float32-exact products (float64 here) rounded, then
    # the bias added and the sum rounded again, as MXNet's GPU FullyConnected does (the
    # emulation's default for float16; tests/test_emulation_bias.py)
    def fc(a, w, b):
        return r16(r16(r16(a).astype(np.float64) @ r16(w).astype(np.float64).T) + r16(b))
    want = fc(np.maximum(fc(x, w1, b1), 0), w2, b2)
    np.testing.assert_array_equal(r16(out), out)    # every output is a float16 value
    # float32 accumulation order can move a value across a rounding boundary: 1 ulp at most
    ulp = np.spacing(np.abs(want).astype(F16)).astype(F32)
    assert (np.abs(out - want) <= ulp).all()
    assert np.mean(out == want) >= 0.9
    fp32 = run(sym, args, data=x)[0]
    assert not np.array_equal(out, fp32)            # the emulation did round something


def test_fp32_nodes_are_not_rounded():
    # softmax is a float32 op: its output must keep float32's digits
    h = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=6, name="fc")
    sym = mx.sym.softmax(h, name="sm")
    rng = np.random.RandomState(1)
    args = {"fc_weight": mx.nd.array(rng.randn(6, 4)), "fc_bias": mx.nd.zeros(6)}
    out = run(*emulated(sym, args), data=rng.randn(3, 4))[0]
    assert not np.array_equal(r16(out), out)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-6)


def test_round_array_matches_amp_cast_and_numpy():
    rng = np.random.RandomState(2)
    x = (rng.randn(20000) * 10.0 ** rng.uniform(-45, 39, 20000)).astype(F32)
    bits = rng.randint(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32).view(F32)
    special = np.array([0, -0.0, np.inf, -np.inf, np.nan, 3.3895314e38, 3.39e38, 1e-45,
                        65504, 65519, 65520, 2.0 ** -25, 2.0 ** -24, 1.00390625], dtype=F32)
    x = mx.nd.array(np.concatenate([x, bits, special]))
    for dtype in ("float16", "bfloat16"):
        got = round_array(x, dtype)
        assert got.dtype == np.float32
        ref = cast_array(cast_array(x, dtype), "float32").asnumpy()
        np.testing.assert_array_equal(got.asnumpy().view(np.uint32), ref.view(np.uint32))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(round_array(x, "float16").asnumpy(), r16(x.asnumpy()))


def test_round_numpy_is_round_array_without_ndarrays():
    rng = np.random.RandomState(4)
    bits = rng.randint(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32).view(F32)
    special = np.array([0, -0.0, np.inf, -np.inf, np.nan, 65519, 65520, 1e-45, -1e-40], dtype=F32)
    values = np.concatenate([bits, special])
    before = values.copy()
    for dtype in ("float16", "bfloat16"):
        got = round_numpy(values, dtype)
        assert got.dtype == F32 and got is not values
        want = round_array(mx.nd.array(values), dtype).asnumpy()
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(values.view(np.uint32), before.view(np.uint32))  # not rounded in place
    with pytest.raises(TargetDtypeError, match="float32"):
        round_numpy(values, "float32")


def test_weights_stored_in_low_precision_emulate_the_same():
    rng = np.random.RandomState(3)
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=5, name="fc")
    args = {"fc_weight": mx.nd.array(rng.randn(5, 8)), "fc_bias": mx.nd.array(rng.randn(5))}
    x = rng.randn(4, 8)
    a = run(*emulated(sym, args), data=x)[0]
    b = run(*emulated(sym, args, cast_optional_params=True), data=x)[0]
    np.testing.assert_array_equal(a, b)


def _two_fc(seed: int):
    """FullyConnected -> relu -> FullyConnected with random weights, and an input batch."""
    rng = np.random.RandomState(seed)
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=6, name="fc")
    sym = mx.sym.FullyConnected(mx.sym.Activation(sym, act_type="relu"), num_hidden=3, name="fc2")
    args = {"fc_weight": mx.nd.array(rng.randn(6, 8)), "fc_bias": mx.nd.array(rng.randn(6)),
            "fc2_weight": mx.nd.array(rng.randn(3, 6)), "fc2_bias": mx.nd.array(rng.randn(3))}
    return sym, args, rng.randn(4, 8)


@pytest.mark.parametrize("target_dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("cast_optional_params", [False, True])
def test_emulation_without_param_copies_gives_the_same_outputs(target_dtype, cast_optional_params):
    """copy_params=False returns the given arrays, low precision ones
    too, and rounds / widens weights in the graph: bit for bit the same outputs."""
    sym, args, x = _two_fc(seed=5)
    csym, cargs, cauxs, _ = convert_model_full(
        sym, args, {}, make_options(target_dtype, cast_optional_params=cast_optional_params))
    esym, eargs, eauxs = emulate_model(csym, cargs, cauxs, copy_params=False)
    assert all(eargs[k] is cargs[k] for k in eargs)          # no copies
    assert set(eargs) == set(esym.list_arguments()) - {"data"}
    if cast_optional_params:
        assert {str(np.dtype(v.dtype)) for v in eargs.values()} != {"float32"}
    lean = run(esym, eargs, eauxs, data=x)[0]
    np.testing.assert_array_equal(lean, run(*emulate_model(csym, cargs, cauxs), data=x)[0])


@pytest.mark.parametrize("target_dtype", ["float16", "bfloat16"])
def test_emulation_from_float32_originals_gives_the_same_outputs(target_dtype):
    """stored_dtypes (the automatic mode's): the caller's float32 weights, rounded in the
    graph as the conversion would store them; no copies, bit for bit the same outputs."""
    sym, args, x = _two_fc(seed=6)
    csym, cargs, cauxs, conv = convert_model_full(sym, args, {}, make_options(target_dtype))
    usym, uargs, uauxs, _ = convert_model_full(sym, args, {}, make_options(target_dtype),
                                               cast_params=False)
    assert all(uargs[k] is args[k] for k in args)            # float32, uncast
    esym, eargs, eauxs = emulate_model(usym, uargs, uauxs, stored_dtypes=conv.arg_dtypes)
    assert all(eargs[k] is args[k] for k in eargs)          # no copies
    got = run(esym, eargs, eauxs, data=x)[0]
    np.testing.assert_array_equal(got, run(*emulate_model(csym, cargs, cauxs), data=x)[0])
    with pytest.raises(ValueError, match="float32 originals"):
        emulate_model(csym, cargs, cauxs, stored_dtypes=conv.arg_dtypes)


def test_emulate_model_leaves_inputs_alone_and_returns_exactly_the_params_it_reads():
    sym, args = identity_fc()
    csym, cargs, cauxs, _ = convert_model_full(sym, args, {})
    before = symbol_json(csym)
    kept = {k: v.asnumpy().copy() for k, v in cargs.items()}
    esym, eargs, eauxs = emulate(csym, dict(cargs), dict(cauxs))
    assert symbol_json(csym) == before
    assert {k: v.asnumpy().tolist() for k, v in cargs.items()} == {k: v.tolist() for k, v in kept.items()}
    assert set(eargs) == set(esym.list_arguments()) - {"data"}
    assert set(eauxs) == set(esym.list_auxiliary_states())
    assert all(v.dtype == np.float32 for v in eargs.values())
    ops = {n["op"] for n in json.loads(symbol_json(esym))["nodes"]}
    assert "amp_cast" in ops


@pytest.fixture(scope="module")
def resnet18():
    sym, args, auxs, x = gluoncv_resnet18()
    return sym, args, auxs, x.asnumpy()


@pytest.mark.parametrize("target_dtype, rel", [("float16", 5e-3), ("bfloat16", 5e-2)])
def test_emulated_resnet18_is_finite_and_close_to_fp32(resnet18, target_dtype, rel):
    sym, args, auxs, x = resnet18
    ref = run(sym, args, auxs, data=x)[0]
    out = run(*emulated(sym, args, auxs, target_dtype=target_dtype), data=x)[0]
    assert np.isfinite(out).all()
    err = np.abs(out - ref).max() / np.abs(ref).max()
    assert 0 < err < rel, err                      # rounded, and still close


def test_emulation_matches_native_bf16(native_bf16):
    if not native_bf16:
        pytest.skip("this CPU cannot execute bf16 FullyConnected (oneDNN needs avx512)")
    rng = np.random.RandomState(4)
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=16, name="fc")
    args = {"fc_weight": mx.nd.array(rng.randn(16, 32)), "fc_bias": mx.nd.array(rng.randn(16))}
    x = rng.randn(8, 32)
    csym, cargs, cauxs, _ = convert_model_full(sym, args, {}, make_options("bfloat16"))
    native = run(csym, cargs, cauxs, data=x)[0]
    emu = run(*emulate_model(csym, cargs, cauxs), data=x)[0]
    ulp = np.abs(native) * 2.0 ** -7
    assert (np.abs(native - emu) <= ulp + 1e-30).all()


# ------------------------------------------------------------------ MXNet's CPU bf16 kernels

def _fc_then_elementwise():
    """A bf16 FullyConnected (oneDNN: rounds to nearest) feeding ops MXNet runs with its own
    kernels (truncate to bf16): a scalar multiply whose scalar bf16 cannot hold, a scalar
    add, a product, a sigmoid."""
    rng = np.random.RandomState(7)
    y = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=16, name="fc")
    outs = [mx.sym._internal._mul_scalar(y, scalar=1.37, name="scaled"),
            mx.sym._internal._plus_scalar(y, scalar=3.0, name="shifted"),
            mx.sym.elemwise_mul(y, y, name="squared"), mx.sym.sigmoid(y, name="sig")]
    args = {"fc_weight": mx.nd.array(rng.randn(16, 32)), "fc_bias": mx.nd.array(rng.randn(16))}
    return mx.sym.Group(outs), args, rng.randn(64, 32).astype(F32)


# the bfloat16 list keeps these in float32 (MXNet's generic bf16 kernels truncate and are
# slow); moved to widest so they run in bf16 here, as a user's override would
_LOW_ELEMENTWISE = OpLists(widest_dtype_ops=["_mul_scalar", "_plus_scalar", "elemwise_mul"])


def _ops_by_name(sym):
    return {n["name"]: n for n in json.loads(symbol_json(sym))["nodes"]}


def test_mxnet_cpu_rounding_truncates_outside_onednn_and_truncates_scalars():
    """rounding='mxnet-cpu': the bf16 outputs of ops outside oneDNN round through ``Cast``
    (which truncates), oneDNN ops through ``amp_cast`` (nearest even), and a scalar bf16
    cannot hold is the truncated value MXNet's kernel multiplies by."""
    sym, args, _ = _fc_then_elementwise()
    csym, cargs, cauxs, _ = convert_model_full(sym, args, {}, make_options("bfloat16", _LOW_ELEMENTWISE))
    nodes = _ops_by_name(emulate_model(csym, cargs, cauxs, rounding="mxnet-cpu")[0])
    assert nodes["scaled_round_bfloat16"]["op"] == "Cast"
    assert nodes["squared_round_bfloat16"]["op"] == "Cast"
    assert nodes["fc_round_bfloat16"]["op"] == "amp_cast"
    assert float(nodes["scaled"]["attrs"]["scalar"]) == 1.3671875      # 1.37 truncated
    assert float(nodes["shifted"]["attrs"]["scalar"]) == 3.0
    nearest = _ops_by_name(emulate_model(csym, cargs, cauxs)[0])
    assert nearest["scaled_round_bfloat16"]["op"] == "amp_cast"
    assert float(nearest["scaled"]["attrs"]["scalar"]) == 1.37


def test_mxnet_cpu_rounding_leaves_float16_alone():
    sym, args, _ = _fc_then_elementwise()
    csym, cargs, cauxs, _ = convert_model_full(sym, args, {}, make_options("float16"))
    assert symbol_json(emulate_model(csym, cargs, cauxs, rounding="mxnet-cpu")[0]) == \
        symbol_json(emulate_model(csym, cargs, cauxs)[0])


def test_unknown_rounding_is_refused():
    sym, args, _ = _fc_then_elementwise()
    csym, cargs, cauxs, _ = convert_model_full(sym, args, {}, make_options("bfloat16", _LOW_ELEMENTWISE))
    with pytest.raises(ValueError, match="rounding"):
        emulate_model(csym, cargs, cauxs, rounding="stochastic")


def _run_native(sym, args, x):
    """Outputs of a bf16 model run natively, widened to float32 by MXNet's own cast."""
    from mxnet_amp.ir.graph import Entry, Graph, Node
    from mxnet_amp.mx.io import graph_from_symbol, graph_to_symbol
    from types import MappingProxyType
    g = graph_from_symbol(sym)
    nodes = list(g.nodes)
    heads = []
    for k, h in enumerate(g.heads):
        nodes.append(Node("amp_cast", f"out{k}_f32", (h,), MappingProxyType({"dtype": "float32"})))
        heads.append(Entry(len(nodes) - 1))
    return run(graph_to_symbol(Graph(tuple(nodes), tuple(heads), g.attrs)), args, data=x)


def test_mxnet_cpu_rounding_matches_native_bf16_bit_for_bit(native_bf16):
    """On a CPU that runs bf16, the 'mxnet-cpu' emulation equals MXNet's native run exactly,
    where the default (nearest) emulation does not: the native kernels truncate."""
    if not native_bf16:
        pytest.skip("this CPU cannot execute bf16 FullyConnected (oneDNN needs avx512)")
    sym, args, x = _fc_then_elementwise()
    csym, cargs, cauxs, _ = convert_model_full(sym, args, {}, make_options("bfloat16", _LOW_ELEMENTWISE))
    native = _run_native(csym, cargs, x)
    trunc = run(*emulate_model(csym, cargs, cauxs, rounding="mxnet-cpu")[:2], data=x)
    nearest = run(*emulate_model(csym, cargs, cauxs)[:2], data=x)
    for k, (n, t) in enumerate(zip(native, trunc)):
        np.testing.assert_array_equal(n, t, err_msg=f"output {k}")
    assert any((n != e).mean() > 0.2 for n, e in zip(native, nearest))
