"""Timed kernel choice (``tune=``): a node stays float32 exactly where its bf16 kernel was timed
slower, with both times as its reason; the timings replace the ``[[slow_kernel]]`` rule; the
whole model is timed untuned and tuned, and the tuned choices are dropped when slower beyond the timing noise; the
timings are cached per machine. A fake timer (the ``Tuning(timer=...)`` seam) makes the
decisions deterministic; one real timing run checks the real timer where bf16 runs."""
from __future__ import annotations

import json

import mxnet as mx
import numpy as np
import pytest

import mxnet_amp as amp
from mxnet_amp.cli.main import main as cli_main
from mxnet_amp.convert import convert_model_full
from mxnet_amp.errors import TuneError
from mxnet_amp.ir.dtypes import np_dtype
from mxnet_amp.mx.hardware import bf16_runs_natively
from mxnet_amp.mx.io import graph_to_symbol
from mxnet_amp.options import EXCLUDED_REASON, OpLists, make_options
from mxnet_amp.policy import Category
from mxnet_amp.report.model import build_report
from mxnet_amp.report.pages import format_table
from mxnet_amp.tune.cache import machine_key
from mxnet_amp.tune.timing import case_graph, case_input_dtypes
from mxnet_amp.tune.tuning import KernelCase, Tuning

SHAPES = {"data": (2, 3, 8, 8)}


def _model():
    """conv 3x3 -> relu -> depthwise 3x3 over 24 channels (a [[slow_kernel]] shape) -> conv
    1x1 -> pool -> FC."""
    d = mx.sym.var("data")
    x = mx.sym.Convolution(d, num_filter=24, kernel=(3, 3), pad=(1, 1), name="conv3x3")
    x = mx.sym.Activation(x, act_type="relu", name="relu")
    x = mx.sym.Convolution(x, num_filter=24, num_group=24, kernel=(3, 3), pad=(1, 1), name="dw24")
    x = mx.sym.Convolution(x, num_filter=8, kernel=(1, 1), name="conv1x1")
    x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    sym = mx.sym.FullyConnected(mx.sym.flatten(x, name="flat"), num_hidden=5, name="fc")
    arg_shapes, _, _ = sym.infer_shape(**SHAPES)
    rng = np.random.default_rng(0)
    args = {n: mx.nd.array(rng.standard_normal(s) * 0.2) for n, s in zip(sym.list_arguments(), arg_shapes)
            if n != "data"}
    return sym, args, {}


class FakeTimer:
    """Kernel times by op and kernel size (ms), model times as given; counts its calls."""

    def __init__(self, kernel_ms: dict, model_ms=(1.0, 0.9)):
        self.kernel_ms, self.model_ms = kernel_ms, model_ms
        self.kernel_calls: list[KernelCase] = []
        self.model_calls = 0

    def kernel(self, case, target_dtype):
        assert target_dtype == "bfloat16"
        self.kernel_calls.append(case)
        attrs = dict(case.attrs)
        key = (case.op, attrs.get("kernel"), attrs.get("num_group", "1"))
        fp32, low = self.kernel_ms[key]
        return fp32 / 1e3, low / 1e3

    def model(self, untuned, tuned, data_shapes):
        assert dict(data_shapes) == SHAPES
        # two different converted models, each with its cast params
        assert untuned[0].tojson(remove_amp_cast=False) != tuned[0].tojson(remove_amp_cast=False)
        self.model_calls += 1
        return self.model_ms[0] / 1e3, self.model_ms[1] / 1e3


KERNELS = {("Convolution", "(3, 3)", "1"): (1.0, 0.5),      # bf16 faster
           ("Convolution", "(3, 3)", "24"): (1.0, 0.8),     # depthwise 24 ch: bf16 faster here
           ("Convolution", "(1, 1)", "1"): (1.0, 2.0),      # bf16 slower
           ("FullyConnected", None, "1"): (1.0, 0.4)}


def _convert(tune, **kw):
    sym, args, auxs = _model()
    return convert_model_full(sym, args, auxs, make_options("bfloat16", OpLists(**kw), tune=tune),
                              data_shapes=SHAPES)


