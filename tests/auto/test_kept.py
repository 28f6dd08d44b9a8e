"""mxnet_amp.auto.kept: every float32 node of the returned model, with its source, from the
conversion's ``fp32_nodes``; the report's one float32 story (issue 41, item 7)."""
import json

import mxnet as mx
import numpy as np

from mxnet_amp.auto import auto_convert_model
from mxnet_amp.auto.kept import SOURCES, all_kept, fp32_source
from mxnet_amp.auto.records import KeptNode, kept_groups
from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.options import EXCLUDED_REASON
from mxnet_amp.passes.onednn_reshapes import BLOCKED_RESHAPE_REASON
from mxnet_amp.passes.weight_range import out_of_range_weights, readers_kept
from mxnet_amp.policy import SlowKernel


def test_each_producer_reason_is_read_as_its_source():
    """The reasons as their producers write them (called here, so a reworded producer fails
    this test) map to their source; an unknown text is the conversion's."""
    graph = graph_from_symbol(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc"))
    big = {"fc_weight": mx.nd.array(np.full((2, 3), 1.9e5, np.float32))}
    tiny = {"fc_weight": mx.nd.array(np.full((2, 3), 1e-9, np.float32))}
    for weights in (big, tiny):
        (why,) = readers_kept(graph, out_of_range_weights(weights, "float16")).values()
        assert fp32_source(why) == "weight range"
    assert fp32_source(SlowKernel("Convolution", 16, "10x slower").why()) == "slow kernel"
    assert fp32_source("tuned: float16 2 ms vs float32 1 ms with its casts (fc)") == "tuned"
    assert fp32_source(EXCLUDED_REASON) == "user"
    assert fp32_source(BLOCKED_RESHAPE_REASON) == "oneDNN reshape"
    assert fp32_source("weight of evidence") == "conversion"
    assert set(SOURCES) >= {"user", "weight range", "slow kernel", "tuned", "conversion"}


def test_tune_reason_is_read_as_tuned():
    """A timing's reason, written by tune itself."""
    from mxnet_amp.tune.timing import KernelTiming
    from mxnet_amp.tune.tuning import KernelCase
    case = KernelCase("FullyConnected", (("num_hidden", "8"),), (("data", (2, 4)),))
    assert fp32_source(KernelTiming(case, 1e-3, 2e-3).reason("float16")) == "tuned"


class _Conversion:
    """The two fields all_kept reads."""

    def __init__(self, names, fp32_nodes):
        x = mx.sym.var("data")
        for n in names:
            x = mx.sym.relu(x, name=n)
        self.original, self.fp32_nodes = graph_from_symbol(x), fp32_nodes


def test_all_kept_lists_every_fp32_node_in_graph_order_with_the_search_own_records():
    conv = _Conversion(["a", "b", "c", "d"], {
        "d": "weight w is out of float16 range: max |w| 1.9e+05 (float16 holds up to 65504)",
        "b": "auto: accuracy: 0.3", "a": EXCLUDED_REASON,
        "c": "auto: kept float32 while the automatic mode searches"})
    searched = [KeptNode("b", "relu", "accuracy", 0.3), KeptNode("a", "relu", "user")]
    kept = all_kept(searched, conv)
    assert [(k.name, k.reason) for k in kept] == [("a", "user"), ("b", "accuracy"),
                                                  ("d", "weight range")]
    assert kept[1] is searched[0]
    assert kept[2].op == "relu" and "1.9e+05" in kept[2].detail
    assert all_kept(searched, None) == tuple(searched)


def test_kept_groups_names_each_reason_once():
    kept = [KeptNode(n, "relu", r) for n, r in
            [("a", "accuracy"), ("w1", "weight range"), ("b", "accuracy"), ("c", "accuracy"),
             ("e", "accuracy")]]
    assert kept_groups(kept) == " (accuracy: a, b, c and 1 more; weight range: w1)"
    assert kept_groups([]) == ""


def _fc_big_model():
    """data -> fc1 -> relu -> fc_big -> relu -> fc3: fc_big's weights reach 1.9e5 (float16
    holds 65504), on an input channel so small that no tensor leaves float16's range."""
    rng = np.random.RandomState(0)
    d = mx.sym.var("data")
    h = mx.sym.relu(mx.sym.FullyConnected(d, num_hidden=16, name="fc1"), name="relu1")
    h = mx.sym.relu(mx.sym.FullyConnected(h, num_hidden=16, name="fc_big"), name="relu2")
    out = mx.sym.FullyConnected(h, num_hidden=4, name="fc3")
    w1 = rng.randn(16, 8).astype(np.float32) * 0.3
    w1[0] *= 1e-5   # channel 0 of relu1 stays below ~1e-4
    w_big = rng.randn(16, 16).astype(np.float32) * 0.3
    w_big[0, 0] = 1.9e5
    args = {"fc1_weight": mx.nd.array(w1), "fc1_bias": mx.nd.zeros(16),
            "fc_big_weight": mx.nd.array(w_big), "fc_big_bias": mx.nd.zeros(16),
            "fc3_weight": mx.nd.array(rng.randn(4, 16).astype(np.float32) * 0.3),
            "fc3_bias": mx.nd.zeros(4)}
    return out, args, mx.nd.array(rng.randn(8, 8).astype(np.float32))


def test_a_weight_the_range_guard_keeps_is_in_kept_fp32_summary_json_and_page():
    """The issue's fc_big model converted to float16: the summary says "1 kept in float32
    (weight range: fc_big)", kept_fp32 lists it with the guard's reason, and so do the
    JSON and the HTML table."""
    from mxnet_amp.auto.html import auto_tables
    sym, args, x = _fc_big_model()
    _, _, _, rep = auto_convert_model(sym, args, {}, {"data": x}, "float16", quiet=True)
    assert rep.validated
    assert "1 kept in float32 (weight range: fc_big)" in rep.summary()
    assert "fc_big (FullyConnected): weight range: weight fc_big_weight is out of float16 range" \
        in rep.summary()
    assert [(k.name, k.reason) for k in rep.kept_fp32] == [("fc_big", "weight range")]
    assert rep.excluded_sym_names == ["fc_big"]
    d = json.loads(json.dumps(rep.to_dict()))
    assert [(k["name"], k["reason"]) for k in d["kept_fp32"]] == [("fc_big", "weight range")]
    (table,) = auto_tables(d)
    assert table.rows[0][:3] == ("fc_big", "FullyConnected", "weight range guard")


def test_a_clean_model_keeps_nothing_and_says_so():
    sym, args, x = _fc_big_model()
    args = {**args, "fc_big_weight": mx.nd.array(np.clip(args["fc_big_weight"].asnumpy(), -1, 1))}
    _, _, _, rep = auto_convert_model(sym, args, {}, {"data": x}, "float16", quiet=True)
    assert rep.kept_fp32 == () and "0 kept in float32," in rep.summary()


def test_the_caller_exclusions_and_the_guard_are_both_listed():
    sym, args, x = _fc_big_model()
    _, _, _, rep = auto_convert_model(sym, args, {}, {"data": x}, "float16", quiet=True,
                                      excluded_sym_names=["fc1"])
    assert [(k.name, k.reason) for k in rep.kept_fp32] == [("fc1", "user"), ("fc_big", "weight range")]
    assert "2 kept in float32 (user: fc1; weight range: fc_big)" in rep.summary()


def test_a_node_the_slow_kernel_rule_keeps_is_listed_with_the_rule():
    """bfloat16: a depthwise convolution over 8 channels (the [[slow_kernel]] rule of the
    shipped list) is listed once, its reason the rule's, said once."""
    rng = np.random.RandomState(0)
    c = mx.sym.Convolution(mx.sym.var("data"), kernel=(3, 3), pad=(1, 1), num_filter=8, name="conv")
    dw = mx.sym.Convolution(c, kernel=(3, 3), pad=(1, 1), num_filter=8, num_group=8, name="dw")
    out = mx.sym.FullyConnected(mx.sym.flatten(mx.sym.relu(dw)), num_hidden=4, name="fc")
    shapes = dict(zip(out.list_arguments(), out.infer_shape(data=(2, 3, 8, 8))[0]))
    args = {k: mx.nd.array(rng.randn(*v) * 0.3) for k, v in shapes.items() if k != "data"}
    _, _, _, rep = auto_convert_model(out, args, {}, {"data": mx.nd.array(rng.randn(2, 3, 8, 8))},
                                      "bfloat16", quiet=True)
    assert [(k.name, k.reason) for k in rep.kept_fp32] == [("dw", "slow kernel")]
    assert "1 kept in float32 (slow kernel: dw)" in rep.summary()
    assert "dw (Convolution): slow kernel: depthwise Convolution" in rep.summary()
