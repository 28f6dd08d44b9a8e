"""gluoncv zoo sweep: a fixed representative subset by default, the whole zoo under -m slow.

Each model is built offline with random weights and BatchNorm calibrated layer by layer,
exported, converted to float16 and to bfloat16 with ``mxnet_amp.convert_model`` and run with
the low precision numerics emulated (the package tools/zoo_sweep/); the latest sweep is recorded in
docs/zoo_sweep.md.
"""
from __future__ import annotations

import json
import os

import mxnet as mx
import numpy as np
import pytest
from helpers import load_tool

pytest.importorskip("gluoncv")


zoo_sweep = load_tool("zoo_sweep")

# one per family, small inputs, both dtypes; some 15 s of CPU. BatchNorm calibrated as in the
# sweep, except for the detector and the segmenter: calibrated, those random nets are chaotic
# (rounding only their weights to float16 moves their scores by 20-100%, measured), so they
# keep BatchNorm at identity here, where their outputs measure the conversion
SUBSET = {
    "cifar_resnet20_v1": "calibrated",          # classification (also run natively in bf16 where the CPU can)
    "simple_pose_resnet18_v1b": "calibrated",   # pose: deconvolution heads
    "monodepth2_resnet18_posenet_kitti_mono_640x192": "calibrated",  # depth: params the forward never uses
    "ssd_300_mobilenet0.25_voc": "identity",    # detection: box decoding, NMS, amp_multicast in the model
    "fastscnn_citys": "identity",               # segmentation: crop size set to the input, pyramid pooling
}
# native runs, where the CPU can: a classifier, and a detector judged before its NMS
NATIVE = {"cifar_resnet20_v1", "ssd_300_mobilenet0.25_voc"}


@pytest.fixture(scope="module")
def subset_records():
    return {m: zoo_sweep.sweep_one(m, bn=bn, native=None if m in NATIVE else False,
                                 auto_dtypes=())
            for m, bn in SUBSET.items()}


@pytest.mark.parametrize("dtype", zoo_sweep.DTYPES)
@pytest.mark.parametrize("model", SUBSET)
def test_subset_model_converts_and_stays_close(subset_records, model, dtype):
    rec = subset_records[model]
    assert rec["bn"] == SUBSET[model]
    if rec["bn"] == "calibrated":
        assert rec["calibrated_batchnorms"] == rec["batchnorms_in_graph"] > 0
    assert rec["gluon_adapter"] == "ok", rec["gluon_adapter"]
    d = rec[dtype]
    assert d["status"] == "pass", d.get("reason")
    assert d["casts"] > 0 and d["low_precision_nodes"] > 0
    assert d["nonfinite_outputs"] == []
    # it rounded somewhere, and within the strict tolerance
    assert 0 < d["max_rel_err"] <= zoo_sweep.TOLERANCE
    # without its casts the converted graph is the fp32 model, op for op
    assert d["structure_err"] <= zoo_sweep.common.STRUCTURE_TOL
    # mx.contrib.amp's model of the same net was run beside ours
    assert d["contrib_amp"] != "ok" or d.get("contrib_max_rel_err") is not None or "contrib_emulated" in d


def test_subset_float16_is_finer_than_bfloat16(subset_records):
    """float16 keeps 11 significant bits to bfloat16's 8: on normalised activations its
    error is several times smaller (what a broken float16 path would not show)."""
    ratios = [r["bfloat16"]["max_rel_err"] / r["float16"]["max_rel_err"] for r in subset_records.values()]
    assert np.median(ratios) > 3, ratios


def test_native_bf16_run_matches_the_mxnet_cpu_emulation(subset_records, native_bf16):
    if not native_bf16:
        pytest.skip("this CPU cannot execute bf16 natively")
    d = subset_records["cifar_resnet20_v1"]["bfloat16"]
    assert d["native_max_rel_err"] <= zoo_sweep.TOLERANCE
    assert d["native_vs_emulated_mxnet_cpu"] <= d["native_vs_emulated"]
    assert d["native_vs_emulated_mxnet_cpu"] < 1e-3


