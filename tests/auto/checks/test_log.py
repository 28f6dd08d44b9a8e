"""The search log (mxnet_amp.auto.checks.log): executions against the budget, each check
cached and logged as a step, and the report written from it."""
import math

from mxnet_amp.auto.checks.log import SearchLog
from mxnet_amp.auto.records import OutputCheck
from mxnet_amp.options import EXCLUDED_REASON


def check(passed, ratio):
    return OutputCheck("scale", passed, ratio, ratio, 0.01 * ratio, 0, 4)


def test_checks_are_cached_and_logged_in_order():
    log = SearchLog()
    log.step("reference")
    assert log.record(frozenset({"a"}), "check", check(False, 3.0)).passed is False
    log.record(frozenset({"a", "b"}), "shrink", check(True, 0.5))
    assert [s.kind for s in log.steps] == ["reference", "check", "shrink"]
    assert log.steps[2].excluded == 2 and log.steps[2].passed
    assert log.results[frozenset({"a"})].tolerance_ratio == 3.0


def test_the_budget_counts_executions():
    log = SearchLog()
    assert log.budget_left(None) and log.budget_left(1)
    log.executions = 2
    assert not log.budget_left(2) and log.budget_left(3) and log.budget_left(None)


def test_the_report_reads_the_returned_configurations_check_and_the_minimality():
    from types import SimpleNamespace

    log = SearchLog(executions=6, minimality="1-minimal: the kept node fails alone (0 executions)")
    log.record(frozenset({"fc"}), "validate", check(True, 0.4))
    config = SimpleNamespace(options=SimpleNamespace(target_dtype="float16"), execution="emulated",
                             ctx="cpu(0)", settings=SimpleNamespace(rtol=None, atol=None,
                                                                    tolerance=0.01))
    nodes = [SimpleNamespace(name=n, op=o, is_variable=v)
             for n, o, v in [("data", "null", True), ("fc", "FullyConnected", False),
                             ("relu", "relu", False)]]
    conversion = SimpleNamespace(original=SimpleNamespace(nodes=nodes),
                                 result=SimpleNamespace(node_dtypes={"fc": "float32",
                                                                     "relu": "float16"}),
                                 fp32_nodes={"fc": EXCLUDED_REASON})
    report = log.report(config, frozenset({"fc"}), (), conversion, [], True)
    assert report.validated and report.executions == 6 and report.tolerance == 0.01
    # every float32 node of the conversion is listed with its source (mxnet_amp.auto.kept)
    assert [(k.name, k.reason) for k in report.kept_fp32] == [("fc", "user")]
    assert report.op_nodes == 2 and report.low_precision_nodes == 1
    assert report.minimality.startswith("1-minimal")
    missing = log.report(config, frozenset(), (), conversion, [], True)
    assert not missing.validated and math.isinf(missing.tolerance_ratio)
