"""gluoncv zoo sweep: a fixed representative subset by default, the whole zoo under -m slow.

Each model is built offline with random weights, exported, converted to bfloat16 with
``mxnet_amp.convert_model`` and run with bf16 numerics emulated (tools/zoo_sweep.py);
the latest full sweep is recorded in docs/zoo_sweep.md.
"""
from __future__ import annotations

import importlib.util
import os

import mxnet as mx
import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytest.importorskip("gluoncv")


def _load_tool():
    spec = importlib.util.spec_from_file_location("zoo_sweep", os.path.join(REPO, "tools", "zoo_sweep.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


zoo_sweep = _load_tool()

# one per family, small inputs; about a minute on two CPU cores
SUBSET = [
    "cifar_resnet20_v1",            # classification, cifar
    "mobilenetv3_small",            # classification, hard-swish + squeeze-excite
    "ssd_300_mobilenet0.25_voc",    # detection: box decoding, NMS, amp_multicast in the model
    "yolo3_mobilenet0.25_voc",      # detection: upsampling, concat of mixed-dtype branches
    "center_net_resnet18_v1b_voc",  # detection: deconvolution, heatmap peak picking, topk
    "simple_pose_resnet18_v1b",     # pose: deconvolution heads
    "fastscnn_citys",               # segmentation: crop size set to the input, pyramid pooling
    "resnet18_v1b_kinetics400",     # action recognition: built from its class (gluoncv's
                                    # zoo function downloads the base even without pretraining)
    "monodepth2_resnet18_posenet_kitti_mono_640x192",  # depth: params the forward never uses
]


@pytest.fixture(scope="module")
def subset_records():
    return {m: zoo_sweep.sweep_one(m, "bfloat16") for m in SUBSET}


@pytest.mark.parametrize("model", SUBSET)
def test_subset_model_converts_and_stays_close(subset_records, model):
    rec = subset_records[model]
    assert rec["status"] == "pass", rec.get("reason")
    assert rec["casts"] > 0 and rec["low_precision_nodes"] > 0
    assert rec["nonfinite_outputs"] == []
    # it rounded somewhere, and within the tolerance
    assert 0 < rec["max_rel_err"] <= zoo_sweep.TOLERANCE
    # without its casts the converted graph is the fp32 model, op for op
    assert rec["structure_err"] <= zoo_sweep.STRUCTURE_TOL
    assert rec["gluon_adapter"] == "ok", rec["gluon_adapter"]


def test_subset_covers_several_families(subset_records):
    families = {r["family"] for r in subset_records.values()}
    assert len(families) >= 8


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
    from mxnet_amp.io import graph_from_symbol
    x = mx.sym.var("data")
    scores = mx.sym.FullyConnected(x, num_hidden=10, name="scores")
    top = mx.sym.topk(scores, k=3, ret_typ="value", name="top")
    dense = mx.sym.relu(scores, name="dense")
    g = graph_from_symbol(mx.sym.Group([top, dense]))
    heads, after, extra = zoo_sweep.checked_entries(g)
    assert heads == [1] and after == [0]
    assert [g.nodes[e.node].name for e in extra] == ["scores"]


def test_numpy_rounding_matches_amp_cast():
    from mxnet_amp.params import cast_array
    rng = np.random.RandomState(0)
    values = np.concatenate([rng.randn(5000).astype(np.float32) * 10 ** rng.uniform(-6, 6, 5000).astype(np.float32),
                             np.array([65504, 65520, 1e-8, 3.0e38, -0.0], np.float32)])
    for dtype in ("bfloat16", "float16"):
        want = cast_array(cast_array(mx.nd.array(values), dtype), "float32").asnumpy()
        np.testing.assert_array_equal(zoo_sweep.round_np(values, dtype), want)


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
    stripped = zoo_sweep.strip_casts(csym)
    assert "amp_cast" not in stripped.tojson(remove_amp_cast=False)
    ref = zoo_sweep._bind_forward(sym, args, {}, data)
    assert zoo_sweep.compare(ref, zoo_sweep._bind_forward(stripped, cargs, {}, data))["max_rel_err"] \
        <= zoo_sweep.STRUCTURE_TOL
    low = mx.sym.amp_cast(x, dtype="float16")
    broken = mx.sym.amp_cast(mx.sym.sigmoid(mx.sym.FullyConnected(
        low, mx.sym.amp_cast(w, dtype="float16"), num_hidden=8, no_bias=True, name="fc")), dtype="float32")
    got = zoo_sweep._bind_forward(zoo_sweep.strip_casts(broken), args, {}, data)
    assert zoo_sweep.compare(ref, got)["max_rel_err"] > 10 * zoo_sweep.STRUCTURE_TOL


@pytest.mark.parametrize("name, shape", [
    ("resnet18_v1b_kinetics400", None),     # its zoo function downloads the base anyway
    ("inceptionv1_hmdb51", None),           # its zoo function resets ctx of uninitialised params
    ("i3d_resnet50_v1_hmdb51", None),       # starts from Kinetics weights unless told not to
    ("yolo3_mobilenet0.25_custom", None),   # needs classes
    ("psp_resnet50_ade", (1, 3, 96, 96)),   # crop size must match the input
])
def test_models_gluoncv_cannot_build_offline_are_built(name, shape):
    # no network here: a download would raise
    net = zoo_sweep._get_model(name, shape)
    assert len(list(net.collect_params().keys())) > 10
    if shape is not None:  # a segmentation net upsamples to the crop size it was built for
        assert net._up_kwargs == {"height": shape[2], "width": shape[3]}


def test_calibrate_batchnorm_normalises_activations():
    mx.random.seed(0)
    net, shape, x = zoo_sweep._fp32_forward("cifar_resnet20_v1")
    conv, bn = net.features[0], net.features[1]
    conv.weight.set_data(conv.weight.data() * 10)  # activations far from unit scale
    assert zoo_sweep.calibrate_batchnorm(net, shape) == len(zoo_sweep._batchnorms(net)) > 10
    assert bn._kwargs["momentum"] == 0.9  # the layer's own settings are back
    fresh = mx.nd.random.uniform(-1, 1, shape=(8,) + shape[1:])
    pre = conv(fresh).asnumpy()
    post = bn(conv(fresh)).asnumpy()
    axes = (0, 2, 3)
    assert pre.std(axis=axes).mean() > 3               # not normalised before the BN ...
    assert abs(post.mean(axis=axes)).mean() < 0.15    # ... normalised after it, on new data
    assert abs(post.std(axis=axes) - 1).mean() < 0.15
    # the net still runs in predict mode, with the calibrated statistics
    assert np.isfinite(net(x).asnumpy()).all()


def test_parallel_sweep_keeps_order_and_times_out():
    records = zoo_sweep.run_sweep(["cifar_resnet20_v1", "no_such_model"], jobs=2, timeout=120,
                                  progress=False)
    assert [r["model"] for r in records] == ["cifar_resnet20_v1", "no_such_model"]
    assert records[0]["status"] == "pass" and records[1]["status"] == "not_buildable"
    # a worker needs seconds to import mxnet: under a 0.2 s limit the model times out
    (rec,) = zoo_sweep.run_sweep(["cifar_resnet20_v1"], timeout=0.2, progress=False)
    assert rec["status"] == "timeout" and "timeout" in rec["reason"]


def test_unbuildable_model_is_recorded_not_raised():
    rec = zoo_sweep.sweep_one("siamrpn_alexnet_v2_otb15", "bfloat16")  # takes two inputs
    assert rec["status"] == "not_buildable" and rec["reason"]


# ----------------------------------------------------------------------------- the whole zoo

@pytest.mark.slow
def test_full_zoo_sweep(tmp_path):
    """Every gluoncv model (heaviest last, within a time budget): >= 95% of the tested pass,
    none gives non-finite output where fp32 is finite."""
    from gluoncv import model_zoo
    budget = float(os.environ.get("ZOO_SWEEP_BUDGET_S", "4500"))
    records = zoo_sweep.run_sweep(list(model_zoo.get_model_list()), timeout=300, budget=budget,
                                  jobs=2, json_path=str(tmp_path / "zoo_sweep.json"), progress=False)
    summary = zoo_sweep.summarize(records)
    assert summary["tested"] > 0
    assert summary["nonfinite_models"] == []
    assert summary["pass_rate"] >= 0.95, [r["model"] for r in records if r["status"] == "fail"]
