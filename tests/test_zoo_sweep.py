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

# one per family, small inputs; well under a minute on two CPU cores
SUBSET = [
    "cifar_resnet20_v1",            # classification, cifar
    "mobilenetv3_small",            # classification, hard-swish + squeeze-excite
    "ssd_300_mobilenet0.25_voc",    # detection: box decoding, NMS, amp_multicast in the model
    "yolo3_mobilenet0.25_voc",      # detection: upsampling, concat of mixed-dtype branches
    "center_net_resnet18_v1b_voc",  # detection: deconvolution, heatmap peak picking, topk
    "simple_pose_resnet18_v1b",     # pose: deconvolution heads
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
    assert rec["gluon_adapter"] == "ok", rec["gluon_adapter"]


def test_subset_covers_several_families(subset_records):
    families = {r["family"] for r in subset_records.values()}
    assert len(families) >= 5


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


def test_unbuildable_model_is_recorded_not_raised():
    rec = zoo_sweep.sweep_one("siamrpn_alexnet_v2_otb15", "bfloat16")  # takes two inputs
    assert rec["status"] == "not_buildable" and rec["reason"]


# ----------------------------------------------------------------------------- the whole zoo

@pytest.mark.slow
def test_full_zoo_sweep(tmp_path):
    """Every gluoncv model (heaviest last, within a time budget): >= 95% of the tested pass,
    none gives non-finite output where fp32 is finite."""
    from gluoncv import model_zoo
    budget = float(os.environ.get("ZOO_SWEEP_BUDGET_S", "2100"))
    records = zoo_sweep.run_sweep(list(model_zoo.get_model_list()), timeout=150, budget=budget,
                                  json_path=str(tmp_path / "zoo_sweep.json"), progress=False)
    summary = zoo_sweep.summarize(records)
    assert summary["tested"] > 0
    assert summary["nonfinite_models"] == []
    assert summary["pass_rate"] >= 0.95, [r["model"] for r in records if r["status"] == "fail"]