def test_detector_runs_natively_fused_on_its_pre_nms_tensors(subset_records, native_bf16):
    """A detector's model outputs all come after NMS: its native runs convert the graph with
    the dense tensors before NMS as outputs and are judged there against that conversion's
    emulated error (issue 26's deploy-path criterion)."""
    if not native_bf16:
        pytest.skip("this CPU cannot execute bf16 natively")
    rec = subset_records["ssd_300_mobilenet0.25_voc"]
    d = rec["bfloat16"]
    assert rec["pre_ordering_tensors"] and "native_fused" not in d, d.get("native_fused")
    assert 0 < d["probed_max_rel_err"] <= zoo_sweep.TOLERANCE
    assert d["native_fused_max_rel_err"] <= 1.5 * d["probed_max_rel_err"] + 0.005


def test_subset_covers_several_families(subset_records):
    families = {r["family"] for r in subset_records.values()}
    assert len(families) == len(SUBSET)


# ----------------------------------------------------------------------------- the sweep's checks

def test_compare_flags_new_non_finite_and_measures_relative_error():
    ref = [np.array([1.0, -2.0, 4.0], np.float32), np.array([np.inf, 1.0], np.float32),
           np.array([3, 4], np.int32)]
    got = [np.array([1.0, -2.0, 4.2], np.float32), np.array([np.inf, np.nan], np.float32),
           np.array([9, 9], np.int32)]
    out = zoo_sweep.compare(ref, got)
    assert out["nonfinite_outputs"] == [1]
    assert out["per_output_err"][0] == pytest.approx(0.05, rel=1e-5)  # 0.2 / max|ref| = 4
    assert out["max_rel_err"] == 1.0  # the NaN where fp32 has 1.0 counts as a full miss
    assert zoo_sweep.compare(ref[:1], [np.zeros(4)])["error"].startswith("output 0")


def test_checked_entries_compares_the_dense_inputs_of_ordering_ops():
    from mxnet_amp.mx.io import graph_from_symbol
    x = mx.sym.var("data")
    scores = mx.sym.FullyConnected(x, num_hidden=10, name="scores")
    top = mx.sym.topk(scores, k=3, ret_typ="value", name="top")
    dense = mx.sym.relu(scores, name="dense")
    g = graph_from_symbol(mx.sym.Group([top, dense]))
    heads, after, extra = zoo_sweep.checks.checked_entries(g)
    assert heads == [1] and after == [0]
    assert [g.nodes[e.node].name for e in extra] == ["scores"]


def test_extra_outputs_are_found_when_names_repeat():
    """Gluon repeats node names when a block runs twice (an FPN's shared head): each extra
    output is the same node in the fp32 graph and in the converted, emulated one."""
    import mxnet_amp
    from mxnet_amp.emulation import emulate_model
    from mxnet_amp.mx.io import graph_from_symbol
    x = mx.sym.var("data")
    first = mx.sym.FullyConnected(x, mx.sym.var("w1"), mx.sym.var("b1"), num_hidden=4, name="fc")
    second = mx.sym.FullyConnected(mx.sym.relu(first), mx.sym.var("w2"), mx.sym.var("b2"),
                                   num_hidden=3, name="fc")                      # the same name
    sym = mx.sym.Group([mx.sym.topk(first, k=2, ret_typ="value"), mx.sym.topk(second, k=2, ret_typ="value")])
    g = graph_from_symbol(sym)
    _, _, extra = zoo_sweep.checks.checked_entries(g)
    where = {i: key for key, i in zoo_sweep.checks._named(g).items()}
    entries = [(*where[e.node], e.output) for e in extra]
    assert entries == [("fc", 0, 0), ("fc", 1, 0)]
    rng = np.random.RandomState(0)
    args = {"w1": mx.nd.array(rng.randn(4, 8)), "b1": mx.nd.zeros(4),
            "w2": mx.nd.array(rng.randn(3, 4)), "b2": mx.nd.zeros(3)}
    data = {"data": mx.nd.array(rng.randn(2, 8))}
    ref = zoo_sweep.checks._bind_forward(zoo_sweep.checks._with_heads(sym, entries), args, {}, data)
    csym, cargs, cauxs = mxnet_amp.convert_model(sym, args, {}, target_dtype="float16")
    esym, eargs, eauxs = emulate_model(csym, cargs, cauxs)
    got = zoo_sweep.checks._bind_forward(zoo_sweep.checks._with_heads(esym, entries), eargs, eauxs, data)
    assert [r.shape for r in ref[2:]] == [g.shape for g in got[2:]] == [(2, 4), (2, 3)]
    assert zoo_sweep.compare(ref[2:], got[2:])["max_rel_err"] < 1e-2


