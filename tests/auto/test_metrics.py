"""The user's own metric as the automatic mode's check (mxnet_amp.auto.metrics: metric=,
max_drop=)."""
import numpy as np
import pytest

from mxnet_amp.auto import auto_convert_model
from mxnet_amp.auto.metrics import validate_passed
from mxnet_amp.errors import ArgumentError

from auto_models import cancellation_model, clean_model, run

pytestmark = pytest.mark.filterwarnings("ignore:type inference leaves")


def test_metric_keeps_a_node_in_float32_only_where_the_metric_drops():
    """The cancellation model's output columns 0-3 come from fc_c (wrecked in float16),
    4-19 from the clean tanh stack. A metric of the clean columns does not drop: nothing is
    kept (the default check keeps fc_c). One of fc_c's columns drops: fc_c is kept, for the
    metric."""
    sym, args, x = cancellation_model()
    ref = run(sym, args, {}, x)

    def clean(outs):
        return -float(np.abs(outs[0][:, 4:] - ref[:, 4:]).max())

    def wrecked(outs):
        return -float(np.abs(outs[0][:, :4] - ref[:, :4]).max())
    *_, report = auto_convert_model(sym, args, {}, x, quiet=True, metric=clean, max_drop=0.01)
    assert report.kept_fp32 == () and report.executions == 2 and report.criterion == "metric"
    assert report.metric["name"] == "clean" and report.metric["drop"] <= 0.01
    *_, report = auto_convert_model(sym, args, {}, x, quiet=True, metric=wrecked, max_drop=0.01)
    assert [(k.name, k.reason) for k in report.kept_fp32] == [("fc_c", "metric")]
    assert report.validated and "wrecked" in report.criterion_text()


def test_metric_arguments_are_checked():
    sym, args, x = clean_model()
    with pytest.raises(ValueError, match="max_drop"):
        auto_convert_model(sym, args, {}, x, metric=lambda o: 0.0)
    with pytest.raises(ValueError, match="not both"):
        auto_convert_model(sym, args, {}, x, metric=lambda o: 0.0, max_drop=1,
                           validate=lambda r, o: True)
    with pytest.raises(ValueError, match="drop must be"):
        auto_convert_model(sym, args, {}, x, metric=lambda o: 0.0, max_drop=1, drop="percent")


@pytest.mark.parametrize("returned", [float("nan"), np.float32("nan"), None, "yes"])
def test_a_validate_returning_no_verdict_is_refused(returned):
    """``bool(nan)`` is True: a validate() returning NaN (or None, or text) is an ArgumentError
    saying what came back, never a pass (newcomer audit, #42)."""
    sym, args, x = clean_model()
    with pytest.raises(ArgumentError, match=r"validate\(\) must return True or False, got"):
        auto_convert_model(sym, args, {}, x, validate=lambda r, o: returned, quiet=True)


def test_validate_passed_reads_bools_and_finite_numbers():
    """numpy's bool and 0/1 are verdicts too; NaN is not."""
    assert validate_passed(np.bool_(True)) and not validate_passed(False)
    assert validate_passed(1) and not validate_passed(0.0)
    with pytest.raises(ArgumentError, match="NaN score"):
        validate_passed(float("nan"))