def test_decisions_follow_the_timings_with_both_times_as_the_reason():
    timer = FakeTimer(KERNELS)
    _, _, _, conv = _convert(Tuning(timer=timer))
    dtypes, decisions = conv.result.node_dtypes, conv.result.decisions
    assert dtypes["conv1x1"] == "float32"
    assert decisions["conv1x1"].reason.startswith("tuned: bfloat16 2 ms vs float32 1 ms")
    assert {n: dtypes[n] for n in ("conv3x3", "dw24", "fc")} == dict.fromkeys(
        ("conv3x3", "dw24", "fc"), "bfloat16")
    assert decisions["conv3x3"].category is Category.TARGET
    assert "0.5 ms vs float32 1 ms" in conv.tuning.decisions["conv3x3"].reason
    # one timing per distinct kernel, the whole model once untuned and once tuned
    assert len(timer.kernel_calls) == 4 and timer.model_calls == 1
    record = conv.tuning
    assert record.applied and record.kept_fp32 == ["conv1x1"]
    assert (record.untuned_model_s, record.tuned_model_s) == (1e-3, 0.9e-3)
    report = build_report(conv)
    assert report.to_dict()["tuning"]["tuned_model_ms"] == pytest.approx(0.9)
    assert "1 kept in float32" in format_table(report)
    assert any(n.name == "conv1x1" and n.reason.startswith("tuned:") for n in report.fp32_nodes)


def test_the_timings_replace_the_slow_kernel_rule():
    _, _, _, untuned = _convert(None)
    assert untuned.result.node_dtypes["dw24"] == "float32"
    assert untuned.result.decisions["dw24"].reason.startswith("slow kernel")
    _, _, _, tuned = _convert(Tuning(timer=FakeTimer(KERNELS)))
    assert tuned.result.node_dtypes["dw24"] == "bfloat16"
    slower = dict(KERNELS)
    slower[("Convolution", "(3, 3)", "24")] = (1.0, 5.0)
    _, _, _, kept = _convert(Tuning(timer=FakeTimer(slower)))
    assert kept.result.node_dtypes["dw24"] == "float32"
    assert kept.result.decisions["dw24"].reason.startswith("tuned: bfloat16 5 ms")


def test_slow_kernel_and_tuned_reasons_reach_the_record_through_fp32_nodes():
    """One float32 mechanism: the [[slow_kernel]] node and the node timed slower are kept
    by name in the conversion's fp32_nodes with their reasons; a node timed faster in bf16
    is not added, the static rule notwithstanding; the caller's exclusion keeps its reason."""
    _, _, _, untuned = _convert(None)
    assert untuned.fp32_nodes["dw24"].startswith("slow kernel: depthwise Convolution")
    assert untuned.fp32_nodes["dw24"] == untuned.result.decisions["dw24"].reason
    assert "conv1x1" not in untuned.fp32_nodes
    _, _, _, tuned = _convert(Tuning(timer=FakeTimer(KERNELS)))
    assert "dw24" not in tuned.fp32_nodes and tuned.result.node_dtypes["dw24"] == "bfloat16"
    assert tuned.fp32_nodes["conv1x1"].startswith("tuned: bfloat16 2 ms vs float32 1 ms")
    assert tuned.fp32_nodes["conv1x1"] == tuned.result.decisions["conv1x1"].reason
    from mxnet_amp.policy import reason_kind
    assert reason_kind(tuned.fp32_nodes["conv1x1"]) == "tune"
    _, _, _, excluded = _convert(Tuning(timer=FakeTimer(KERNELS)), excluded_sym_names=["dw24"])
    assert excluded.fp32_nodes["dw24"] == EXCLUDED_REASON


def test_tuned_choices_that_make_the_whole_model_slower_are_dropped():
    timer = FakeTimer(KERNELS, model_ms=(1.0, 1.3))
    _, _, _, conv = _convert(Tuning(timer=timer))
    assert not conv.tuning.applied and timer.model_calls == 1
    _, _, _, untuned = _convert(None)
    assert conv.result.node_dtypes == untuned.result.node_dtypes   # the untuned model stands
    assert "slower, the untuned choices stand" in format_table(build_report(conv))


def test_a_tuned_model_slower_only_within_the_timing_noise_keeps_its_choices():
    """1% slower whole (inside MODEL_NOISE): the kernels timed slower in bf16 stay fp32."""
    from mxnet_amp.tune.timing import MODEL_NOISE
    timer = FakeTimer(KERNELS, model_ms=(1.0, 1.0 + MODEL_NOISE / 2))
    _, _, _, conv = _convert(Tuning(timer=timer))
    assert conv.tuning.applied and conv.result.node_dtypes["conv1x1"] == "float32"


def test_excluded_nodes_are_not_timed_and_the_lists_still_hold():
    timer = FakeTimer(KERNELS)
    _, _, _, conv = _convert(Tuning(timer=timer), excluded_sym_names=["conv1x1"])
    assert all(dict(c.attrs).get("kernel") != "(1, 1)" for c in timer.kernel_calls)
    assert conv.result.node_dtypes["conv1x1"] == "float32"
    assert conv.tuning.kept_fp32 == []
    assert timer.model_calls == 1      # dw24 moved to bf16: the two models differ
    assert conv.result.node_dtypes["dw24"] == "bfloat16"