def test_stripped_graph_check_catches_a_changed_op():
    """The structure check compares the cast-stripped converted graph with fp32: equal for
    a real conversion, far off when an op was swapped under the casts."""
    import mxnet_amp
    x = mx.sym.var("data")
    w = mx.sym.var("fc_weight")
    sym = mx.sym.relu(mx.sym.FullyConnected(x, w, num_hidden=8, no_bias=True, name="fc"), name="act")
    args = {"fc_weight": mx.nd.random.normal(shape=(8, 16))}
    data = {"data": mx.nd.random.normal(shape=(2, 16))}
    # float32 weights, as the sweep converts: the stripped graph then reproduces fp32 exactly
    csym, cargs, _ = mxnet_amp.convert_model(sym, args, {}, target_dtype="bfloat16",
                                             cast_optional_params=False)
    assert "amp_cast" in csym.tojson(remove_amp_cast=False)
    stripped = zoo_sweep.checks.strip_casts(csym)
    assert "amp_cast" not in stripped.tojson(remove_amp_cast=False)
    ref = zoo_sweep.checks._bind_forward(sym, args, {}, data)
    assert zoo_sweep.compare(ref, zoo_sweep.checks._bind_forward(stripped, cargs, {}, data))["max_rel_err"] \
        <= zoo_sweep.common.STRUCTURE_TOL
    low = mx.sym.amp_cast(x, dtype="float16")
    broken = mx.sym.amp_cast(mx.sym.sigmoid(mx.sym.FullyConnected(
        low, mx.sym.amp_cast(w, dtype="float16"), num_hidden=8, no_bias=True, name="fc")), dtype="float32")
    got = zoo_sweep.checks._bind_forward(zoo_sweep.checks.strip_casts(broken), args, {}, data)
    assert zoo_sweep.compare(ref, got)["max_rel_err"] > 10 * zoo_sweep.common.STRUCTURE_TOL


@pytest.mark.parametrize("name, shape", [
    ("resnet18_v1b_kinetics400", None),     # its zoo function downloads the base anyway
    ("inceptionv1_hmdb51", None),           # its zoo function resets ctx of uninitialised params
    ("i3d_resnet50_v1_hmdb51", None),       # starts from Kinetics weights unless told not to
    ("yolo3_mobilenet0.25_custom", None),   # needs classes
    ("psp_resnet50_ade", (1, 3, 96, 96)),   # crop size must match the input
])
def test_models_gluoncv_cannot_build_offline_are_built(name, shape):
    # no network here: a download would raise
    net = zoo_sweep.models._get_model(name, shape)
    assert len(list(net.collect_params().keys())) > 10
    if shape is not None:  # a segmentation net upsamples to the crop size it was built for
        assert net._up_kwargs == {"height": shape[2], "width": shape[3]}


def _bn_output_stats(net, bn, x):
    """Per-channel mean and std of ``bn``'s output when ``net`` runs on ``x`` (predict mode)."""
    seen = []
    net.hybridize(active=False)
    handle = bn.register_forward_hook(lambda block, inputs, out: seen.append(out.asnumpy()))
    try:
        net(x)
    finally:
        handle.detach()
        net.hybridize()
    axes = (0, 2, 3)
    return seen[0].mean(axis=axes), seen[0].std(axis=axes)


def test_calibrate_batchnorm_normalises_every_layer_in_order():
    """Each BatchNorm is calibrated on the activations that reach it once the layers before
    it are calibrated: on new inputs the first and the last BatchNorm output are
    normalised; with the statistics of an uncalibrated upstream the last one would not be."""
    mx.random.seed(0)
    net, shape, x = zoo_sweep.models._fp32_forward("cifar_resnet20_v1")
    conv, bn = net.features[0], net.features[1]
    conv.weight.set_data(conv.weight.data() * 10)  # activations far from unit scale
    bns = zoo_sweep.models._batchnorms(net)
    last = max(bns, key=lambda b: b.name)  # gluon names count up in build order
    assert zoo_sweep.calibrate_batchnorm(net, shape) == len(bns) > 10
    assert bn._kwargs["momentum"] == 0.9 and not bn._kwargs["use_global_stats"]  # untouched
    fresh = zoo_sweep.models.sample_input((8,) + shape[1:])
    pre = conv(fresh).asnumpy()
    assert pre.std(axis=(0, 2, 3)).mean() > 3                  # not normalised before the BN ...
    for layer in (bn, last):
        mean, std = _bn_output_stats(net, layer, fresh)      # ... normalised after it, on new data
        assert abs(mean).mean() < 0.3, layer.name
        assert abs(std - 1).mean() < 0.3, layer.name
    # the net runs hybridized again, in predict mode, with the calibrated statistics
    assert net._active and np.isfinite(net(x).asnumpy()).all()


