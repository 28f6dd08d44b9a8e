"""mxnet_amp.report.sections (report/sections): the typed parts a command adds to a report,
read by field by the pages and written as the JSON report's ``extra`` object."""
import dataclasses
import json

import mxnet as mx

from mxnet_amp.convert import convert_graph
from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.options import make_options
from mxnet_amp.report.model import build_report
from mxnet_amp.report.pages import report_html, report_notes, result_rows
from mxnet_amp.report.sections import AutoSection, DemoSection, DemoSpeed, OnnxSection, sections_dict

DEMO = DemoSection(native=True, execution="native bfloat16", input="2x3x32x32",
                   relative_max_error=1.5e-3, top1_agreement=0.5,
                   speed=DemoSpeed(speedup=2.0, fp32_ms=10.0, low_ms=5.0, runs=3))


def _report():
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc")
    return build_report(convert_graph(graph_from_symbol(sym), make_options("bfloat16"), data_names=["data"]),
                        model="tiny")


def test_sections_dict_writes_notes_then_onnx_then_the_demo_then_auto():
    """The JSON report's ``extra``: each part only when present, in one fixed order, the
    demo's figures flat (speed first) as the report has always written them."""
    assert sections_dict((), None, None, None) == {}
    out = sections_dict(("a note",), OnnxSection({"path": "m.onnx", "seconds": 0.5}), DEMO,
                        AutoSection(validated=True, notes=(), record={"validated": True}))
    assert list(out) == ["notes", "onnx", "speedup", "fp32_ms", "low_ms", "runs", "native", "execution",
                         "input", "relative_max_error", "top1_agreement", "auto"]
    assert out["onnx"] == {"path": "m.onnx", "seconds": 0.5} and out["auto"] == {"validated": True}
    unmeasured = sections_dict((), None, dataclasses.replace(DEMO, speed=None, top1_agreement=None), None)
    assert "speedup" not in unmeasured and unmeasured["top1_agreement"] is None


def test_a_report_without_sections_writes_no_extra_and_with_them_reads_them_by_field():
    """The report's JSON holds ``extra`` only when a command added something; the pages read
    the demo's figures and the automatic mode's verdict and notes from the typed fields."""
    report = _report()
    assert "extra" not in report.to_dict() and result_rows(report) == []
    demo = dataclasses.replace(report, demo=DEMO, notes=("the machine note",))
    assert json.loads(demo.to_json())["extra"]["relative_max_error"] == 1.5e-3
    rows = dict(result_rows(demo))
    assert rows["execution"] == "native bfloat16" and rows["top-1 agreement"] == "50%"
    assert "speed-up x2.00" in rows["speed (median, same process)"]
    unmeasured = dict(result_rows(dataclasses.replace(demo, demo=dataclasses.replace(DEMO, speed=None))))
    assert unmeasured["speed"].startswith("not measured")
    auto = dataclasses.replace(report, notes=("the machine note",),
                               auto=AutoSection(validated=False, notes=("the machine note", "auto's own"),
                                                record={"validated": False}))
    assert report_notes(auto) == ["the machine note", "auto's own"]   # each said once
    assert "NOT validated" not in report_html(auto)   # no result rows: no verdict shown
    assert "NOT validated" in report_html(dataclasses.replace(auto, demo=DEMO))


def test_the_demo_chunk_is_written_only_when_the_batch_ran_in_chunks():
    """``chunk`` (the samples one demo run held) follows the demo's figures when set."""
    assert "chunk" not in sections_dict((), None, DEMO, None)
    out = sections_dict((), None, dataclasses.replace(DEMO, chunk=256), None)
    assert list(out)[-1] == "chunk" and out["chunk"] == 256
