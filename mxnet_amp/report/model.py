"""What a conversion did, as data: nodes per dtype, casts, params before/after, float32 nodes.

:func:`build_report` reads a :class:`~mxnet_amp.record.Conversion` (and, when given, the
param dicts before and after) and returns a :class:`ConversionReport`, a frozen value that
renders as a dict or JSON; its tables, terminal text and HTML page are
:mod:`mxnet_amp.report.pages`' job. Nothing here runs MXNet.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from ..ir.dtypes import dtype_name
from ..ir.graph import Graph
from ..mx.hardware import cpu_summary
from ..passes.insert_casts import MULTICAST
from ..policy import Category, Decision, reason_kind
from .sections import AutoSection, DemoSection, OnnxSection, sections_dict

if TYPE_CHECKING:   # only annotations name it
    from ..record import Conversion

__all__ = ["ConversionReport", "ParamStats", "FP32Node", "build_report", "tuning_summary", "NON_FLOAT"]

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
    tuning : mapping or None
        What ``tune=`` timed (:meth:`mxnet_amp.tune.timing.TuneRecord.to_dict`): the machine, each
        kernel's float32 and low precision time, the whole model untuned and tuned.
    cpu : str or None
        The CPU the report was made on (:func:`mxnet_amp.mx.hardware.cpu_summary`: its ISA
        flags, ``DNNL_MAX_CPU_ISA``, whether bfloat16 runs natively).
    notes : tuple of str
        What the command adds for the reader (the machine cannot run the dtype, emulation
        used, degenerate outputs, the ONNX export's lines).
    onnx, demo, auto : OnnxSection, DemoSection, AutoSection or None
        What ``convert --onnx``, ``demo`` and ``auto`` add (:mod:`mxnet_amp.report.sections`;
        the JSON report writes them, with the notes, as its ``extra`` object).
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
    folded_batchnorms: tuple[str, ...] = ()
    kept_batchnorms: tuple[tuple[str, str], ...] = ()
    input_model: Mapping[str, Any] | None = None
    fusion_barriers: tuple[str, ...] = ()
    tuning: Mapping[str, Any] | None = None
    cpu: str | None = None
    notes: tuple[str, ...] = ()
    onnx: OnnxSection | None = None
    demo: DemoSection | None = None
    auto: AutoSection | None = None

    def fp32_reasons(self) -> dict[str, list[str]]:
        """Reason -> names of the float32 nodes kept for it (in graph order)."""
        out: dict[str, list[str]] = {}
        for n in self.fp32_nodes:
            out.setdefault(n.reason, []).append(n.name)
        return out

    def to_dict(self) -> dict:
        """A JSON-ready dict (plain types only)."""
        extra = sections_dict(self.notes, self.onnx, self.demo, self.auto)
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
            **({"tuning": dict(self.tuning)} if self.tuning is not None else {}),
            **({"cpu": self.cpu} if self.cpu is not None else {}),
            **({"extra": extra} if extra else {}),
        }

    def to_json(self, indent: int | None = 2) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=indent)

    def dtype_columns(self) -> list[str]:
        """The dtypes that occur, low precision first (column order of the tables)."""
        order = {self.target_dtype: 0, "float32": 1}
        return sorted(self.nodes_by_dtype, key=lambda d: (order.get(d, 2 if d != NON_FLOAT else 3), d))


def tuning_summary(tuning: Mapping[str, Any]) -> str:
    """One paragraph on what ``tune=`` timed and chose (a report's ``tuning``)."""
    kernels = tuning.get("kernels", [])
    kept = [k for k in kernels if k["kept"] == "float32"]
    text = (f"tuned on {tuning['machine']}: {len(kernels)} kernels timed "
            f"({sum(k['cached'] for k in kernels)} from the cache), {len(kept)} kept in float32")
    before, after = tuning.get("untuned_model_ms"), tuning.get("tuned_model_ms")
    if before is not None and after is not None:
        text += (f"; whole model {before:.3g} ms untuned, {after:.3g} ms tuned"
                 + ("" if tuning.get("applied", True) else ": slower, the untuned choices stand"))
    else:
        text += "; the tuned graph is the untuned one"
    return text


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
                 model: str | None = None) -> ConversionReport:
    """The :class:`ConversionReport` of ``conversion``.

    Parameters
    ----------
    conversion : mxnet_amp.record.Conversion
        What :func:`~mxnet_amp.convert.convert_graph` / ``convert_model_full`` returned.
    arg_params, aux_params : dict, optional
        The params before conversion; give them for byte counts (else counts come from the
        dtypes the conversion recorded).
    new_arg_params, new_aux_params : dict, optional
        The params after conversion.
    model : str, optional
        A label for the model shown in the report.

    Returns
    -------
    ConversionReport
    """

    before, after = _params_before_after(conversion, arg_params, aux_params,
                                         new_arg_params, new_aux_params)
    return ConversionReport(
        target_dtype=conversion.policy.target_dtype,
        model=model,
        **_node_figures(conversion),
        **_cast_counts(conversion),
        params_before=before,
        params_after=after,
        excluded=tuple(sorted(k for k, why in conversion.fp32_nodes.items()
                              if reason_kind(why) == "user exclusion")),
        fallbacks=tuple(conversion.result.fallbacks),
        unlisted_ops=tuple(sorted(conversion.result.unlisted_ops)),
        **_folding(conversion),
        cpu=cpu_summary(),
    )


def _node_figures(conversion: Conversion) -> dict[str, Any]:
    """The report's fields on the graph converted: op nodes, nodes per dtype, per op and
    dtype, per category, the float32 nodes with their reasons."""
    result = conversion.result
    original: Graph = conversion.original
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
            fp32_nodes.append(FP32Node(node.name, node.op, _fp32_reason(node.name, decision, fallbacks)))
    return {"total_nodes": total, "nodes_by_dtype": dict(by_dtype),
            "nodes_by_op": {op: dict(c) for op, c in by_op.items()}, "categories": dict(cats),
            "fp32_nodes": tuple(fp32_nodes)}


def _cast_counts(conversion: Conversion) -> dict[str, Any]:
    """The report's fields on the casts: ``amp_cast`` and ``amp_multicast`` nodes, the
    amp_casts by dtype and those of a stored weight, among the casts the conversion inserted (its record: a model's own casts are not counted; fusion
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
    return {"casts": sum(casts_by.values()), "multicasts": n_multi, "casts_by_dtype": dict(casts_by),
            "weight_casts": n_weight}


def _folding(conversion: Conversion) -> dict:
    """The report's fields on what the conversion did besides casting: BatchNorm folding,
    fusion barriers."""
    return {"folded_batchnorms": tuple(bn for bn, _ in conversion.folded_batchnorms),
            "kept_batchnorms": conversion.kept_batchnorms,
            "input_model": conversion.input_figures,
            "fusion_barriers": tuple(conv for conv, _ in conversion.fusion_barriers),
            "tuning": None if conversion.tuning is None else conversion.tuning.to_dict()}