def test_train_mode_fallback_calibrates_and_restores_the_layers():
    """The fallback for nets that do not run imperatively: batch statistics written by one
    train-mode pass, every layer's own settings back afterwards."""
    mx.random.seed(0)
    net, shape, _ = zoo_sweep.models._fp32_forward("cifar_resnet20_v1")
    bns = zoo_sweep.models._batchnorms(net)
    assert zoo_sweep.models._calibrate_batchnorm_train_mode(net, shape) == len(bns)
    assert all(b._kwargs["momentum"] == 0.9 for b in bns)
    assert not any((b.running_var.data().asnumpy() == 1).all() for b in bns)


def test_calibrate_graph_batchnorm_sets_identity_layers_in_order():
    """BatchNorm ops no Gluon block holds (a SymbolBlock backbone) are calibrated on the
    exported graph: both layers of a conv-BN-relu-conv-BN chain normalise new inputs, the
    second from the activations the calibrated first one gives; a layer whose statistics
    are not at identity is left alone; the caller's dict is not modified."""
    rng = np.random.RandomState(0)
    x = mx.sym.var("data")
    h = mx.sym.BatchNorm(mx.sym.Convolution(x, kernel=(3, 3), num_filter=8, pad=(1, 1), name="c1"),
                         name="bn1", fix_gamma=False)
    h = mx.sym.BatchNorm(mx.sym.Convolution(mx.sym.relu(h), kernel=(3, 3), num_filter=8, pad=(1, 1),
                                            name="c2"), name="bn2", fix_gamma=False)
    out = mx.sym.BatchNorm(h, name="bn3", fix_gamma=False)
    args = {"c1_weight": mx.nd.array(rng.randn(8, 3, 3, 3) * 10), "c1_bias": mx.nd.array(rng.randn(8) * 5),
            "c2_weight": mx.nd.array(rng.randn(8, 8, 3, 3)), "c2_bias": mx.nd.array(rng.randn(8))}
    for k in ("bn1", "bn2", "bn3"):
        args.update({f"{k}_gamma": mx.nd.ones(8), f"{k}_beta": mx.nd.zeros(8)})
    auxs = {f"bn{k}_moving_{s}": (mx.nd.zeros(8) if s == "mean" else mx.nd.ones(8))
            for k in (1, 2) for s in ("mean", "var")}
    auxs.update(bn3_moving_mean=mx.nd.full(8, 0.5), bn3_moving_var=mx.nd.full(8, 2.0))
    before = {k: v.asnumpy().copy() for k, v in auxs.items()}
    new, n = zoo_sweep.calibrate_graph_batchnorm(out, args, auxs, (1, 3, 64, 64))
    assert n == 2
    assert all((auxs[k].asnumpy() == v).all() for k, v in before.items())   # not mutated
    assert (new["bn3_moving_var"].asnumpy() == 2.0).all()                    # not at identity
    fresh = {"data": zoo_sweep.models.sample_input((8, 3, 64, 64))}
    internals = out.get_internals()
    probe = mx.sym.Group([internals["bn1_output"], internals["bn2_output"]])
    for y in zoo_sweep.checks._bind_forward(probe, args, new, fresh):
        assert abs(y.mean(axis=(0, 2, 3))).mean() < 0.3
        assert abs(y.std(axis=(0, 2, 3)) - 1).mean() < 0.3
    assert zoo_sweep.calibrate_graph_batchnorm(out, args, new, (1, 3, 64, 64)) == (new, 0)


def test_sample_input_is_smooth_and_image_sized():
    x = zoo_sweep.models.sample_input((2, 3, 64, 64)).asnumpy()
    assert x.shape == (2, 3, 64, 64) and np.abs(x).max() < 1.2
    # neighbouring pixels agree far more than i.i.d. noise would (correlation ~0)
    assert np.corrcoef(x[..., :-1].ravel(), x[..., 1:].ravel())[0, 1] > 0.8
    assert zoo_sweep.models.sample_input((1, 3, 8, 32, 32)).shape == (1, 3, 8, 32, 32)


