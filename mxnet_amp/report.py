"""What a conversion did, as data: nodes per dtype, casts, params before/after, float32 nodes.

:func:`build_report` reads a :class:`~mxnet_amp.convert.Conversion` (and, when given, the
param dicts before and after) and returns a :class:`ConversionReport`, a frozen value that
renders as a dict, JSON or a terminal table. Nothing here runs MXNet.
"""
from __future__ import annotations

import html
import json
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from .dtypes import dtype_name
from .graph import Graph
from .passes.insert_casts import MULTICAST
from .policy import Category, Decision

if TYPE_CHECKING:   # only annotations name it
    from .convert import Conversion

__all__ = ["ConversionReport", "ParamStats", "FP32Node", "build_report", "report_html", "report_notes",
           "summary_rows", "result_rows", "NON_FLOAT"]

# the key under which nodes without a float output are counted
NON_FLOAT = "non-float"


@dataclass(frozen=True)
class ParamStats:
    """Count and size of a set of params, in total and per dtype.

    ``bytes`` (and the per dtype bytes) are None when only dtypes were known (no arrays)."""

    count: int
    bytes: int | None
    by_dtype: Mapping[str, Mapping[str, int | None]]

    def to_dict(self) -> dict:
        """A JSON-ready dict (plain types only)."""
        return {"count": self.count, "bytes": self.bytes,
                "by_dtype": {k: dict(v) for k, v in self.by_dtype.items()}}


@dataclass(frozen=True)
class FP32Node:
    """A node that computes in float32 in the converted graph, and why."""

    name: str
    op: str
    reason: str


