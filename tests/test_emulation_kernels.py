"""The emulation's roundings by the compiled kernels (issue 41, item 8): the same bits as
MXNet's casts, op by op on probe arrays (ties, subnormals, overflow, NaN payloads, signed
zeros) and through whole emulated models, and MXNet's casts again where the kernels are off.

Where this machine cannot build the kernels (no compiler), the tests that need them skip
and the fallback test still runs."""
import ctypes
import json
import pickle

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.auto.workers import ModelBlob, run_model
from mxnet_amp.convert import convert_model_full
from mxnet_amp.emulation import (_subnormal_flush_sign_mask, emulate_conversion, round_numpy,
                                 rounding_note, with_kernels)
from mxnet_amp.kernels.build import DISABLE_ENV, kernel_state
from mxnet_amp.options import make_options
from mxnet_amp.passes import emulate as emulate_pass

pytestmark = pytest.mark.filterwarnings("ignore:type inference leaves")


@pytest.fixture
def kernels(monkeypatch):
    monkeypatch.delenv(DISABLE_ENV, raising=False)
    state = kernel_state()
    if not state.loaded:
        pytest.skip(f"the kernels are not built here: {state.reason}")
    return state


def _probes():
    """float32 bit patterns where rounding is delicate, and random ones."""
    rng = np.random.default_rng(7)
    special = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001,
                        0xFF800001, 0x7FBFFFFF, 0x7F801FFF, 0x7F802000, 0xFFFFFFFF,
                        0x477FEFFF, 0x477FF000, 0x477FE000, 0xC77FF000,      # around 65504
                        0x33000000, 0x33000001, 0xB3000000, 0x32FFFFFF,      # 2**-25
                        0x387FE000, 0x387FF000, 0x38800000, 0x387FFFFF,      # 2**-14
                        1, 0x807FFFFF, 0x00400000, 0x80000001,               # float32 subnormals
                        0x7F7FFFFF, 0x3F808000, 0x3F818000], dtype=np.uint32)
    # float16 ties: halfway between neighbours, both parities
    h = rng.integers(0, 0x7BFF, size=20_000).astype(np.uint16)
    lo = h.view(np.float16).astype(np.float64)
    hi = (h + 1).astype(np.uint16).view(np.float16).astype(np.float64)
    ties = ((lo + hi) / 2).astype(np.float32).view(np.uint32)
    # bfloat16 ties: the low 16 bits exactly 0x8000
    bf_ties = (rng.integers(0, 2 ** 16, size=20_000).astype(np.uint32) << 16) | 0x8000
    rand = rng.integers(0, 2 ** 32, size=200_000, dtype=np.uint64).astype(np.uint32)
    bits = np.concatenate([special, ties, ties | 0x80000000, bf_ties, rand])
    return bits.view(np.float32)


def _run(nodes, *arrays):
    """The graph of ``nodes`` (JSON dicts) after one variable per array, run by a CachedOp."""
    n = len(arrays)
    sym = mx.sym.load_json(json.dumps({
        "nodes": [{"op": "null", "name": f"x{i}", "inputs": []} for i in range(n)] + nodes,
        "arg_nodes": list(range(n)), "heads": [[n + len(nodes) - 1, 0, 0]],
        "attrs": {"mxnet_version": ["int", 10901]}}))
    out = mx.nd.CachedOp(sym)(*[mx.nd.array(a, dtype="float32") for a in arrays])
    return out.asnumpy().view(np.uint32)


def _casts(low, src, at):
    """The round trip of node ``src``, its first cast at node index ``at``."""
    return [{"op": "amp_cast", "name": f"c{src}", "attrs": {"dtype": low}, "inputs": [[src, 0, 0]]},
            {"op": "amp_cast", "name": f"d{src}", "attrs": {"dtype": "float32"}, "inputs": [[at, 0, 0]]}]


def _attrs(low):
    return {"dtype": low, **({"flush_sign": str(int(bool(_subnormal_flush_sign_mask())))}
                             if low == "bfloat16" else {})}


@pytest.mark.native_bf16
@pytest.mark.parametrize("low", ["float16", "bfloat16"])
def test_the_rounding_op_gives_the_bits_of_the_casts_round_trip(low, kernels):
    """mxnet_amp_round against amp_cast(amp_cast(x, low), float32) on every probe: equal bit
    for bit, NaN payloads and the sign of flushed zeros included (under DNNL_MAX_CPU_ISA=AVX2
    too, where MXNet's own bfloat16 cast flushes to +0); and float16's is numpy's rounding
    wherever the value is no NaN."""
    x = _probes()
    expected = _run(_casts(low, 0, 1), x)
    got = _run([{"op": "mxnet_amp_round", "name": "r", "attrs": _attrs(low), "inputs": [[0, 0, 0]]}], x)
    np.testing.assert_array_equal(got, expected)
    if low == "float16":
        finite = ~np.isnan(x)
        np.testing.assert_array_equal(got[finite], round_numpy(x[finite], low).view(np.uint32))