@pytest.mark.parametrize("values, why", [
    (np.zeros(100), "vanished: all ~0"),
    (np.full(100, 3.5), "vanished: constant"),
    (np.r_[np.zeros(95), np.ones(5)] * 1.0, "saturated"),          # sigmoid of huge logits
    (np.linspace(-1, 1, 100), None),
    (np.r_[np.zeros(60), np.linspace(0.1, 2, 40)], None),          # a relu output is fine
])
def test_degenerate_outputs_are_named(values, why):
    got = zoo_sweep.degenerate(values.astype(np.float32))
    assert (got is None) if why is None else got.startswith(why)


def _record(model, fam, fp16, bf16):
    """A sweep record as a worker writes it (only the keys the report reads)."""
    def one(status, err):
        rec = {"status": status, "max_rel_err": err, "contrib_amp": "ok", "contrib_max_rel_err": err,
               "casts": 3, "low_precision_nodes": 9, "op_nodes": 10, "nonfinite_outputs": []}
        if status == "fail":
            rec.update(reason=f"max rel error {err} > tolerance 0.1", sensitivity_err=0.2, auto_executions=5,
                       auto_validated=True, auto_kept_fp32=["conv0"], auto_kept_count=1,
                       auto_low_precision_nodes=8)
        return rec
    return {"model": model, "family": fam, "input_shape": [1, 3, 64, 64], "calibrated_batchnorms": 2,
            "float16": one(*fp16), "bfloat16": one(*bf16)}


def test_summary_and_report_per_dtype(tmp_path):
    records = [_record("a", "classification/imagenet", ("pass", 0.01), ("pass", 0.05)),
               _record("b", "classification/imagenet", ("pass", 0.02), ("fail", 0.3)),
               _record("c", "segmentation", ("degenerate", 0.0), ("degenerate", 0.0))]
    fp16, bf16 = (zoo_sweep.summarize(records, d) for d in zoo_sweep.DTYPES)
    assert (fp16["tested"], fp16["pass_rate"]) == (2, 1.0)
    assert (bf16["tested"], bf16["pass_rate"], bf16["failures"]) == (2, 0.5, ["b"])
    path = tmp_path / "sweep.md"
    zoo_sweep.write_markdown(str(path), records, dtypes=zoo_sweep.DTYPES, tol=0.1, command="x",
                             wall_s=60, timeout=300, bn="calibrated")
    text = path.read_text()
    assert "## float16" in text and "## bfloat16" in text
    bf16_part = text[text.index("## bfloat16"):]
    assert ("| b | sensitivity | max rel error 0.3 > tolerance 0.1 | 0.2 | 0.3 | "
            "fixed: 5 executions, 1 nodes kept") in bf16_part
    assert "failures by cause: sensitivity 1" in bf16_part
    assert "| c | degenerate |" in bf16_part


def test_report_from_merges_sweep_files(tmp_path, capsys):
    """``--report-from`` over several sweep files: one record per model, the last file that
    ran it wins, a budget-skipped or timed-out record replaces nothing; files swept otherwise
    are refused."""
    write_json = zoo_sweep.runner.write_json
    first, second, merged, md = (str(tmp_path / n) for n in ("1.json", "2.json", "all.json", "all.md"))
    a, b_old = _record("a", "pose", ("pass", 0.01), ("pass", 0.02)), _record("b", "pose", ("pass", 0.01), ("fail", 0.3))
    b_new, c = _record("b", "pose", ("pass", 0.01), ("pass", 0.04)), _record("c", "depth", ("pass", 0.0), ("pass", 0.1))
    a_skipped = {"model": "a", "family": "pose", **{d: {"status": "skipped", "reason": "budget"}
                                                    for d in zoo_sweep.DTYPES}}
    write_json(first, [a, b_old], zoo_sweep.DTYPES, 0.1, 400, "calibrated")
    d_skipped = {**a_skipped, "model": "d"}
    b_timeout = {"model": "b", "family": "pose", **{d: {"status": "timeout"} for d in zoo_sweep.DTYPES}}
    write_json(second, [a_skipped, b_new, c, d_skipped], zoo_sweep.DTYPES, 0.1, 400, "calibrated")
    third = str(tmp_path / "3.json")
    write_json(third, [b_timeout], zoo_sweep.DTYPES, 0.1, 400, "calibrated")
    assert zoo_sweep.main(["--report-from", first, second, third, "--json", merged, "--md", md]) == 0
    saved = json.loads(open(merged).read())
    assert saved["records"] == [a, b_new, c, d_skipped] and saved["dtypes"] == list(zoo_sweep.DTYPES)
    text = open(md).read()
    assert "3 models run of the 4 listed" in text and "| b | pose |" in text
    assert "**Not run: 1 of the 4 listed models** (budget): d." in text
    assert zoo_sweep.summarize(saved["records"], "bfloat16")["pass_rate"] == 1.0
    write_json(second, [c], ("float16",), 0.1, 400, "identity")
    capsys.readouterr()
    with pytest.raises(SystemExit):
        zoo_sweep.main(["--report-from", first, second])
    assert "2.json" in capsys.readouterr().err