@dataclass(frozen=True)
class ConversionReport:
    """Everything a conversion decided, in numbers.

    Attributes
    ----------
    target_dtype : str
    model : str or None
        A label for the model (a checkpoint prefix, say).
    total_nodes : int
        Op nodes of the original graph (variables not counted).
    nodes_by_dtype : mapping dtype -> int
        Original op nodes per dtype they compute in (``'non-float'``: no float output).
    nodes_by_op : mapping op -> (dtype -> int)
    categories : mapping category -> int
        Op nodes per policy category they ran under.
    casts, multicasts : int
        ``amp_cast`` / ``amp_multicast`` nodes inserted.
    casts_by_dtype : mapping dtype -> int
        ``amp_cast`` nodes by the dtype they cast to.
    weight_casts : int
        ``amp_cast`` nodes that read a stored weight (not a model input): work done at every
        run that ``cast_optional_params`` moves into the params file.
    params_before, params_after : ParamStats or None
    fp32_nodes : tuple of FP32Node
        Every original op node computing in float32, with the reason.
    excluded : tuple of str
        Node names the caller excluded.
    fallbacks : tuple of (name, why)
        Nodes that could not run as their category asked.
    unlisted_ops : tuple of str
        Ops in no list (kept in float32).
    folded_batchnorms : tuple of str
        BatchNorms folded into the op before them before conversion (``fold_batchnorm``).
    kept_batchnorms : tuple of (name, why)
        BatchNorms folding left in the graph, and why.
    input_model : mapping or None
        The model as given, before folding: ``op_nodes``, ``params``, ``param_bytes``,
        ``by_dtype`` (``params_before`` is the same when folding ran; ``total_nodes``
        counts the graph converted, folded).
    fusion_barriers : tuple of str
        Convolutions whose shared output got an identity ``amp_cast`` before its fusable
        readers, so MXNet's oneDNN fusion cannot misconnect it (counted in ``casts``).
    """

    target_dtype: str
    model: str | None
    total_nodes: int
    nodes_by_dtype: Mapping[str, int]
    nodes_by_op: Mapping[str, Mapping[str, int]]
    categories: Mapping[str, int]
    casts: int
    multicasts: int
    casts_by_dtype: Mapping[str, int]
    params_before: ParamStats | None
    params_after: ParamStats | None
    weight_casts: int = 0
    fp32_nodes: tuple[FP32Node, ...] = ()
    excluded: tuple[str, ...] = ()
    fallbacks: tuple[tuple[str, str], ...] = ()
    unlisted_ops: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    folded_batchnorms: tuple[str, ...] = ()
    kept_batchnorms: tuple[tuple[str, str], ...] = ()
    input_model: Mapping[str, Any] | None = None
    fusion_barriers: tuple[str, ...] = ()

    def fp32_reasons(self) -> dict[str, list[str]]:
        """Reason -> names of the float32 nodes kept for it (in graph order)."""
        out: dict[str, list[str]] = {}
        for n in self.fp32_nodes:
            out.setdefault(n.reason, []).append(n.name)
        return out

    def to_dict(self) -> dict:
        """A JSON-ready dict (plain types only)."""
        return {
            "model": self.model,
            "target_dtype": self.target_dtype,
            "total_nodes": self.total_nodes,
            "nodes_by_dtype": dict(self.nodes_by_dtype),
            "nodes_by_op": {op: dict(v) for op, v in self.nodes_by_op.items()},
            "categories": dict(self.categories),
            "casts": self.casts,
            "multicasts": self.multicasts,
            "casts_by_dtype": dict(self.casts_by_dtype),
            "weight_casts": self.weight_casts,
            "params_before": None if self.params_before is None else self.params_before.to_dict(),
            "params_after": None if self.params_after is None else self.params_after.to_dict(),
            "fp32_nodes": [{"name": n.name, "op": n.op, "reason": n.reason} for n in self.fp32_nodes],
            "excluded": list(self.excluded),
            "fallbacks": [{"name": n, "why": w} for n, w in self.fallbacks],
            "unlisted_ops": list(self.unlisted_ops),
            "batchnorm_folding": {"folded": len(self.folded_batchnorms),
                                  "names": list(self.folded_batchnorms),
                                  "kept": [{"name": n, "why": w} for n, w in self.kept_batchnorms]},
            "input_model": None if self.input_model is None else json.loads(json.dumps(self.input_model)),
            "fusion_barriers": list(self.fusion_barriers),
            **({"extra": dict(self.extra)} if self.extra else {}),
        }

    def to_json(self, indent: int | None = 2) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=indent)

    def folding_lines(self, max_names: int = 3) -> list[str]:
        """The text lines on BatchNorm folding and the input model (empty when nothing was
        folded or kept)."""
        if not self.folded_batchnorms and not self.kept_batchnorms:
            return []
        names = list(self.folded_batchnorms)
        shown = ", ".join(names[:max_names]) + (f", … (+{len(names) - max_names})"
                                                if len(names) > max_names else "")
        lines = ["", f"BatchNorms folded into the op before them (in float32): {len(names)}"
                 + (f" ({shown})" if names else "")]
        if self.input_model is not None:
            m = self.input_model
            lines.append(f"  input model before folding: {m['op_nodes']} op nodes, {m['params']} "
                         f"params, {_size(m['param_bytes'])}")
        if self.kept_batchnorms:
            lines.append(f"  BatchNorms kept: {len(self.kept_batchnorms)}")
            for name, why in self.kept_batchnorms[:10]:
                lines.append(f"    {name}: {why}")
            if len(self.kept_batchnorms) > 10:
                lines.append(f"    … (+{len(self.kept_batchnorms) - 10})")
        return lines

    def barrier_lines(self, max_names: int = 3) -> list[str]:
        """The text lines on fusion barriers (empty when there are none)."""
        names = list(self.fusion_barriers)
        if not names:
            return []
        shown = ", ".join(names[:max_names]) + (f", … (+{len(names) - max_names})"
                                                if len(names) > max_names else "")
        return ["", f"Fusion barriers (identity amp_cast after a shared convolution output, which "
                f"MXNet's oneDNN fusion would misconnect): {len(names)} ({shown})"]

    def dtype_columns(self) -> list[str]:
        """The dtypes that occur, low precision first (column order of the tables)."""
        order = {self.target_dtype: 0, "float32": 1}
        return sorted(self.nodes_by_dtype, key=lambda d: (order.get(d, 2 if d != NON_FLOAT else 3), d))

    def format_table(self, max_names: int = 3) -> str:
        """A plain text summary for a terminal."""
        cols = self.dtype_columns()
        title = f"mxnet-amp conversion to {self.target_dtype}" + (f": {self.model}" if self.model else "")
        lines = [title, "=" * len(title), "", "Op nodes by op type and the dtype they compute in"]
        width = max([len("op")] + [len(op) for op in self.nodes_by_op] + [len("total")])
        head = "  " + "op".ljust(width) + "".join(f"{c:>11}" for c in cols) + f"{'total':>8}"
        lines += [head, "  " + "-" * (len(head) - 2)]
        for op in sorted(self.nodes_by_op, key=lambda o: (-sum(self.nodes_by_op[o].values()), o)):
            row = self.nodes_by_op[op]
            lines.append("  " + op.ljust(width) + "".join(f"{row.get(c, 0) or '.':>11}" for c in cols)
                         + f"{sum(row.values()):>8}")
        lines.append("  " + "total".ljust(width) + "".join(f"{self.nodes_by_dtype.get(c, 0):>11}" for c in cols)
                     + f"{self.total_nodes:>8}")
        lines += ["", "Casts inserted: " + f"{self.casts} amp_cast"
                  + (" (" + ", ".join(f"{n} to {d}" for d, n in sorted(self.casts_by_dtype.items())) + ")"
                     if self.casts_by_dtype else "")
                  + f", {self.multicasts} amp_multicast"]
        if self.weight_casts:
            lines.append("  " + WEIGHT_CAST_HINT.format(n=self.weight_casts))
        if self.params_before is not None or self.params_after is not None:
            lines += ["", "Params            count          bytes   by dtype"]
            for label, stats in (("before", self.params_before), ("after", self.params_after)):
                if stats is None:
                    continue
                per = ", ".join(f"{d}: {v['count']}" for d, v in sorted(stats.by_dtype.items()))
                lines.append(f"  {label:<12}{stats.count:>9}  {_size(stats.bytes):>13}   {per}")
            if (self.params_before and self.params_after and self.params_before.bytes
                    and self.params_after.bytes is not None):
                ratio = self.params_after.bytes / self.params_before.bytes
                lines.append(f"  after / before bytes: {ratio:.3f}")
        lines += self.folding_lines(max_names) + self.barrier_lines(max_names)
        reasons = self.fp32_reasons()
        lines += ["", f"Nodes kept in float32: {len(self.fp32_nodes)}"]
        for reason, names in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
            shown = ", ".join(names[:max_names]) + (f", … (+{len(names) - max_names})" if len(names) > max_names else "")
            # wrapped at word boundaries, never cut: the reason is the table's answer
            wrapped = textwrap.wrap(reason, 110, break_long_words=False, break_on_hyphens=False)
            lines.append(f"  {len(names):>5}  " + ("\n" + " " * 9).join(wrapped or [""]))
            lines.append(f"         {shown}")
        if self.unlisted_ops:
            lines += ["", "Ops in no list (kept in float32): " + ", ".join(self.unlisted_ops)]
        return "\n".join(lines)


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def _itemsize(dtype: str) -> int:
    return 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize


def _stats_of(dtype_shapes: Iterable[tuple[str, tuple[int, ...]]]) -> ParamStats:
    """Count and bytes per dtype of ``(dtype name, shape)`` pairs."""
    by: dict[str, dict[str, int]] = {}
    total = count = 0
    for dt, shape in dtype_shapes:
        nbytes = int(np.prod(shape, dtype=np.int64)) * _itemsize(dt)
        slot = by.setdefault(dt, {"count": 0, "bytes": 0})
        slot["count"] += 1
        slot["bytes"] += nbytes
        total += nbytes
        count += 1
    return ParamStats(count, total, by)


def _param_stats(arrays: Mapping | None, dtypes: Mapping[str, str | None]) -> ParamStats:
    """Stats from arrays when given, else from a name -> dtype mapping (no bytes)."""
    if arrays is not None:
        return _stats_of((dtype_name(v.dtype), v.shape) for v in arrays.values())
    counts = Counter(d for d in dtypes.values() if d is not None)
    return ParamStats(sum(counts.values()), None, {d: {"count": n, "bytes": None} for d, n in counts.items()})


def _param_stats_from_shapes(arrays: Mapping, dtypes: Mapping[str, str]) -> ParamStats:
    """Stats of ``arrays`` (keyed ``arg:NAME``) as if each were stored in ``dtypes[NAME]``."""
    return _stats_of((dtypes.get(k.partition(":")[2]) or dtype_name(v.dtype), v.shape)
                     for k, v in arrays.items())


def _fp32_reason(name: str, decision: Decision | None, fallbacks: Mapping[str, str]) -> str:
    """Why a node computes in float32: the pass's fallback or decision, in words."""
    if name in fallbacks:
        return "fell back: " + fallbacks[name].split(";")[0][:160]
    category = decision.category if decision else None
    if decision is not None and category is Category.FP32:
        return decision.reason
    if category is Category.WIDEST:
        return "widest op: the widest of its inputs is float32"
    if category is Category.FOLLOW:
        return "follows its float32 inputs"
    return f"{category.value if category else 'unknown'} op computes in float32"


