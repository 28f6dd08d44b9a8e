"""The automatic mode's part of the HTML report: the figures the terminal shows, the kept
nodes with their reasons (a :class:`~mxnet_amp.report.tables.Table`), and the attribution (each
node's local error and its contribution at the outputs) as sorted bars in plain inline SVG.

Works on :meth:`AutoReport.to_dict` (the record of the report's
:class:`~mxnet_amp.report.sections.AutoSection`, which :func:`report_section` builds), so a
report read back from JSON renders the same."""
from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING, Any, Mapping

from ..report.pages import NO_SECTIONS, Sections
from ..report.sections import AutoSection
from ..report.tables import HTML, Table

if TYPE_CHECKING:   # only annotations name it
    from .records import AutoReport

__all__ = ["report_section", "auto_sections", "auto_result_rows", "auto_tables", "attribution_html"]

# bars drawn at most (the report keeps the 200 largest contributions)
_BARS = 40
_REASONS = {"overflow": "overflow", "underflow": "underflow", "accuracy": "accuracy",
            "budget": "search budget", "user": "named by the user", "metric": "user metric",
            "weight range": "weight range guard", "slow kernel": "slow kernel rule",
            "tuned": "timed slower (tune)", "oneDNN reshape": "oneDNN reshape"}


def _g(x: Any, spec: str = ".3g") -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return format(x, spec)