@pytest.mark.parametrize("rec, cause", [
    ({"max_rel_err": 0.3, "nonfinite_outputs": [2]}, "non-finite"),
    ({"max_rel_err": 0.3, "structure_err": 0.5}, "graph changed"),
    ({"reason": "convert: GraphError"}, "error"),
    ({"max_rel_err": 0.3, "sensitivity_err": 0.1, "contrib_max_rel_err": 0.28}, "sensitivity"),
    ({"max_rel_err": 0.3, "sensitivity_err": 0.01, "contrib_max_rel_err": 0.28}, "conversion"),
    ({"max_rel_err": 0.3, "sensitivity_err": 0.1, "contrib_max_rel_err": 0.05}, "conversion"),
])
def test_failure_causes(rec, cause):
    """A failure is the random net's sensitivity only where rounding input and weights alone
    gives a quarter of the error or more and mx.contrib.amp does no better."""
    assert zoo_sweep.cause_of(rec) == cause


def test_parallel_sweep_keeps_order_and_times_out(tmp_path):
    path = tmp_path / "sweep.json"
    records = zoo_sweep.run_sweep(["cifar_resnet20_v1", "no_such_model"], dtypes=("float16",), jobs=2,
                                  timeout=120, progress=False, json_path=str(path))
    assert [r["model"] for r in records] == ["cifar_resnet20_v1", "no_such_model"]
    assert records[0]["float16"]["status"] == "pass"
    assert records[1]["float16"]["status"] == "not_buildable"
    assert records[0]["load_avg"] is None or records[0]["load_avg"] >= 0
    assert json.loads(path.read_text())["records"] == records
    # a worker needs seconds to import mxnet: under a 0.2 s limit the model times out
    (rec,) = zoo_sweep.run_sweep(["cifar_resnet20_v1"], dtypes=("float16",), timeout=0.2, progress=False)
    assert rec["float16"]["status"] == "timeout" and "timeout" in rec["float16"]["reason"]


def test_models_left_by_the_budget_are_written_to_the_json(tmp_path):
    path = tmp_path / "sweep.json"
    records = zoo_sweep.run_sweep(["cifar_resnet20_v1", "no_such_model"], dtypes=("float16",), budget=0,
                                  progress=False, json_path=str(path))
    assert [r["float16"]["status"] for r in records] == ["skipped", "skipped"]
    assert json.loads(path.read_text())["records"] == records


def test_unbuildable_model_is_recorded_not_raised():
    rec = zoo_sweep.sweep_one("siamrpn_alexnet_v2_otb15")  # takes two inputs
    for dtype in zoo_sweep.DTYPES:
        assert rec[dtype]["status"] == "not_buildable" and rec[dtype]["reason"]


# ----------------------------------------------------------------------------- the whole zoo

@pytest.mark.slow
def test_full_zoo_sweep(tmp_path):
    """Every gluoncv model in both dtypes (heaviest last, within a time budget): >= 98% of
    the tested within the strict tolerance in float16, none non-finite where fp32 is finite."""
    from gluoncv import model_zoo
    budget = float(os.environ.get("ZOO_SWEEP_BUDGET_S", "9000"))
    records = zoo_sweep.run_sweep(list(model_zoo.get_model_list()), timeout=400, budget=budget,
                                  jobs=2, json_path=str(tmp_path / "zoo_sweep.json"), progress=False)
    for dtype in zoo_sweep.DTYPES:
        summary = zoo_sweep.summarize(records, dtype)
        assert summary["tested"] > 0
        assert summary["nonfinite_models"] == [], dtype
    fp16 = zoo_sweep.summarize(records, "float16")
    assert fp16["pass_rate"] >= 0.98, fp16["failures"]


