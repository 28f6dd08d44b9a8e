"""The conversion options are built once, at the public edge (mxnet_amp.options).

Every public converter takes the same op-list keywords (``follow_ops`` included, as
:func:`mxnet_amp.load_policy` does) and nothing below them takes those keywords: internal
functions receive one :class:`~mxnet_amp.options.ConvertOptions`.
"""
from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import mxnet as mx
import numpy as np
import pytest

import mxnet_amp as amp
from mxnet_amp.cli.main import main
from mxnet_amp.convert import convert_model_full
from mxnet_amp.options import ConvertOptions, OpLists, make_options

from helpers import graph_of

PACKAGE = Path(amp.__file__).resolve().parent
# the keywords of load_policy (the lists as data) plus the names kept in float32
POLICY_KEYWORDS = {"target_dtype", "target_dtype_ops", "fp32_ops", "widest_dtype_ops",
                   "conditional_fp32_ops", "follow_ops", "excluded_sym_names",
                   "cast_optional_params", "overrides"}
PUBLIC_CONVERTERS = {
    "convert_symbol": amp.convert_symbol, "convert_model": amp.convert_model,
    "convert_hybrid_block": amp.convert_hybrid_block, "convert_checkpoint": amp.convert_checkpoint,
    "convert_bucketing_module": amp.convert_bucketing_module,
    "auto_convert_model": amp.auto_convert_model,
}
# where the keywords may appear: the public converters and the two builders they call
EDGE = set(PUBLIC_CONVERTERS) | {"make_options", "load_policy"}


@pytest.mark.parametrize("name", sorted(PUBLIC_CONVERTERS))
def test_every_public_converter_takes_every_list_keyword(name):
    params = set(inspect.signature(PUBLIC_CONVERTERS[name]).parameters)
    assert POLICY_KEYWORDS <= params, sorted(POLICY_KEYWORDS - params)


def test_no_function_below_the_public_edge_takes_the_keywords():
    bundle = POLICY_KEYWORDS - {"target_dtype", "cast_optional_params"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = {a.arg for a in node.args.args + node.args.kwonlyargs}
                if names & bundle and node.name not in EDGE:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}")
    assert found == []


def _fc_exp():
    """data -> FullyConnected (a target op) -> exp (float32 in the shipped lists)."""
    fc = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=4, name="fc")
    sym = mx.sym.exp(fc, name="e")
    rng = np.random.RandomState(0)
    args = {"fc_weight": mx.nd.array(rng.randn(4, 3)), "fc_bias": mx.nd.array(rng.randn(4))}
    return sym, args


def _exp_reads_fc_directly(sym) -> bool:
    graph = graph_of(sym)
    exp = graph.nodes[graph.index_of("e")]
    return graph.nodes[exp.inputs[0].node].name == "fc"


def test_follow_ops_moves_an_op_to_the_follow_category():
    sym, args = _fc_exp()
    # by default exp reads fc's float16 output through a cast to float32
    assert not _exp_reads_fc_directly(amp.convert_symbol(sym))
    assert _exp_reads_fc_directly(amp.convert_symbol(sym, follow_ops=["exp"]))
    new_sym, new_args, _ = amp.convert_model(sym, args, {}, follow_ops=["exp"])
    assert _exp_reads_fc_directly(new_sym)
    conv = convert_model_full(sym, args, {}, make_options("float16", OpLists(follow_ops=["exp"])))[3]
    assert conv.result.node_dtypes["e"] == "float16"
    assert conv.result.decisions["e"].reason.startswith("follow")


def test_follow_ops_through_a_checkpoint_and_the_cli(tmp_path, capsys):
    sym, args = _fc_exp()
    prefix = str(tmp_path / "m")
    mx.model.save_checkpoint(prefix, 0, sym, args, {})
    conv = amp.convert_checkpoint(prefix, 0, follow_ops=["exp"], write=False)[0]
    assert conv.result.node_dtypes["e"] == "float16"
    report = tmp_path / "r.json"
    assert main(["inspect", prefix, "--follow-ops", "exp", "--report", str(report), "-q"]) == 0
    fp32 = {n["name"] for n in json.loads(report.read_text())["fp32_nodes"]}
    assert "e" not in fp32
    assert main(["inspect", prefix, "--report", str(report), "-q"]) == 0
    assert "e" in {n["name"] for n in json.loads(report.read_text())["fp32_nodes"]}