def _params_before_after(conversion: Conversion, arg_params: Mapping | None,
                         aux_params: Mapping | None, new_arg_params: Mapping | None,
                         new_aux_params: Mapping | None) -> tuple[ParamStats, ParamStats]:
    """Param stats before and after the conversion (from the arrays where given, else from
    the dtypes the conversion recorded)."""
    before_arrays = None if arg_params is None and aux_params is None else {
        **{f"arg:{k}": v for k, v in (arg_params or {}).items()},
        **{f"aux:{k}": v for k, v in (aux_params or {}).items()}}
    after_arrays = None if new_arg_params is None and new_aux_params is None else {
        **{f"arg:{k}": v for k, v in (new_arg_params or {}).items()},
        **{f"aux:{k}": v for k, v in (new_aux_params or {}).items()}}
    # a param type inference leaves undecided stays as stored
    after_dtypes = {k: r.bound or r.stored for k, r in conversion.params.items()}
    given = conversion.input_param_dtypes
    before = _param_stats(before_arrays, dict(given))
    if before_arrays is None and after_arrays is not None:
        # the originals are gone (a checkpoint converted in place): their shapes are the
        # new arrays' shapes and their dtypes are what the conversion was given
        before = _param_stats_from_shapes(after_arrays, given)
    figures = conversion.input_figures
    if conversion.folded_batchnorms and figures is not None:
        # "before" is the model as given, not the folded graph the conversion started from
        before = ParamStats(figures["params"], figures["param_bytes"], figures["by_dtype"])
    return before, _param_stats(after_arrays, after_dtypes)


def build_report(conversion: Conversion, arg_params: Mapping | None = None, aux_params: Mapping | None = None,
                 new_arg_params: Mapping | None = None, new_aux_params: Mapping | None = None, *,
                 excluded: Iterable[str] | None = None, model: str | None = None,
                 reasons: Mapping[str, str] | None = None) -> ConversionReport:
    """The :class:`ConversionReport` of ``conversion``.

    Parameters
    ----------
    conversion : mxnet_amp.convert.Conversion
        What :func:`~mxnet_amp.convert.convert_graph` / ``convert_model_full`` returned.
    arg_params, aux_params : dict, optional
        The params before conversion; give them for byte counts (else counts come from the
        dtypes the conversion recorded).
    new_arg_params, new_aux_params : dict, optional
        The params after conversion.
    excluded : iterable of str, optional
        The excluded node names; read back from the conversion when not given.
    model : str, optional
        A label for the model shown in the report.
    reasons : mapping of node name to str, optional
        Why a float32 node is float32 where the caller knows better (automatic mode).

    Returns
    -------
    ConversionReport
    """
    result = conversion.result
    original: Graph = conversion.original
    excluded_set = set(excluded) if excluded is not None else set(conversion.excluded)
    fallbacks: dict[str, str] = {}
    for name, why in result.fallbacks:
        fallbacks.setdefault(name, why)
    by_op: dict[str, Counter] = {}
    by_dtype: Counter = Counter()
    cats: Counter = Counter()
    fp32_nodes = []
    total = 0
    for node in original.nodes:
        if node.is_variable:
            continue
        total += 1
        dt = result.node_dtypes.get(node.name) or NON_FLOAT
        by_op.setdefault(node.op, Counter())[dt] += 1
        by_dtype[dt] += 1
        decision = result.decisions.get(node.name)
        if decision is not None:
            cats[decision.category.value] += 1
        if dt == "float32":
            why = (reasons or {}).get(node.name) or _fp32_reason(node.name, decision, fallbacks)
            fp32_nodes.append(FP32Node(node.name, node.op, why))
    casts_by, n_multi, n_weight_casts = _cast_counts(conversion)
    n_casts = sum(casts_by.values())

    before, after = _params_before_after(conversion, arg_params, aux_params,
                                         new_arg_params, new_aux_params)
    return ConversionReport(
        target_dtype=conversion.policy.target_dtype,
        model=model,
        total_nodes=total,
        nodes_by_dtype=dict(by_dtype),
        nodes_by_op={op: dict(c) for op, c in by_op.items()},
        categories=dict(cats),
        casts=n_casts,
        multicasts=n_multi,
        casts_by_dtype=dict(casts_by),
        params_before=before,
        weight_casts=n_weight_casts,
        params_after=after,
        fp32_nodes=tuple(fp32_nodes),
        excluded=tuple(sorted(excluded_set)),
        fallbacks=tuple(result.fallbacks),
        unlisted_ops=tuple(sorted(result.unlisted_ops)),
        **_folding(conversion),
    )