@pytest.mark.parametrize("rec, ours, contrib", [
    ({"max_rel_err": 0.05, "contrib_max_rel_err": 0.05}, True, True),                  # within 0.1
    ({"max_rel_err": 0.3, "sensitivity_err": 0.16, "contrib_max_rel_err": 0.35}, True, False),
    ({"max_rel_err": 0.3, "sensitivity_err": 0.14, "contrib_max_rel_err": 0.2}, False, True),
    ({"max_rel_err": 0.3, "sensitivity_err": None, "contrib_max_rel_err": None}, False, None),
    ({"max_rel_err": 0.01, "nonfinite_outputs": [1], "contrib_max_rel_err": 0.01,
      "contrib_nonfinite_outputs": []}, False, True),
    ({"max_rel_err": 0.01, "structure_err": 0.5}, False, None),
])
def test_sensitivity_scaled_criterion(rec, ours, contrib):
    """Pass: error <= 0.1, or <= 2x the rounding floor; never with a non-finite output or a
    changed graph. mx.contrib.amp's model is judged on the same floor."""
    assert zoo_sweep.render.scaled_pass(rec, 0.1) is ours
    assert zoo_sweep.render.scaled_pass(rec, 0.1, contrib=True) is contrib


def test_report_names_scaled_failures_and_nets_where_contrib_errs_less(tmp_path):
    records = [_record("a", "classification/imagenet", ("pass", 0.01), ("pass", 0.05)),
               _record("b", "classification/imagenet", ("pass", 0.02), ("fail", 0.3)),
               _record("c", "classification/imagenet", ("pass", 0.02), ("fail", 0.5))]
    records[2]["bfloat16"]["contrib_max_rel_err"] = 0.12      # floor 0.2: contrib passes, ours not
    s = zoo_sweep.summarize(records, "bfloat16")["scaled"]
    assert (s["judged"], s["pass"], s["failures"], s["worse_than_contrib"]) == (3, 2, ["c"], ["c"])
    path = tmp_path / "sweep.md"
    zoo_sweep.write_markdown(str(path), records, dtypes=zoo_sweep.DTYPES, tol=0.1, command="x",
                             wall_s=60, timeout=300, bn="calibrated")
    text = path.read_text()
    bf16_part = text[text.index("## bfloat16"):]
    assert "**Sensitivity-scaled criterion: 2 of 3 = 66.7% pass**" in bf16_part
    assert "| c | 0.5 | 0.2 | 0.12 | conversion: ours 0.5 (2.5x the rounding floor 0.2)" in bf16_part
    assert "| c | 0.5 | 0.12 | 4.2 | 0.2 | no |" in bf16_part


def test_fused_criterion_counts_models_within_1_5x_the_emulated_error_plus_0_005():
    flat = [{"model": "a", "max_rel_err": 0.01, "native_fused_max_rel_err": 0.02},    # 0.02 = bound
            {"model": "b", "max_rel_err": 0.01, "native_fused_max_rel_err": 0.021},   # over
            {"model": "c", "max_rel_err": 0.2, "native_fused_max_rel_err": 0.1},
            {"model": "d", "max_rel_err": 0.01, "native_fused_max_rel_err": 0.01,
             "native_fused_nonfinite_outputs": [0]},                                  # non-finite
            {"model": "e", "max_rel_err": 0.01},                                      # not run fused
            # judged before NMS: against the emulated error of the graph converted with
            # those tensors as outputs, not the model's own
            {"model": "f", "max_rel_err": 0.01, "probed_max_rel_err": 0.02, "native_fused_max_rel_err": 0.03},
            {"model": "g", "max_rel_err": 0.02, "probed_max_rel_err": 0.01, "native_fused_max_rel_err": 0.021},
            {"model": "h", "max_rel_err": 0.01, "native_fused": "error: MXNetError: reorder"},  # MXNet fails
            {"model": "i", "max_rel_err": 0.01, "native_probed": "error: TypeInferenceError"}]
    summary = zoo_sweep.render.fused_summary(flat)
    assert summary["ran"] == 8 and summary["within"] == 3 and summary["outside"] == ["b", "d", "g", "h", "i"]
    assert summary["failed"] == ["h", "i"]
