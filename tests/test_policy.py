"""mxnet_amp.policy: the op categories read from the shipped lists, with user overrides."""
import pytest

from mxnet_amp.errors import ListError, TargetDtypeError, UnknownOpError
from mxnet_amp.policy import Category, check_target_dtype
from mxnet_amp.policy_load import lists_dir, load_policy


def test_check_target_dtype_normalises_aliases_and_refuses_others():
    """'fp16', 'HALF' and 'bf16' are the full names; float32 is a TargetDtypeError."""
    assert check_target_dtype("fp16") == "float16"
    assert check_target_dtype("HALF") == "float16"
    assert check_target_dtype("bf16") == "bfloat16"
    with pytest.raises(TargetDtypeError, match="float16"):
        check_target_dtype("float32")


def test_shipped_lists_put_core_ops_in_their_categories():
    """FullyConnected computes in the target dtype, softmax in float32, and the explanation
    names the list and its reason."""
    policy = load_policy("float16")
    assert policy.decide("FullyConnected", {}) is Category.TARGET
    assert policy.decide("softmax", {}) is Category.FP32
    decision = policy.explain("FullyConnected", {})
    assert decision.category is Category.TARGET and decision.reason.startswith("target list: FullyConnected")
    assert policy.decide("surely_not_an_op", {}) is None
    assert (lists_dir() / "bfloat16.toml").is_file()


def test_a_slow_depthwise_bfloat16_convolution_runs_in_float32():
    """The bf16 list's slow-kernel rule: a depthwise conv over 24 channels stays fp32, over 32 not."""
    policy = load_policy("bfloat16")
    slow = {"num_group": "24", "num_filter": "24", "kernel": "(3, 3)"}
    fast = {"num_group": "32", "num_filter": "32", "kernel": "(3, 3)"}
    assert policy.slow_kernel("Convolution", slow).why().startswith("slow kernel: depthwise Convolution")
    assert policy.slow_kernel("Convolution", fast) is None
    # a rule on nodes: the op's own answer stays the target list's
    assert policy.decide("Convolution", slow) is Category.TARGET


def test_replace_overrides_leave_unnamed_target_ops_to_follow():
    """overrides='replace' (contrib's meaning): target_dtype_ops=['FullyConnected'] makes
    Convolution follow its inputs; 'move' keeps Convolution a target op."""
    replaced = load_policy("float16", target_dtype_ops=["FullyConnected"])
    assert replaced.decide("FullyConnected", {}) is Category.TARGET
    assert replaced.decide("Convolution", {}) is Category.FOLLOW
    moved = load_policy("float16", fp32_ops=["FullyConnected"], overrides="move")
    assert moved.decide("FullyConnected", {}) is Category.FP32
    assert moved.decide("Convolution", {}) is Category.TARGET


def test_conditional_ops_run_in_float32_only_for_listed_values():
    """A condition on Activation act_type=softrelu sends that node to fp32; relu follows."""
    policy = load_policy("float16", conditional_fp32_ops=[("Activation", "act_type", ["softrelu"])])
    assert policy.decide("Activation", {"act_type": "softrelu"}) is Category.FP32
    assert policy.decide("Activation", {"act_type": "relu"}) is Category.FOLLOW


def test_bad_overrides_are_typed_errors():
    """An unknown op, an op named twice, and an unknown mode are refused with the name."""
    with pytest.raises(UnknownOpError, match="NotAnOp"):
        load_policy("float16", fp32_ops=["NotAnOp"])
    with pytest.raises(ListError):
        load_policy("float16", fp32_ops=["relu"], target_dtype_ops=["relu"])
    with pytest.raises(ListError, match="overrides must be"):
        load_policy("float16", overrides="merge")


def test_a_reason_is_its_text_with_a_kind():
    """A Reason prints, compares, hashes and dumps to JSON as its words; its kind is what
    readers group by; it survives a pickle (the automatic mode's workers) and refuses an
    unknown kind."""
    import json
    import pickle
    from mxnet_amp.policy import REASON_KINDS, Reason, reason_kind
    why = Reason("kept by the search", "search")
    assert why == "kept by the search" and hash(why) == hash("kept by the search")
    assert json.dumps({"n": why}) == '{"n": "kept by the search"}' and f"{why}" == "kept by the search"
    assert reason_kind(why) == "search" and reason_kind("words") is None
    again = pickle.loads(pickle.dumps(why))
    assert again == why and reason_kind(again) == "search"
    assert "search" in REASON_KINDS
    with pytest.raises(ValueError, match="reason kind must be one of"):
        Reason("x", "nonsense")


def test_every_rule_that_keeps_a_node_float32_gives_its_kind():
    """User exclusions, the weight range guard, the slow kernel rule, oneDNN's reshapes and
    tune's timings each tag their reasons (the report groups by kind, not by words)."""
    from mxnet_amp.options import EXCLUDED_REASON, OpLists, make_options
    from mxnet_amp.passes.onednn_reshapes import BLOCKED_RESHAPE_REASON
    from mxnet_amp.policy import reason_kind
    from mxnet_amp.passes.weight_range import readers_kept
    from mxnet_amp.ir.graph import GraphBuilder, Node, Entry
    assert reason_kind(EXCLUDED_REASON) == "user exclusion"
    assert reason_kind(make_options("float16", OpLists(excluded_sym_names=["fc"])).fp32_nodes["fc"]) == "user exclusion"
    assert reason_kind(BLOCKED_RESHAPE_REASON) == "onednn reshape"
    b = GraphBuilder()
    x, w = b.add(Node("null", "x")), b.add(Node("null", "w"))
    fc = b.add(Node("FullyConnected", "fc", (Entry(x), Entry(w)), {"num_hidden": "2"}))
    kept = readers_kept(b.build([Entry(fc)]), {"w": "holds inf"})
    assert kept == {"fc": "holds inf"} and reason_kind(kept["fc"]) == "weight range"