def _cast_counts(conversion: Conversion) -> tuple[Counter, int, int]:
    """``(amp_casts by dtype, amp_multicasts, amp_casts of a stored weight)`` among the casts
    the conversion inserted (its record: a model's own casts are not counted; fusion
    barriers are amp_casts)."""
    graph, data = conversion.graph, set(conversion.data_names)
    casts_by: Counter = Counter()
    n_multi = n_weight = 0
    for i, kind in sorted(conversion.result.inserted_casts.items()):
        node = graph.nodes[i]
        if kind == MULTICAST:
            n_multi += 1
            continue
        casts_by[node.attrs.get("dtype", "?")] += 1
        source = graph.nodes[node.inputs[0].node]
        n_weight += source.is_variable and source.name not in data
    return casts_by, n_multi, n_weight


def _folding(conversion: Conversion) -> dict:
    """The report's fields on what the conversion did besides casting: BatchNorm folding,
    fusion barriers."""
    return {"folded_batchnorms": tuple(bn for bn, _ in conversion.folded_batchnorms),
            "kept_batchnorms": tuple(conversion.kept_batchnorms),
            "input_model": conversion.input_figures,
            "fusion_barriers": tuple(conv for conv, _ in conversion.fusion_barriers)}


_CSS = """body{font-family:DejaVu Sans,Arial,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;margin:8px 0 18px}td,th{border:1px solid #ccc;padding:3px 9px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}td.names{text-align:left}
.pic{overflow:auto;border:1px solid #ddd;padding:6px}code{background:#f5f5f5;padding:0 3px}
.bad{color:#b00020;font-weight:bold}.good{color:#1b7a2f;font-weight:bold}li{margin:3px 0}"""

WEIGHT_CAST_HINT = ("{n} of the amp_casts convert weights at every run; cast_optional_params "
                    "(--cast-optional-params) stores them converted")


def _fmt(x: float | None, spec: str = ".3g") -> str:
    return "?" if x is None else format(x, spec)


def report_notes(report: ConversionReport) -> list[str]:
    """What the reader should know about ``report``, one sentence each: the weight-cast
    hint, the notes the command added (``extra['notes']``: hardware, emulation, degenerate
    outputs) and automatic mode's notes (the float32 reference holding inf/nan, say)."""
    notes = []
    if report.weight_casts:
        notes.append(WEIGHT_CAST_HINT.format(n=report.weight_casts))
    notes += [str(n) for n in report.extra.get("notes", ())]
    auto = report.extra.get("auto")
    if isinstance(auto, Mapping):
        notes += [str(n) for n in auto.get("notes", ())]
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
        m = report.input_model
        rows.append(("input model, before folding", f"{m['op_nodes']} op nodes, {m['params']} "
                     f"params, {_size(m['param_bytes'])}"))
    before, after = report.params_before, report.params_after
    if before is not None and after is not None and before.bytes and after.bytes is not None:
        rows.append(("params size", f"{_size(before.bytes)} -> {_size(after.bytes)} "
                     f"(x{after.bytes / before.bytes:.3f})"))
    return rows


def result_rows(report: ConversionReport) -> list[tuple[str, str]]:
    """``(label, value)`` rows of what the command measured (``demo``: accuracy and speed;
    ``auto``: validated or not, executions, error against tolerance); empty for
    ``convert`` and ``inspect``."""
    x = report.extra
    rows = []
    auto = x.get("auto")
    if isinstance(auto, Mapping):
        from .auto.html import auto_result_rows
        rows += auto_result_rows(auto)
    if "relative_max_error" in x:
        rows += [("execution", str(x.get("execution", "native" if x.get("native") else "emulated"))),
                 ("input", str(x.get("input", "?"))),
                 ("max |diff| / max |fp32|", _fmt(x["relative_max_error"], ".2e"))]
        if x.get("top1_agreement") is not None:
            rows.append(("top-1 agreement", f"{x['top1_agreement'] * 100:.0f}%"))
    if "speedup" in x:
        rows.append(("speed (median, same process)",
                     f"float32 {_fmt(x.get('fp32_ms'), '.1f')} ms, {report.target_dtype} "
                     f"{_fmt(x.get('low_ms'), '.1f')} ms, speed-up x{x['speedup']:.2f}"))
    elif "relative_max_error" in x:
        rows.append(("speed", "not measured (the low precision model did not run natively)"))
    return rows