@pytest.mark.native_bf16
@pytest.mark.parametrize("low", ["float16", "bfloat16"])
def test_the_scalar_rounding_for_cpus_without_f16c_gives_the_same_bits(low, kernels):
    """The library's scalar rounding (what runs where the CPU lacks AVX2/F16C), called
    directly, against the casts' round trip on every probe."""
    lib = ctypes.CDLL(kernels.path)
    x = _probes()
    out = np.empty_like(x)
    flush = int(bool(_subnormal_flush_sign_mask()))
    lib.mxnet_amp_round_scalar(x.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p),
                               ctypes.c_int64(x.size), int(low == "float16"), flush)
    np.testing.assert_array_equal(out.view(np.uint32), _run(_casts(low, 0, 1), x))
    assert lib.mxnet_amp_round_vectorised() in (0, 1)


@pytest.mark.parametrize("low", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape,bias_shape", [((3, 5, 7, 9), (1, 5, 1, 1)), ((4, 37), (37,)),
                                              ((2, 3, 4), (1, 3, 1))])
def test_the_bias_op_gives_the_bits_of_round_add_round(low, shape, bias_shape, kernels):
    """mxnet_amp_round_bias(p, b) against the emulation's bias step made of MXNet's ops:
    round(p), broadcast_add the bias, round again; conv (channel axis 1, a run of 63 per
    channel: vector and scalar tails) and dense (last axis) layouts, probes as products and
    as biases (NaN in either)."""
    rng = np.random.default_rng(1)
    probes = _probes()
    p = rng.choice(probes, size=int(np.prod(shape))).reshape(shape)
    p.flat[:8] = probes[:8]
    b = round_numpy(rng.standard_normal(bias_shape).astype(np.float32) * 4, low)
    b.flat[-1] = np.float32("nan") if low == "float16" else b.flat[-1]
    # nodes: p, b, p's round trip (2, 3), the add (4), its round trip (5, 6)
    step = _casts(low, 0, 2) + [
        {"op": "broadcast_add", "name": "add", "inputs": [[3, 0, 0], [1, 0, 0]]}] + _casts(low, 4, 5)
    expected = _run(step, p, b)
    got = _run([{"op": "mxnet_amp_round_bias", "name": "r", "attrs": _attrs(low),
                 "inputs": [[0, 0, 0], [1, 0, 0]]}], p, b)
    np.testing.assert_array_equal(got, expected)


def _zoo_model(name):
    import zoo
    return zoo.symbol_model(name)


def _bits(outs):
    import zoo
    return zoo.output_bits(outs)


@pytest.mark.native_bf16
@pytest.mark.parametrize("low", ["float16", "bfloat16"])
def test_an_emulated_model_gives_the_same_bits_with_kernels_casts_and_per_op_rounding(
        low, kernels, monkeypatch):
    """resnet18_v1 emulated, as a worker runs it (a ModelBlob unpickled): kernels on, off
    (MXNET_AMP_NO_KERNELS=1), and the per-op reference of tests/test_emulation_exact.py
    (every low precision tensor rounded by its own round trip, weights in the graph, MXNet's
    casts): equal bit for bit."""
    sym, args, auxs, x = _zoo_model("resnet18_v1")
    x = x.copy()
    x[0, 0, :2, :2] = [[7e4, -7e4], [1e-8, -1e-8]]   # overflow to +-inf, flush to +-0
    _, cargs, cauxs, conversion = convert_model_full(sym, args, auxs, make_options(low),
                                                     cast_params=False)
    esym, eargs, eauxs = emulate_conversion(conversion, cargs, cauxs)
    sent = pickle.dumps(ModelBlob("check", esym, {**eargs, **eauxs}, {"data": "float32"}))
    fast = pickle.loads(sent)
    with_k = fast.run({"data": x})
    ran = {n["op"] for n in json.loads(fast._op[2].tojson())["nodes"]}   # the graph it ran
    kept = {n["op"] for n in json.loads(fast.sym.tojson())["nodes"]}     # the model it holds
    assert "mxnet_amp_round" in ran and "mxnet_amp_round" not in kept
    monkeypatch.setenv(DISABLE_ENV, "1")
    without = pickle.loads(sent).run({"data": x})
    monkeypatch.delenv(DISABLE_ENV)
    with monkeypatch.context() as m:
        m.setattr(emulate_pass, "_selects_values", lambda *a: False)
        rsym, rargs, rauxs = emulate_conversion(conversion, cargs, cauxs)
    reference = run_model(mx.nd.CachedOp(rsym), rsym.list_inputs(),
                          {**rargs, **rauxs, "data": mx.nd.array(x)})
    for a, b, c in zip(_bits(with_k), _bits(without), _bits(reference)):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, c)