def test_the_cache_round_trips_per_machine(tmp_path, monkeypatch):
    cache = str(tmp_path / "deep" / "tune.json")
    first = FakeTimer(KERNELS)
    _, _, _, conv1 = _convert(Tuning(cache=cache, timer=first))
    assert len(first.kernel_calls) == 4
    data = json.loads(open(cache).read())
    key = machine_key()
    assert list(data["machines"]) == [key] and len(data["machines"][key]) == 4
    assert f"mxnet {mx.__version__}" in key and "threads" in key and "DNNL_MAX_CPU_ISA" in key
    entry = data["machines"][key][first.kernel_calls[0].key()]
    assert set(entry) == {"float32", "bfloat16"}

    class NoTimer(FakeTimer):
        def kernel(self, case, target_dtype):
            raise AssertionError("a cached kernel was timed again")
    again = NoTimer(KERNELS)
    _, _, _, conv2 = _convert(Tuning(cache=cache, timer=again))
    assert conv2.result.node_dtypes == conv1.result.node_dtypes
    assert all(t.cached for _, t in conv2.tuning.timings)
    assert "cached" in conv2.result.decisions["conv1x1"].reason
    # another thread count is another machine: timed again, both kept in the file
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    third = FakeTimer(KERNELS)
    _convert(Tuning(cache=cache, timer=third))
    assert len(third.kernel_calls) == 4
    assert len(json.loads(open(cache).read())["machines"]) == 2


def test_tune_is_refused_where_it_cannot_run(tmp_path):
    with pytest.raises(TuneError, match="float16"):
        make_options("float16", tune=True)
    with pytest.raises(TuneError, match="tune="):
        make_options("bfloat16", tune=3)
    sym, args, auxs = _model()
    with pytest.raises(TuneError, match="data_shapes"):
        amp.convert_model(sym, args, auxs, target_dtype="bfloat16", tune=Tuning(timer=FakeTimer(KERNELS)))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TuneError, match="bad.json"):
        _convert(Tuning(cache=str(bad), timer=FakeTimer(KERNELS)))
    assert bad.read_text() == "{not json"       # never overwritten


def test_gluon_and_cli_take_tune(tmp_path):
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(8, 1, in_channels=3), mx.gluon.nn.Dense(4))
    net.initialize()
    net(mx.nd.zeros(SHAPES["data"]))
    timer = FakeTimer({("Convolution", "(1, 1)", "1"): (1.0, 2.0), ("FullyConnected", None, "1"): (1.0, 0.5)})
    block = amp.convert_hybrid_block(net, "bfloat16", data_shapes=SHAPES, tune=Tuning(timer=timer))
    assert len(timer.kernel_calls) == 2 and timer.model_calls == 1
    sym = block._cached_graph[1]
    convs = [n for n in json.loads(sym.tojson(remove_amp_cast=False))["nodes"] if n["op"] == "Convolution"]
    assert convs   # the block was built; its conv is float32 (reads no bf16 weight)
    if not bf16_runs_natively():
        pytest.skip("the CLI's --tune times kernels natively (needs avx512 bf16)")
    sym, args, auxs = _model()
    prefix = str(tmp_path / "m")
    mx.model.save_checkpoint(prefix, 0, sym, args, auxs)
    report = str(tmp_path / "r.json")
    assert cli_main(["convert", prefix, "--target-dtype", "bf16", "--input-shape", "data:2x3x8x8",
                     "--tune", str(tmp_path / "t.json"), "--report", report, "-q"]) == 0
    tuning = json.loads(open(report).read())["tuning"]
    assert len(tuning["kernels"]) == 4 and (tmp_path / "t.json").exists()


@pytest.mark.skipif(not bf16_runs_natively(), reason="bf16 does not run natively on this CPU")
def test_a_real_timing_run_keeps_no_bf16_kernel_slower_than_its_fp32_one(tmp_path):
    sym, args, auxs = _model()
    s2, a2, x2, conv = convert_model_full(sym, args, auxs,
                                          make_options("bfloat16", tune=str(tmp_path / "t.json")),
                                          data_shapes=SHAPES)
    record = conv.tuning
    assert len(record.timings) == 4
    for names, timing in record.timings:
        assert timing.fp32_s > 0 and timing.low_s > 0
        for name in names:
            want = "bfloat16" if timing.low_s <= timing.fp32_s else "float32"
            if record.applied:
                assert conv.result.node_dtypes[name] == want, (name, timing)
    exe = s2.simple_bind(mx.cpu(), grad_req="null", **SHAPES)
    exe.copy_params_from(a2, x2)
    out = exe.forward(is_train=False, data=mx.nd.ones(SHAPES["data"]))[0].asnumpy()
    assert np.isfinite(out).all()


