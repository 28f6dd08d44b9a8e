"""Range culprits (mxnet_amp.auto.ranges): the ops that would hold an overflowing or a costly
underflowing tensor of the float32 reference run in low precision are kept in float32 with
no execution of their own, each with the figures that put it there."""
import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.auto import auto_convert_model, check_outputs
from mxnet_amp.auto.ranges import tensor_name
from mxnet_amp.convert import convert_model
from mxnet_amp.emulation import emulate_model
from mxnet_amp.mx.io import graph_from_symbol

from auto_models import overflow_model, run, underflow_model, within_tolerance
from helpers import assert_dtype_tags

pytestmark = pytest.mark.filterwarnings("ignore:type inference leaves")


def test_overflow_branch_gets_exactly_its_offending_nodes_excluded():
    sym, args, x = overflow_model()
    ref = run(sym, args, {}, x)
    plain = run(*emulate_model(*convert_model(sym, args, {})), x)
    assert not np.isfinite(plain).all()                  # the plain conversion overflows
    new_sym, new_args, new_auxs, report = auto_convert_model(sym, args, {}, x, quiet=True)
    assert_dtype_tags(new_sym, new_args, new_auxs)
    kept = {k.name: k for k in report.kept_fp32}
    # fc_a produces the overflow; fc_a2 would cast relu_a's overflowing output to fp16
    assert set(kept) == {"fc_a", "fc_a2"}
    assert all(k.reason == "overflow" and k.value > 65504 for k in kept.values())
    assert kept["fc_a2"].tensor == "relu_a"
    assert report.executions == 2
    assert report.validated
    assert within_tolerance(report, new_sym, new_args, new_auxs, x, ref)
    # the report exposes the returned model's conversion: its exclusions and decisions
    assert set(report.conversion.fp32_nodes) == set(report.excluded_sym_names) == {"fc_a", "fc_a2"}
    # each with the reason automatic mode kept it for, as the report shows it
    assert report.conversion.result.decisions["fc_a"].reason.startswith(f"auto: {kept['fc_a'].reason}: ")
    assert report.conversion.symbol.tojson(remove_amp_cast=False) == new_sym.tojson(remove_amp_cast=False)
    assert "conversion" not in report.to_dict()


def test_underflow_branch_gets_exactly_its_offending_node_excluded():
    sym, args, x = underflow_model()
    ref = run(sym, args, {}, x)
    # fc_u's weights (~1e-9) underflow float16 too: unguarded, so that auto's own search
    # meets the underflow of its outputs
    with pytest.warns(UserWarning, match="fc_u_weight underflows float16"):
        plain = run(*emulate_model(*convert_model(sym, args, {}, guard_weight_range=False)), x)
    assert not check_outputs([ref], [plain], "float16").passed
    new_sym, new_args, new_auxs, report = auto_convert_model(sym, args, {}, x, quiet=True,
                                                             guard_weight_range=False)
    assert [(k.name, k.reason) for k in report.kept_fp32] == [("fc_u", "underflow")]
    assert report.kept_fp32[0].value == 1.0                # every value flushed
    assert report.executions == 2 and report.validated
    assert within_tolerance(report, new_sym, new_args, new_auxs, x, ref)


def test_overflow_culprits_need_no_attribution_run():
    sym, args, x = overflow_model()
    *_, report = auto_convert_model(sym, args, {}, x, quiet=True)
    assert report.executions == 2 and not report.attribution
    assert report.kept_fp32[0].detail.startswith("overflow: max |x| of ")
    assert "> 65504" in report.kept_fp32[0].detail


def test_tensor_names_carry_the_output_index_past_the_first():
    """The report names a node's first output by the node, the others with ``[k]``."""
    split = mx.sym.split(mx.sym.var("data"), num_outputs=2, name="halves")
    graph = graph_from_symbol(mx.sym.Group([split[0], split[1]]))
    i = graph.index_of("halves")
    assert tensor_name(graph, (i, 0)) == "halves"
    assert tensor_name(graph, (i, 1)) == "halves[1]"