def auto_result_rows(auto: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(label, value)`` rows of what the automatic mode measured: the check and its
    bounds as the terminal states them (never a placeholder)."""
    criterion = auto.get("criterion", "scale")
    rows = [("validated", "yes" if auto.get("validated") else
             "NO: the returned model fails the output check"),
            ("executions", f"{auto.get('executions')} ("
             + ", ".join(f"{n} {k}" for k, n in _step_counts(auto).items()) + ")"),
            ("execution", f"{auto.get('execution')} on {auto.get('context')}")]
    rel = f"max |out - fp32| / max |fp32| = {_g(auto.get('relative_error'))}"
    if criterion == "scale":
        rows.append(("check", f"{rel}, tolerance {_g(auto.get('tolerance'), 'g')} "
                     f"({_g(auto.get('tolerance_ratio'))} x tolerance; 1 or less passes)"))
    elif criterion == "allclose":
        rows.append(("check", f"allclose rtol {_g(auto.get('rtol'), 'g')}, atol "
                     f"{_g(auto.get('atol'), 'g')}: max |out - fp32| = "
                     f"{_g(auto.get('max_abs_error'))}, {_g(auto.get('tolerance_ratio'))} x "
                     f"tolerance (1 or less passes); {rel}"))
    else:
        rows.append(("check", f"the caller's {criterion}; {rel}"))
    if auto.get("metric"):
        m = auto["metric"]
        rows.append(("metric", f"{m.get('name')}: float32 {_g(m.get('reference'))}, returned "
                     f"model {_g(m.get('value'))}, drop {_g(m.get('drop'))} (allowed "
                     f"{_g(m.get('max_drop'))}, {m.get('criterion')})"))
    if auto.get("top1_rows"):
        rows.append(("top-1", f"changed on {auto.get('top1_flips')} of {auto.get('top1_rows')} rows"))
    rows += [("op nodes in " + str(auto.get("target_dtype")),
              f"{auto.get('low_precision_nodes')} of {auto.get('op_nodes')}"),
             ("kept in float32", str(len(auto.get("kept_fp32", ()))))]
    return rows


def _step_counts(auto: Mapping[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for s in auto.get("steps", ()):
        counts[s["kind"]] = counts.get(s["kind"], 0) + 1
    return counts


def auto_tables(auto: Mapping[str, Any]) -> list[Table]:
    """The automatic mode's tables of the page: the nodes it kept in float32, with why."""
    kept = list(auto.get("kept_fp32", ()))
    if not kept:
        return []
    return [Table("Kept in float32", header=("node", "op", "reason", "what was compared"),
                  rows=tuple((k["name"], k["op"], _REASONS.get(k["reason"], k["reason"]), k.get("detail") or "")
                             for k in kept), wide=(3,), key="kept", formats=frozenset({HTML}))]


def _bars(errors: list[Mapping[str, Any]], kept: set[str], tolerance: float | None) -> str:
    """Two bar charts side by side per node (contribution at the outputs, local error
    relative to the node's own output), sorted by contribution, log scale."""
    e = html.escape
    shown = errors[:_BARS]
    values = [x["contribution"] for x in shown] + [x["relative_local_error"] for x in shown]
    finite = [v for v in values if v > 0 and math.isfinite(v)] + ([tolerance] if tolerance else [])
    if not finite:
        return "<p>every node's error is zero</p>"
    lo, hi = math.log10(min(finite)) - 0.5, math.log10(max(finite)) + 0.2
    width, name_w, row_h = 260, 180, 16

    def bar(v: float, x0: int, y: int, cls: str) -> str:
        frac = 1.0 if not math.isfinite(v) else 0.0 if v <= 0 else \
            max(0.0, (math.log10(v) - lo) / (hi - lo))
        return (f"<rect class='{cls}' x='{x0}' y='{y + 2}' width='{frac * width:.1f}' "
                f"height='{row_h - 4}'><title>{v:.3g}</title></rect>"
                f"<text x='{x0 + frac * width + 3:.1f}' y='{y + row_h - 4}'>{_g(v)}</text>")
    parts = [f"<text x='{name_w}' y='12' class='head'>contribution at outputs "
             "(relative error)</text>",
             f"<text x='{name_w + width + 60}' y='12' class='head'>local error / "
             "max |own output|</text>"]
    for i, x in enumerate(shown):
        y = 18 + i * row_h
        cls = "kept" if x["name"] in kept else "low"
        parts.append(f"<text x='{name_w - 4}' y='{y + row_h - 4}' text-anchor='end'>"
                     f"{e(x['name'])}</text>" + bar(x["contribution"], name_w, y, cls)
                     + bar(x["relative_local_error"], name_w + width + 60, y, cls))
    if tolerance:
        tx = name_w + max(0.0, (math.log10(tolerance) - lo) / (hi - lo)) * width
        parts.append(f"<line class='tol' x1='{tx:.1f}' x2='{tx:.1f}' y1='14' "
                     f"y2='{18 + len(shown) * row_h}'><title>tolerance {tolerance:g}</title></line>")
    h = 24 + len(shown) * row_h
    return (f"<svg class='attribution' xmlns='http://www.w3.org/2000/svg' width='"
            f"{name_w + 2 * width + 140}' height='{h}' font-size='11'>"
            "<style>.kept{fill:#c0392b}.low{fill:#7f8c8d}.tol{stroke:#2c3e50;"
            "stroke-dasharray:3 2}.head{font-weight:bold}</style>" + "".join(parts) + "</svg>")


def attribution_html(auto: Mapping[str, Any]) -> str:
    """Where the error comes from, when the attribution ran: each node's contribution at the
    outputs and local error as bars ('' when it did not run)."""
    errors = list(auto.get("attribution", ()))
    if not errors:
        return ""
    names = {k["name"] for k in auto.get("kept_fp32", ())}
    tol = auto.get("tolerance") or auto.get("rtol")
    return (f"<h2>Where the error comes from</h2><p>One teacher-forced run: each low "
            f"precision node computed from the exact float32 values of its inputs; its own "
            f"error carried through the float32 graph to the outputs (measured: by the "
            f"graph's gradients, and for the largest errors by running the graph with that "
            f"error added), scaled to the failed check's relative error. "
            f"{min(len(errors), _BARS)} of {len(errors)} nodes by that measured contribution "
            f"to the outputs' relative error (log scale; red: kept in float32; dashed "
            f"line: the tolerance).</p>" + _bars(errors, names, tol))


def report_section(auto: AutoReport) -> AutoSection:
    """The automatic mode's section of a conversion report: its verdict and notes, which the
    report's pages read, and :meth:`AutoReport.to_dict`, which :func:`auto_sections` reads."""
    return AutoSection(validated=auto.validated, notes=tuple(auto.notes), record=auto.to_dict())


def auto_sections(section: AutoSection | None) -> Sections:
    """The automatic mode's part of a report's pages, from the report's ``auto`` section:
    its result rows, its tables and its attribution chart (none for a report of another
    command).

    Parameters
    ----------
    section : AutoSection or None
        The report's ``auto`` (:func:`report_section`).

    Returns
    -------
    Sections
        What :func:`mxnet_amp.report.pages.report_html` and
        :func:`~mxnet_amp.report.pages.format_table` add to the report's own.
    """
    if section is None:
        return NO_SECTIONS
    auto = section.record
    return Sections(tuple(auto_result_rows(auto)), tuple(auto_tables(auto)), attribution_html(auto))
