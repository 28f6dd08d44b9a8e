"""What every ``mxnet-amp`` command prints and writes: stderr messages, the report table,
``--report`` / ``--graph`` / ``--html`` files, notes added to a report. Shared by
:mod:`mxnet_amp.cli.main` (the commands) and :mod:`mxnet_amp.cli.demo` (the ``demo`` command).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from ..auto.html import auto_sections
from ..errors import AMPError, OutputPathError, error_text
from ..files.atomic import atomic_write
from ..files.paths import STREAM_NAMES
from ..mx.hardware import native_note
from ..report.draw import graph_svg, write_graph
from ..report.pages import format_table, report_html
from ..report.precision_svg import precision_map_svg

if TYPE_CHECKING:
    from ..record import Conversion
    from ..report.model import ConversionReport

__all__ = ["PROG", "EXIT_ERROR", "EXIT_INTERRUPTED", "say", "write_outputs", "finish", "with_note",
           "with_hardware_note", "native_log_silenced"]

PROG = "mxnet-amp"
EXIT_ERROR = 2   # the exit code of every failure (argparse's own usage errors included)
EXIT_INTERRUPTED = 130   # Ctrl-C, as a shell reports a command SIGINT ended (128 + 2)


def say(*parts: object) -> None:
    """Print ``parts`` on stderr (messages; stdout carries the report)."""
    print(*parts, file=sys.stderr)


def write_outputs(args: argparse.Namespace, conversion: Conversion, report: ConversionReport,
                  written: list[str] | None = None) -> list[str]:
    """Write --report / --graph / --html; returns what was written (``written``, when
    given, is that list, filled as each file is done: after a failure it says which were)."""
    written = [] if written is None else written
    limit = None if getattr(args, "detail", False) else 80

    def text_writer(text: str) -> Callable[[str], None]:
        def write(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
        return write
    if args.report:
        atomic_write(args.report, text_writer(report.to_json()))
        written.append(args.report)
    if args.graph:
        write_graph(conversion, args.graph, title=report.model or "", detail_limit=limit)
        written.append(args.graph)
    if args.html:
        page = report_html(report, graph_svg(conversion, report.model or "", limit),
                           auto_sections(report.auto),
                           precision_map_svg(conversion, report.model or "", _given_shapes(args)))
        atomic_write(args.html, text_writer(page))
        written.append(args.html)
    return written


def _given_shapes(args: argparse.Namespace) -> dict[str, tuple[int, ...]]:
    """The model inputs' shapes the command was given, which the precision map's costs are
    estimated at: ``--input-shape`` and ``auto``'s ``--input`` shapes (``NAME:1x3x224x224``,
    checked by the command before it converted; a ``.npy`` input is left to be assumed),
    ``demo``'s ``--batch`` and ``--size``."""
    shapes = {}
    for spec in [*(getattr(args, "input_shapes", None) or ()), *(getattr(args, "inputs", None) or ())]:
        name, _, value = spec.partition(":")
        if not value.endswith(".npy"):
            shapes[name] = tuple(int(d) for d in value.lower().split("x"))
    size, batch = getattr(args, "size", None), getattr(args, "batch", None)
    if not shapes and isinstance(size, int) and isinstance(batch, int):
        shapes["data"] = (batch, 3, size, size)   # the demo's zoo model reads an RGB image batch
    return shapes


def finish(args: argparse.Namespace, conversion: Conversion, report: ConversionReport,
           extra_lines: Sequence[str] = (), on_disk: Sequence[str] = ()) -> None:
    """Write the files the flags ask for, print the report table (unless ``--quiet``) and
    ``extra_lines``, then say on stderr what was written. ``on_disk``: the files the command
    wrote before (the checkpoint); when a file asked for here cannot be written, the
    :class:`OutputPathError` says those are complete, and which of these were written."""
    written: list[str] = []
    try:
        write_outputs(args, conversion, report, written)
    except (AMPError, OSError) as err:
        if not on_disk and not written:
            raise
        done = [*on_disk, *written]
        raise OutputPathError(f"{error_text(err)}; written and complete before it: "
                              f"{', '.join(done)}") from err
    # a file written to standard output (``--report -``) keeps it to itself: the table and
    # the findings go to stderr then, so that ``> report.json`` gets the file alone
    out = sys.stderr if any(STREAM_NAMES.get(path) == "stdout" for path in written) else sys.stdout
    if not args.quiet:
        print(format_table(report, sections=auto_sections(report.auto)), file=out)
    lines = list(extra_lines)
    if args.quiet:
        # the report table is what --quiet leaves out; the command's own findings stay
        while lines and not lines[0]:
            lines.pop(0)
    for line in lines:
        print(line, file=out)
    for path in written:
        say(f"{PROG}: wrote {path}" if path not in STREAM_NAMES
            else f"{PROG}: wrote {path} (standard {'output' if STREAM_NAMES[path] == 'stdout' else 'error'})")


def with_note(report: ConversionReport, note: str) -> ConversionReport:
    """``report`` with ``note`` added to its ``notes`` (shown in the table and HTML)."""
    return dataclasses.replace(report, notes=(*report.notes, note))


def with_hardware_note(report: ConversionReport) -> ConversionReport:
    """Say now, on stderr and in the report, when this machine cannot run the model."""
    with native_log_silenced():
        note = native_note(report.target_dtype)
    if note is None:
        return report
    say(f"{PROG}: note: {note}")
    return with_note(report, note[0].upper() + note[1:])


@contextlib.contextmanager
def native_log_silenced() -> Iterator[None]:
    """Hide what MXNet's C++ side logs on fd 2 while the hardware probe fails on purpose
    (oneDNN's "could not create a primitive descriptor iterator")."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
