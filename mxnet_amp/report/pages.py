"""The conversion report as tables, and the terminal text and the HTML page made of them.

:func:`report_tables` reads a :class:`~mxnet_amp.report.model.ConversionReport` once into
:class:`~mxnet_amp.report.tables.Table` values; :func:`report_text` and :func:`report_page`
render that one list, so the terminal and the page cannot drift apart. The automatic mode's
rows, tables and chart come in as :class:`Sections` (built by
:func:`mxnet_amp.auto.html.auto_sections`): the report never imports the automatic mode.
Nothing here runs MXNet.
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Callable, Mapping

from .model import ConversionReport, tuning_summary
from .tables import HTML, Rich, Table, render_html, render_text, shorten

__all__ = ["Sections", "NO_SECTIONS", "report_tables", "report_text", "report_page", "report_html",
           "report_notes", "format_table", "summary_rows", "result_rows", "size_text", "WEIGHT_CAST_HINT"]


@dataclass(frozen=True)
class Sections:
    """What a caller adds to the report's pages: the automatic mode's rows of what it
    measured, its tables and its attribution chart (HTML), built from the report's ``auto`` by
    :func:`mxnet_amp.auto.html.auto_sections`. The report itself never imports the automatic
    mode; the command line passes these in.

    Attributes
    ----------
    rows : tuple of (str, str)
        ``(label, value)`` rows shown first under "Result".
    tables : tuple of Table
        Tables shown after every table of the report's own.
    chart : str
        HTML shown on the page after the tables ('' for none).
    """
    rows: tuple[tuple[str, str], ...] = ()
    tables: tuple[Table, ...] = ()
    chart: str = ""


NO_SECTIONS = Sections()

_CSS = """body{font-family:DejaVu Sans,Arial,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;margin:8px 0 18px}td,th{border:1px solid #ccc;padding:3px 9px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}td.names{text-align:left}
.pic{overflow:auto;border:1px solid #ddd;padding:6px}code{background:#f5f5f5;padding:0 3px}
.bad{color:#b00020;font-weight:bold}.good{color:#1b7a2f;font-weight:bold}li{margin:3px 0}"""

WEIGHT_CAST_HINT = ("{n} of the amp_casts convert weights at every run; cast_optional_params "
                    "(--cast-optional-params) stores them converted")
_ONLY_HTML = frozenset({HTML})


def size_text(n: int | None) -> str:
    """``n`` bytes in B / KiB / MiB / GiB ('?' when unknown)."""
    if n is None:
        return "?"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def _fmt(x: float | None, spec: str = ".3g") -> str:
    return "?" if x is None else format(x, spec)


def report_notes(report: ConversionReport) -> list[str]:
    """What the reader should know about ``report``, one sentence each: the weight-cast
    hint, the notes the command added (``notes``: hardware, emulation, degenerate
    outputs) and automatic mode's notes (the float32 reference holding inf/nan, say)."""
    notes = []
    if report.weight_casts:
        notes.append(WEIGHT_CAST_HINT.format(n=report.weight_casts))
    notes += report.notes
    if report.auto is not None:
        notes += report.auto.notes
    return list(dict.fromkeys(notes))   # each said once, in order


def summary_rows(report: ConversionReport) -> list[tuple[str, str]]:
    """``(label, value)`` rows summarising ``report`` (the first table of the HTML page)."""
    low = report.nodes_by_dtype.get(report.target_dtype, 0)
    rows = [("model", report.model or "-"), ("target dtype", report.target_dtype),
            ("op nodes", str(report.total_nodes)),
            (f"op nodes in {report.target_dtype}", str(low)),
            ("op nodes in float32", str(report.nodes_by_dtype.get("float32", 0))),
            ("casts inserted", f"{report.casts} amp_cast, {report.multicasts} amp_multicast"),
            ("amp_casts of stored weights (redone at every run)", str(report.weight_casts))]
    if report.folded_batchnorms or report.kept_batchnorms:
        rows.append(("BatchNorms folded (float32, before rounding)",
                     f"{len(report.folded_batchnorms)} folded, {len(report.kept_batchnorms)} kept"))
    if report.fusion_barriers:
        rows.append(("fusion barriers (identity amp_cast after a shared convolution output)",
                     str(len(report.fusion_barriers))))
    if report.input_model is not None and report.folded_batchnorms:
        rows.append(("input model, before folding", _input_model_text(report.input_model)))
    before, after = report.params_before, report.params_after
    if before is not None and after is not None and before.bytes and after.bytes is not None:
        rows.append(("params size", f"{size_text(before.bytes)} -> {size_text(after.bytes)} "
                     f"(x{after.bytes / before.bytes:.3f})"))
    return rows


def _input_model_text(m: Mapping) -> str:
    return f"{m['op_nodes']} op nodes, {m['params']} params, {size_text(m['param_bytes'])}"


def result_rows(report: ConversionReport, sections: Sections = NO_SECTIONS) -> list[tuple[str, str]]:
    """``(label, value)`` rows of what the command measured (``demo``: accuracy and speed;
    ``auto``: validated or not, executions, error against tolerance); empty for
    ``convert`` and ``inspect``."""
    rows = list(sections.rows)
    demo = report.demo
    if demo is None:
        return rows
    rows += [("execution", demo.execution), ("input", demo.input),
             ("max |diff| / max |fp32|", _fmt(demo.relative_max_error, ".2e"))]
    if demo.top1_agreement is not None:
        rows.append(("top-1 agreement", f"{demo.top1_agreement * 100:.0f}%"))
    if demo.speed is not None:
        rows.append(("speed (median, same process)",
                     f"float32 {_fmt(demo.speed.fp32_ms, '.1f')} ms, {report.target_dtype} "
                     f"{_fmt(demo.speed.low_ms, '.1f')} ms, speed-up x{demo.speed.speedup:.2f}"))
    else:
        rows.append(("speed", "not measured (the low precision model did not run natively)"))
    return rows


def _page_tables(report: ConversionReport, sections: Sections) -> list[Table]:
    """The page's opening tables: the summary, what the command measured, the notes."""
    tables = [Table("Summary", rows=tuple(summary_rows(report)), layout="pairs", formats=_ONLY_HTML)]
    results = result_rows(report, sections)
    if results:
        verdict = None if report.auto is None else report.auto.validated
        mark = ("" if verdict is None else
                " <span class='good'>validated</span>" if verdict else " <span class='bad'>NOT validated</span>")
        tables.append(Table(Rich("Result", "Result" + mark), rows=tuple(results), layout="pairs",
                            formats=_ONLY_HTML))
    notes = report_notes(report)
    if notes:
        tables.append(Table("Notes", rows=tuple((n,) for n in notes), layout="list", formats=_ONLY_HTML))
    return tables


def _ops_table(report: ConversionReport) -> Table:
    cols = report.dtype_columns()
    by_op = report.nodes_by_op
    return Table(
        "Op nodes by op type and the dtype they compute in", header=("op", *cols, "total"),
        rows=tuple((op, *(by_op[op].get(c, 0) for c in cols), sum(by_op[op].values()))
                   for op in sorted(by_op, key=lambda o: (-sum(by_op[o].values()), o))),
        total=("total", *(report.nodes_by_dtype.get(c, 0) for c in cols), report.total_nodes),
        layout="counts")


def _casts_table(report: ConversionReport) -> Table:
    def words(code: Callable[[str], str], dtype: Callable[[str], str]) -> str:
        by = ", ".join(f"{n} to {dtype(d)}" for d, n in sorted(report.casts_by_dtype.items()))
        return (f"{report.casts} {code('amp_cast')}" + (f" ({by})" if by else "")
                + f", {report.multicasts} {code('amp_multicast')}")
    page = (f"<p>{words(lambda w: f'<code>{w}</code>', html.escape)}; {report.weight_casts} of the "
            "<code>amp_cast</code>s read a stored weight</p>")
    hint = (Rich(WEIGHT_CAST_HINT.format(n=report.weight_casts), ""),) if report.weight_casts else ()
    return Table(Rich("Casts inserted: " + words(str, str), "Casts inserted"), notes=(Rich("", page), *hint))


def _params_tables(report: ConversionReport) -> list[Table]:
    before, after = report.params_before, report.params_after
    if before is None and after is None:
        return []
    rows = []
    for label, st in (("before", before), ("after", after)):
        if st is not None:
            per = ", ".join(f"{d}: {v['count']}" for d, v in sorted(st.by_dtype.items()))
            rows.append((label, st.count, size_text(st.bytes), "" if st.bytes is None else st.bytes, per))
    ratio: tuple[Rich, ...] = ()
    if before and after and before.bytes and after.bytes is not None:
        ratio = (Rich(f"after / before bytes: {after.bytes / before.bytes:.3f}", ""),)
    return [Table("Params", header=("", "count", Rich("bytes", "size"), Rich("", "bytes"), "by dtype"),
                  rows=tuple(rows), notes=ratio, layout="ledger")]


def _folding_tables(report: ConversionReport, max_names: int) -> list[Table]:
    if not report.folded_batchnorms and not report.kept_batchnorms:
        return []
    names = report.folded_batchnorms
    heading = f"BatchNorms folded into the op before them (in float32): {len(names)}" + (
        f" ({shorten(names, max_names)})" if names else "")
    before = (Rich("input model before folding: " + _input_model_text(report.input_model), ""),) \
        if report.input_model is not None else ()
    tables = [Table(Rich(heading, html.escape(f"BatchNorms folded: {len(names)}")),
                    notes=(Rich("", f"<p class='names'>{html.escape(', '.join(names))}</p>"), *before))]
    if report.kept_batchnorms:
        tables.append(Table(Rich(f"BatchNorms kept: {len(report.kept_batchnorms)}", ""),
                            header=("BatchNorm kept", "why"), rows=tuple(report.kept_batchnorms),
                            wide=(1,), layout="sublist"))
    return tables


def _fp32_tables(report: ConversionReport, max_names: int) -> list[Table]:
    tables = [Table(f"Nodes kept in float32: {len(report.fp32_nodes)}")]
    reasons = sorted(report.fp32_reasons().items(), key=lambda kv: -len(kv[1]))
    if reasons:
        tables.append(Table(header=("reason", "nodes", "names"), rows=tuple(
            (r, len(n), Rich(shorten(n, max_names), html.escape(", ".join(n)))) for r, n in reasons),
            wide=(2,), layout="reasons"))
    return tables


def report_tables(report: ConversionReport, max_names: int = 3,
                  sections: Sections = NO_SECTIONS) -> list[Table]:
    """Every table of ``report``, in the order shown, each marked with the renderings that
    show it, ``sections``' own included; lists of names are shortened to ``max_names`` in
    the text."""
    tables = [*_page_tables(report, sections), _ops_table(report), _casts_table(report),
              *_params_tables(report), *_folding_tables(report, max_names)]
    if report.cpu:   # what the figures above hold for (hardware.cpu_summary)
        tables.insert(len(_page_tables(report, sections)), Table(f"CPU: {report.cpu}", layout="line"))
    if report.fusion_barriers:
        what = ("Fusion barriers (identity amp_cast after a shared convolution output, which "
                f"MXNet's oneDNN fusion would misconnect): {len(report.fusion_barriers)}")
        barriers = ", ".join(report.fusion_barriers)
        tables.append(Table(Rich(f"{what} ({shorten(report.fusion_barriers, max_names)})",
                                 html.escape(what)),
                            notes=(Rich("", f"<p class='names'>{html.escape(barriers)}</p>"),)))
    tables += _fp32_tables(report, max_names)
    if report.unlisted_ops:
        tables.append(Table("Ops in no list (kept in float32): " + ", ".join(report.unlisted_ops),
                            layout="line"))
    tables += sections.tables
    return tables


def _title(report: ConversionReport) -> str:
    return f"mxnet-amp conversion to {report.target_dtype}" + (f": {report.model}" if report.model else "")


def report_text(report: ConversionReport, tables: list[Table]) -> str:
    """The terminal text of ``report``: its title, then ``tables`` (:func:`report_tables`)."""
    title = _title(report)
    return "\n".join([title, "=" * len(title)] + render_text(tables))


def report_page(report: ConversionReport, tables: list[Table], svg: str | None = None,
                sections: Sections = NO_SECTIONS, precision_map: str | None = None) -> str:
    """The HTML page of ``report`` made of ``tables`` (:func:`report_tables`), ``sections``'
    chart (the automatic mode's attribution) and, when given, the precision map (first,
    :func:`mxnet_amp.report.precision_map.precision_map_svg`) and the picture (last)."""
    e = html.escape
    title = _title(report)
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{e(title)}</h1>"]
    if precision_map:
        parts.append(f"<div class='map'>{precision_map[precision_map.index('<svg'):]}</div>")
    parts += render_html(tables)
    parts += [sections.chart] if sections.chart else []
    if svg:
        body = svg[svg.index("<svg"):] if "<svg" in svg else svg
        parts.append(f"<h2>Graph</h2><div class='pic'>{body}</div>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def report_html(report: ConversionReport, svg: str | None = None, sections: Sections = NO_SECTIONS,
                precision_map: str | None = None) -> str:
    """A single self-contained HTML page: when given, the precision map; summary, what the
    command measured (``demo`` and ``auto``), notes, the report's tables and ``sections``'
    and, when given, the picture (inline SVG, no external assets). Every command writes
    this one page."""
    return report_page(report, report_tables(report, sections=sections), svg, sections, precision_map)


def format_table(report: ConversionReport, max_names: int = 3, sections: Sections = NO_SECTIONS) -> str:
    """A plain text summary of ``report`` for a terminal (its tables and ``sections``', lists
    of names shortened to ``max_names``), with the tuning summary where the conversion
    tuned."""
    text = report_text(report, report_tables(report, max_names, sections))
    if report.tuning is not None:
        text += "\n" + tuning_summary(report.tuning)
    return text