def test_with_kernels_puts_the_kernels_in_or_says_why_not(kernels, monkeypatch):
    """The kernels' graph where they run (fused bias steps for float16); the model as given,
    and a note naming MXNet's casts and why, when MXNET_AMP_NO_KERNELS is set, an input is
    not float32, or there is nothing to round."""
    sym, args, auxs, x = _zoo_model("resnet18_v1")
    _, cargs, cauxs, conversion = convert_model_full(sym, args, auxs, make_options("float16"),
                                                     cast_params=False)
    esym, eargs, eauxs = emulate_conversion(conversion, cargs, cauxs)
    values = {**eargs, **eauxs, "data": mx.nd.array(x)}
    shapes = {k: v.shape for k, v in values.items()}
    dtypes = {k: "float32" for k in values}
    fast, note = with_kernels(esym, shapes, dtypes)
    ops = {n["op"] for n in json.loads(fast.tojson())["nodes"]}
    assert {"mxnet_amp_round", "mxnet_amp_round_bias"} <= ops and note == kernels.describe()
    assert "compiled kernels" in rounding_note()
    assert with_kernels(esym, shapes, {**dtypes, "data": "float16"}) == (
        esym, "rounding by MXNet's casts (an input is not float32)")
    same, why = with_kernels(sym, {"data": x.shape}, {"data": "float32"})
    assert same is sym and "no round trip" in why
    monkeypatch.setenv(DISABLE_ENV, "1")
    off, why = with_kernels(esym, shapes, dtypes)
    assert off is esym and why == f"rounding by MXNet's casts ({DISABLE_ENV} is set)"
    assert DISABLE_ENV in rounding_note()


def test_a_graph_whose_shapes_flow_backwards_keeps_the_casts(kernels):
    """An unrolled recurrent step's begin state (zeros of batch 0) learns its batch from what
    reads the rounded product; the kernels' ops infer no shape backwards, so the model runs
    with MXNet's casts, and says so."""
    data, state = mx.sym.var("data"), mx.sym.zeros(shape=(0, 4))
    h = mx.sym.FullyConnected(state, num_hidden=4, name="h2h") + mx.sym.FullyConnected(
        data, num_hidden=4, name="i2h")
    out = mx.sym.FullyConnected(mx.sym.tanh(h), num_hidden=3, name="out")
    shapes = dict(zip(out.list_arguments(), out.infer_shape(data=(2, 5))[0]))
    args = {k: mx.nd.array(np.random.default_rng(0).standard_normal(v)) for k, v in shapes.items()
            if k != "data"}
    _, cargs, cauxs, conversion = convert_model_full(out, args, {}, make_options("float16"),
                                                     cast_params=False)
    esym, eargs, _ = emulate_conversion(conversion, cargs, cauxs)
    values = {**eargs, "data": mx.nd.ones((2, 5))}
    got, why = with_kernels(esym, {k: v.shape for k, v in values.items()}, {k: "float32" for k in values})
    assert got is esym and why == "rounding by MXNet's casts (the kernels' graph does not infer the model's shapes)"


def test_the_automatic_modes_report_says_which_rounding_ran(kernels, monkeypatch):
    """An emulated float16 search's notes name the kernels, or MXNet's casts and why."""
    import mxnet_amp as amp
    from helpers import fc_sin_fc, init_params
    sym = fc_sin_fc()
    args, auxs = init_params(sym, {"data": (2, 5)})
    inputs = {"data": mx.nd.array(np.random.default_rng(0).standard_normal((2, 5)))}
    for off, expected in (("0", kernels.describe()), ("1", f"rounding by MXNet's casts ({DISABLE_ENV} is set)")):
        monkeypatch.setenv(DISABLE_ENV, off)
        report = amp.auto_convert_model(sym, args, auxs, target_dtype="float16",
                                        sample_inputs=inputs, quiet=True)[-1]
        assert [n for n in report.notes if "rounding by" in n] == ["the emulation's " + expected]
