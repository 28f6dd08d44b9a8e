"""The report's tables are one model (mxnet_amp.report.tables.Table) rendered to text and HTML: a table
added to the list shows in both renderings, and each table shows only where its ``formats``
say (issue 22 item 5)."""
from __future__ import annotations

import html

from helpers import small_model
from mxnet_amp.convert import convert_model_full
from mxnet_amp.options import make_options
from mxnet_amp.report.model import build_report
from mxnet_amp.report.pages import format_table, report_page, report_tables, report_text
from mxnet_amp.report.tables import HTML, TEXT, Rich, Table, render_html, render_text


def _report():
    sym, args, auxs = small_model()
    _, new_args, new_auxs, conv = convert_model_full(sym, args, auxs, make_options("bfloat16"))
    return build_report(conv, args, auxs, new_args, new_auxs, model="small")


def test_a_table_added_to_the_model_shows_in_text_and_html():
    report = _report()
    extra = Table("Memory <per> op", header=("op", "bytes", "where"),
                  rows=(("Convolution", 1234, "conv1 & conv2"), ("FullyConnected", 56, "fc")),
                  total=("total", 1290, ""), notes=("measured once",), wide=(2,))
    tables = [*report_tables(report), extra]
    text, page = report_text(report, tables), report_page(report, tables)
    for shown in ("Memory <per> op", "Convolution", "1234", "conv1 & conv2", "1290", "measured once"):
        assert shown in text, shown
        assert html.escape(shown) in page, shown
    # the grid lines the columns up under their heads in the terminal
    lines = text.splitlines()[text.splitlines().index("Memory <per> op"):]
    head = next(line for line in lines if line.lstrip().startswith("op ") and "bytes" in line)
    row = next(line for line in lines if line.lstrip().startswith("FullyConnected"))
    assert head.index("bytes") + len("bytes") == row.index("56") + len("56")
    # without the added table neither rendering has it
    assert "Memory" not in format_table(report) and "Memory" not in report_page(report, report_tables(report))


def test_every_report_table_renders_where_its_formats_say():
    """The summary is page-only, the fusion-barrier line text-only, the op counts both; the
    report's own text and page are these renderings of these tables."""
    report = _report()
    tables = report_tables(report)
    assert format_table(report) == report_text(report, tables)
    by_title = {t.title.html if isinstance(t.title, Rich) else t.title: t for t in tables}
    assert by_title["Summary"].formats == {HTML}
    ops = by_title["Op nodes by op type and the dtype they compute in"]
    assert ops.formats == {TEXT, HTML}
    assert ops.title in format_table(report) and ops.title in report_page(report, tables)
    assert "Summary" not in "\n".join(render_text([by_title["Summary"]]))
    only_text = Table("only in the terminal", formats=frozenset({TEXT}))
    assert render_html([only_text]) == [] and render_text([only_text]) == ["", "only in the terminal"]


def test_rich_words_read_differently_and_an_empty_form_is_left_out():
    t = Table(Rich("plain heading", ""), rows=((Rich("a, … (+2)", "a, b, c"), 3),),
              notes=(Rich("terminal note", ""), Rich("", "<p class='x'>page note</p>")))
    text, [page] = "\n".join(render_text([t])), render_html([t])
    assert "plain heading" in text and "a, … (+2)" in text and "terminal note" in text
    assert "page note" not in text and "<h2>" not in page and "a, b, c" in page
    assert "<p class='x'>page note</p>" in page and "terminal note" not in page


def test_every_rendering_says_which_cpu_it_ran_on():
    """Text, JSON and HTML carry hardware.cpu_summary(): the ISA flags, and whether bf16
    executes natively (what the probe found, not only what the flags list)."""
    import json

    from mxnet_amp.mx.hardware import bf16_runs_natively, cpu_summary
    report = _report()
    assert report.cpu == cpu_summary()
    assert report.cpu.endswith(f"native bfloat16: {'yes' if bf16_runs_natively() else 'no'}")
    assert json.loads(report.to_json())["cpu"] == report.cpu
    assert f"CPU: {report.cpu}" in format_table(report)
    page = report_page(report, report_tables(report))
    assert f"CPU: {html.escape(report.cpu)}" in page