def test_options_are_built_once_and_frozen():
    options = make_options("bf16", OpLists(fp32_ops=["FullyConnected"], excluded_sym_names=["fc"]), cast_optional_params=False)
    assert options.target_dtype == "bfloat16"
    assert "FullyConnected" in options.policy.fp32
    assert options.excluded == frozenset({"fc"}) and not options.cast_optional_params
    with pytest.raises(AttributeError):
        options.excluded = frozenset()
    other = options.excluding(["a", "b"])
    assert other.excluded == {"a", "b"} and options.excluded == {"fc"}
    # one mapping keeps nodes float32, each with its reason: the caller's say so
    assert dict(options.fp32_nodes) == {"fc": "excluded by name (excluded_sym_names / --exclude)"}
    kept = options.keeping({**options.fp32_nodes, "g": "a rule of ours"})
    assert kept.excluded == {"fc", "g"} and kept.keeping_only(["g"]).fp32_nodes == {"g": "a rule of ours"}
    assert other.policy is options.policy
    assert isinstance(other, ConvertOptions)
    with pytest.raises(amp.UnknownOpError):
        make_options("float16", OpLists(follow_ops=["NoSuchOp"]))


def test_slow_kernel_nodes_join_fp32_nodes_under_the_reasons_there():
    """The [[slow_kernel]] rule is evaluated per node (a loop body's too) into fp32_nodes:
    the caller's exclusion keeps its own reason, a node tune timed is left to its timing."""
    from dataclasses import replace

    from mxnet_amp.mx.io import graph_from_symbol
    from mxnet_amp.options import EXCLUDED_REASON

    def depthwise(x, name):
        return mx.sym.Convolution(x, num_filter=24, num_group=24, kernel=(3, 3), pad=(1, 1), name=name)
    outs, states = mx.sym.contrib.foreach(lambda x, s: (depthwise(x, "dw_body"), [s[0] + 1]),
                                          mx.sym.var("data"), [mx.sym.var("s")], name="loop")
    top = depthwise(depthwise(states[0], "dw_top"), "dw_excluded")
    graph = graph_from_symbol(mx.sym.Group([outs, top]))
    options = make_options("bfloat16", OpLists(excluded_sym_names=["dw_excluded"])).with_slow_kernels(graph)
    assert set(options.fp32_nodes) == {"dw_body", "dw_top", "dw_excluded"}
    assert options.fp32_nodes["dw_excluded"] == EXCLUDED_REASON
    assert options.fp32_nodes["dw_top"].startswith("slow kernel: depthwise Convolution over a "
                                                   "channel count not a multiple of 16 (")
    from mxnet_amp.policy import reason_kind
    assert reason_kind(options.fp32_nodes["dw_top"]) == "slow kernel"
    assert reason_kind(options.fp32_nodes["dw_excluded"]) == "user exclusion"
    timed = replace(make_options("bfloat16"), timed_nodes=frozenset({"dw_top"})).with_slow_kernels(graph)
    assert set(timed.fp32_nodes) == {"dw_body", "dw_excluded"}
    assert make_options("float16").with_slow_kernels(graph).fp32_nodes == {}


def test_make_options_takes_the_contrib_lists_as_one_value():
    """The op lists and exclusions travel as one OpLists; every other option is keyword-only,
    and a list given where the OpLists goes is refused by name."""
    from mxnet_amp.errors import ArgumentError
    options = make_options("float16", OpLists(fp32_ops=["FullyConnected"], excluded_sym_names="fc"),
                           cast_optional_params=False)
    assert options.policy.decide("FullyConnected", {}).value == "fp32"
    assert dict(options.fp32_nodes) == {"fc": "excluded by name (excluded_sym_names / --exclude)"}
    assert options.cast_optional_params is False
    with pytest.raises(ArgumentError, match="lists must be an OpLists, got list"):
        make_options("float16", ["FullyConnected"])
    with pytest.raises(TypeError):
        make_options("float16", OpLists(), False)   # cast_optional_params is keyword-only
