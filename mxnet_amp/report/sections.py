"""The optional parts of a conversion report that a command adds: typed, read by field.

``convert --onnx`` adds an :class:`OnnxSection`, ``demo`` a :class:`DemoSection`, ``auto``
an :class:`AutoSection`; any command adds notes. The report's pages read these fields (the
demo's figures, the automatic mode's verdict and notes), never a key of another module's
dict, and :func:`sections_dict` writes them as the JSON report's ``extra`` object. Nothing
here imports the automatic mode or the ONNX exporter: they fill these records.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["AutoSection", "OnnxSection", "DemoSpeed", "DemoSection", "sections_dict"]


@dataclass(frozen=True)
class AutoSection:
    """What the automatic mode adds to a report (built by ``AutoReport.section()``).

    Attributes
    ----------
    validated : bool
        Whether the returned model met the tolerance (the page's verdict).
    notes : tuple of str
        What the reader should know (the float32 reference holding inf/nan, say).
    record : mapping
        ``AutoReport.to_dict()``: the JSON report's ``extra.auto``; only the automatic
        mode's own page builder (``auto/html.py``) reads inside it.
    """

    validated: bool
    notes: tuple[str, ...]
    record: Mapping[str, Any]


@dataclass(frozen=True)
class OnnxSection:
    """What ``convert --onnx`` adds to a report: the export's record (``ExportRecord.to_dict()``),
    written as the JSON report's ``extra.onnx``; the report's lines on it come as notes."""

    record: Mapping[str, Any]


@dataclass(frozen=True)
class DemoSpeed:
    """The demo's timing of both models (median of ``runs`` runs in one process)."""

    speedup: float
    fp32_ms: float
    low_ms: float
    runs: int


@dataclass(frozen=True)
class DemoSection:
    """What ``demo`` measured on the converted model.

    Attributes
    ----------
    native : bool
        Whether the low precision model ran natively (else through emulation).
    execution : str
        How it ran, in words (``native bfloat16``, ``float16 emulated in float32``).
    input : str
        The input's shape, ``2x3x224x224``.
    relative_max_error : float
        max |diff| / max |fp32| over the outputs.
    top1_agreement : float or None
        Share of rows whose argmax agrees (None when the first output is not class scores).
    speed : DemoSpeed or None
        The timing, where the low precision model ran natively.
    chunk : int or None
        The samples one run held (``--chunk``: a larger batch ran chunk by chunk).
    """

    native: bool
    execution: str
    input: str
    relative_max_error: float
    top1_agreement: float | None
    speed: DemoSpeed | None = None
    chunk: int | None = None


def sections_dict(notes: tuple[str, ...], onnx: OnnxSection | None, demo: DemoSection | None,
                  auto: AutoSection | None) -> dict[str, Any]:
    """The JSON report's ``extra`` object: ``notes``, ``onnx``, the demo's figures (speed
    first) and ``auto``, each only when present (empty when none is)."""
    out: dict[str, Any] = {}
    if notes:
        out["notes"] = list(notes)
    if onnx is not None:
        out["onnx"] = dict(onnx.record)
    if demo is not None:
        if demo.speed is not None:
            s = demo.speed
            out.update(speedup=s.speedup, fp32_ms=s.fp32_ms, low_ms=s.low_ms, runs=s.runs)
        out.update(native=demo.native, execution=demo.execution, input=demo.input,
                   relative_max_error=demo.relative_max_error, top1_agreement=demo.top1_agreement)
        if demo.chunk is not None:
            out["chunk"] = demo.chunk
    if auto is not None:
        out["auto"] = dict(auto.record)
    return out