def report_html(report: ConversionReport, svg: str | None = None) -> str:
    """A single self-contained HTML page: summary, what the command measured (``demo`` and
    ``auto``), notes, the report's tables and, when given, the picture (inline SVG, no
    external assets). Every command writes this one page."""
    e = html.escape
    cols = report.dtype_columns()
    title = f"mxnet-amp conversion to {report.target_dtype}" + (f": {report.model}" if report.model else "")

    def table(rows, head=None):
        top = "" if head is None else "<tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"
        return "<table>" + top + "".join("<tr><th>" + e(k) + "</th><td class='names'>" + e(v)
                                         + "</td></tr>" for k, v in rows) + "</table>"
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{e(title)}</h1>",
             "<h2>Summary</h2>" + table(summary_rows(report))]
    results = result_rows(report)
    if results:
        verdict = report.extra.get("auto", {}).get("validated") if "auto" in report.extra else None
        mark = ("" if verdict is None else
                " <span class='good'>validated</span>" if verdict else " <span class='bad'>NOT validated</span>")
        parts.append(f"<h2>Result{mark}</h2>" + table(results))
    notes = report_notes(report)
    if notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>")
    rows = []
    for op in sorted(report.nodes_by_op, key=lambda o: (-sum(report.nodes_by_op[o].values()), o)):
        r = report.nodes_by_op[op]
        rows.append("<tr><td>" + e(op) + "</td>" + "".join(f"<td>{r.get(c, 0)}</td>" for c in cols)
                    + f"<td>{sum(r.values())}</td></tr>")
    rows.append("<tr><th>total</th>" + "".join(f"<th>{report.nodes_by_dtype.get(c, 0)}</th>" for c in cols)
                + f"<th>{report.total_nodes}</th></tr>")
    parts += ["<h2>Op nodes by op type and the dtype they compute in</h2><table><tr><th>op</th>"
              + "".join(f"<th>{e(c)}</th>" for c in cols) + "<th>total</th></tr>" + "".join(rows) + "</table>",
              f"<h2>Casts inserted</h2><p>{report.casts} <code>amp_cast</code>"
              + (" (" + ", ".join(f"{n} to {e(d)}" for d, n in sorted(report.casts_by_dtype.items())) + ")"
                 if report.casts_by_dtype else "")
              + f", {report.multicasts} <code>amp_multicast</code>; {report.weight_casts} of the "
              "<code>amp_cast</code>s read a stored weight</p>"]
    if report.params_before or report.params_after:
        prow = []
        for label, st in (("before", report.params_before), ("after", report.params_after)):
            if st is not None:
                per = ", ".join(f"{e(d)}: {v['count']}" for d, v in sorted(st.by_dtype.items()))
                prow.append(f"<tr><td>{label}</td><td>{st.count}</td><td>{_size(st.bytes)}</td>"
                            f"<td>{'' if st.bytes is None else st.bytes}</td><td>{per}</td></tr>")
        parts.append("<h2>Params</h2><table><tr><th></th><th>count</th><th>size</th><th>bytes</th>"
                     "<th>by dtype</th></tr>" + "".join(prow) + "</table>")
    if report.folded_batchnorms or report.kept_batchnorms:
        parts.append(f"<h2>BatchNorms folded: {len(report.folded_batchnorms)}</h2><p class='names'>"
                     + e(", ".join(report.folded_batchnorms)) + "</p>")
        if report.kept_batchnorms:
            parts.append("<table><tr><th>BatchNorm kept</th><th>why</th></tr>" + "".join(
                f"<tr><td>{e(n)}</td><td class='names'>{e(w)}</td></tr>"
                for n, w in report.kept_batchnorms) + "</table>")
    reasons = report.fp32_reasons()
    parts.append(f"<h2>Nodes kept in float32: {len(report.fp32_nodes)}</h2>")
    if reasons:
        parts.append("<table><tr><th>reason</th><th>nodes</th><th>names</th></tr>" + "".join(
            f"<tr><td>{e(r)}</td><td>{len(n)}</td><td class='names'>{e(', '.join(n))}</td></tr>"
            for r, n in sorted(reasons.items(), key=lambda kv: -len(kv[1]))) + "</table>")
    if report.unlisted_ops:
        parts.append("<p>Ops in no list (kept in float32): " + e(", ".join(report.unlisted_ops)) + "</p>")
    auto = report.extra.get("auto")
    if isinstance(auto, Mapping):
        from .auto.html import auto_sections_html
        parts.append(auto_sections_html(auto))
    if svg:
        body = svg[svg.index("<svg"):] if "<svg" in svg else svg
        parts.append(f"<h2>Graph</h2><div class='pic'>{body}</div>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
