"""The automatic mode's report (mxnet_amp.auto.records.AutoReport): plain, frozen data."""
import json

import pytest

from mxnet_amp.auto import auto_convert_model

from auto_models import overflow_model

pytestmark = pytest.mark.filterwarnings("ignore:type inference leaves")


def test_report_is_plain_data():
    sym, args, x = overflow_model()
    *_, report = auto_convert_model(sym, args, {}, x, quiet=True)
    d = json.loads(json.dumps(report.to_dict()))
    assert d["executions"] == 2 and d["execution"] == "emulated"
    assert {k["name"] for k in d["kept_fp32"]} == {"fc_a", "fc_a2"}
    assert report.excluded_sym_names == ["fc_a", "fc_a2"]
    assert "fc_a (FullyConnected): overflow" in report.summary()
    with pytest.raises(Exception):
        report.executions = 0                       # frozen