def test_auto_mode_tunes_once_at_the_sample_inputs_shapes():
    sym, args, auxs = _model()
    # dw24 slower in bf16 here: the emulated check of a bf16 depthwise conv over 24 channels
    # fails in MXNet ("could not create a primitive descriptor for a reorder primitive", with
    # or without tune: target_dtype_ops lifting the slow-kernel rule does it too)
    kernels = {**KERNELS, ("Convolution", "(3, 3)", "24"): (1.0, 5.0)}
    timer = FakeTimer(kernels)
    inputs = {"data": np.random.default_rng(1).uniform(-1, 1, SHAPES["data"]).astype("float32")}
    _, _, _, report = amp.auto_convert_model(sym, args, auxs, inputs, target_dtype="bfloat16",
                                             execution="emulated", quiet=True, tune=Tuning(timer=timer))
    assert len(timer.kernel_calls) == 4 and timer.model_calls == 1   # once, however many runs
    assert report.conversion.tuning is not None
    assert report.conversion.tuning.kept_fp32 == ["conv1x1", "dw24"]
    assert report.conversion.result.node_dtypes["conv1x1"] == "float32"
    assert report.conversion.result.decisions["conv1x1"].reason.startswith("tuned:")


def test_the_float32_kernel_is_timed_with_the_casts_it_adds_between_bf16_nodes():
    """Inside a chain of bf16 nodes a float32 node reads bf16 data through a cast and casts its
    output back; its params are float32. The bf16 kernel is timed alone: no cast at all."""
    case = KernelCase("Convolution", (("kernel", "(3, 3)"), ("num_filter", "4"), ("pad", "(1, 1)")),
                      (("data", (1, 2, 5, 5)), ("param", (4, 2, 3, 3)), ("param", (4,))))
    fp32 = case_graph(case, "float32", "bfloat16")
    assert [n.op for n in fp32.nodes if not n.is_variable] == ["amp_cast", "Convolution", "amp_cast"]
    assert case_input_dtypes(case, "float32", "bfloat16") == {
        "data0": "bfloat16", "param1": "float32", "param2": "float32"}
    low = case_graph(case, "bfloat16", "bfloat16")
    assert [n.op for n in low.nodes if not n.is_variable] == ["Convolution"]
    assert set(case_input_dtypes(case, "bfloat16", "bfloat16").values()) == {"bfloat16"}
    # MXNet's own inference agrees: the float32 version reads and writes bfloat16
    for graph, dtype in ((fp32, "float32"), (low, "bfloat16")):
        types = {k: np_dtype(v) for k, v in case_input_dtypes(case, dtype, "bfloat16").items()}
        _, out_types, _ = graph_to_symbol(graph).infer_type(**types)
        assert out_types[0] == np_dtype("bfloat16")


def test_the_timed_choice_is_a_step_that_returns_options_and_converts_nothing(monkeypatch):
    """Issue 43: tune_policy times kernels and returns options (no model converted inside
    it); the conversion then runs once under the tuned options and once under the untuned
    ones for the whole-model check: two conversions in all (three when tuning converted
    both models inside the conversion)."""
    import mxnet_amp.convert as convert_module
    from mxnet_amp.mx.io import graph_from_symbol
    from mxnet_amp.tune.timing import tune_policy
    sym, args, _ = _model()
    timer = FakeTimer(KERNELS)
    options = make_options("bfloat16", tune=Tuning(timer=timer))
    calls = []
    real = convert_module.convert_graph
    monkeypatch.setattr(convert_module, "convert_graph", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    tuned, record = tune_policy(graph_from_symbol(sym), args, options, SHAPES)
    assert calls == [] and timer.model_calls == 0 and len(timer.kernel_calls) == 4
    assert tuned.tuning is None and tuned.fp32_nodes["conv1x1"].startswith("tuned: bfloat16 2 ms")
    assert record.applied and record.untuned_model_s is None   # no whole-model check yet
    _, _, _, conv = _convert(Tuning(timer=FakeTimer(KERNELS)))
    assert len(calls) == 2 and conv.tuning.untuned_model_s == pytest.approx(1e-3)
