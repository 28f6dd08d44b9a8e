"""``mxnet-amp``: convert, inspect and try out mixed precision from the command line.

Subcommands: ``convert`` (a checkpoint pair to a new one), ``auto`` (automatic mode driven
by sample inputs), ``inspect`` (what a conversion would do, nothing written) and ``demo``
(a zoo model built locally, converted and run fp32 against low precision). Every error is
one line ``mxnet-amp: error: ...`` on stderr and exit code 2; ``--debug`` shows the
traceback instead. The parser is :mod:`mxnet_amp.cli.parser`, the checks before any work
:mod:`mxnet_amp.cli.checks`, ``auto`` :mod:`mxnet_amp.cli.auto_command` and ``demo``
:mod:`mxnet_amp.cli.demo`.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import warnings
from typing import TYPE_CHECKING, Any, Iterator, NoReturn, Sequence

from ..checkpoint import (checkpoint_conversion, checkpoint_inputs, load_checkpoint as restored_checkpoint,
                          restoring_load)
from ..errors import AMPError, CLIError, StrippedCastsError, error_text
from ..files.atomic import atomic_write
from ..files.paths import checkpoint_files, output_target
from ..mx.hardware import HardwareWarning
from ..onnx.export import check_exportable, export_onnx
from ..report.model import build_report
from ..report.sections import OnnxSection
from .auto_command import cmd_auto
from .checks import check_before_work, check_prefix, in_cli_terms, options_of
from .demo import run_demo
from .output import EXIT_ERROR, EXIT_INTERRUPTED, PROG, finish, say, with_hardware_note
from .parser import command_parser, shape_spec

if TYPE_CHECKING:
    from ..record import Conversion
    from ..report.model import ConversionReport

__all__ = ["main", "run", "exit_now", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``mxnet-amp`` (one subparser per command)."""
    return command_parser({"convert": _cmd_convert, "export-onnx": _cmd_export_onnx,
                           "inspect": _cmd_inspect, "auto": cmd_auto, "demo": run_demo})




def _convert_prefix(args: argparse.Namespace, write: bool) -> tuple[Conversion, ConversionReport]:
    check_prefix(args.prefix, args.epoch)
    shapes = dict(shape_spec(spec, "--input-shape") for spec in args.input_shapes)
    conversion, new_args, new_aux, _ = checkpoint_conversion(
        args.prefix, args.epoch, getattr(args, "out", None), getattr(args, "out_epoch", None),
        options_of(args), data_names=args.data_names, write=write, progress=None,
        data_shapes=shapes or None, fused_for="cpu" if getattr(args, "fuse_cpu", False) else None)
    report = build_report(conversion, new_arg_params=new_args, new_aux_params=new_aux,
                          model=os.path.basename(args.prefix))
    return conversion, with_hardware_note(report)


def _cmd_convert(args: argparse.Namespace) -> int:
    if args.onnx:
        _onnx_preflight(args)
    conversion, report = _convert_prefix(args, write=True)
    out = args.out or args.prefix + "-amp"
    epoch = args.epoch if args.out_epoch is None else args.out_epoch
    if args.onnx:
        record = _export_onnx(args, out, epoch, args.onnx)
        report = dataclasses.replace(report, onnx=OnnxSection(record.to_dict()),
                                     notes=(*report.notes, *record.describe().splitlines()))
    files = [f"{out}-symbol.json", f"{out}-{epoch:04d}.params"] + ([args.onnx] if args.onnx else [])
    finish(args, conversion, report, on_disk=files)
    say(f"{PROG}: wrote {' and '.join(files)}")
    return 0


def _onnx_preflight(args: argparse.Namespace) -> None:
    """Before any file is written: input shapes given, onnx installed, every op exportable."""
    import mxnet as mx
    if not args.input_shapes:
        raise CLIError("--onnx needs the shape of each model input: --input-shape NAME:SHAPE")
    check_prefix(args.prefix, args.epoch)
    check_exportable(mx.sym.load(checkpoint_files(args.prefix, args.epoch)[0]), args.opset)


def _export_onnx(args: argparse.Namespace, prefix: str, epoch: int, path: str) -> Any:
    shapes = dict(shape_spec(spec, "--input-shape") for spec in args.input_shapes)
    # a converted model saved without its amp casts gets them back (MXNet cannot bind it so)
    sym, arg_params, aux_params = restored_checkpoint(prefix, epoch)
    protect = [p for _, p in checkpoint_inputs(args.prefix, args.epoch) if p]
    return export_onnx(sym, arg_params, aux_params, shapes, path, opset=args.opset,
                       dynamic_batch=args.dynamic_batch, external_data=args.external_data,
                       protect=protect)


def _cmd_export_onnx(args: argparse.Namespace) -> int:
    if not args.input_shapes:
        raise CLIError("export-onnx needs the shape of each model input: --input-shape NAME:SHAPE")
    if output_target(args.out).kind != "file":
        # the model (and its record, read back from the file) needs a file; the description
        # printed on stdout would be mixed into a model written there
        raise CLIError(f"export-onnx -o {args.out}: the ONNX model is written to a file; give "
                       "a file name (model.onnx)")
    check_prefix(args.prefix, args.epoch)
    record = _export_onnx(args, args.prefix, args.epoch, args.out)
    print(record.describe())
    if args.report:
        text = json.dumps(record.to_dict(), indent=1)

        def write(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        atomic_write(args.report, write)
    say(f"{PROG}: wrote {args.out}" + (f" and {record.data_path}" if record.data_path else ""))
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    try:
        conversion, report = _convert_prefix(args, write=False)
    except StrippedCastsError:
        return _inspect_stripped(args)
    finish(args, conversion, report, ["", "(inspect: no checkpoint written)"])
    return 0


def _inspect_stripped(args: argparse.Namespace) -> int:
    """A converted model saved without its amp casts: say so, and report on the model with
    its casts restored (a StrippedCastsError where they cannot be)."""
    loaded = restoring_load(args.prefix, args.epoch, progress=None)
    arg_params, aux_params, conversion = loaded.arg_params, loaded.aux_params, loaded.conversion
    if conversion is None:   # nothing was stripped: the plain inspect would have run
        raise CLIError(f"{args.prefix}: not a model saved without its amp casts")
    report = build_report(conversion, new_arg_params=arg_params, new_aux_params=aux_params,
                          model=os.path.basename(args.prefix))
    casts = len(conversion.result.inserted_casts)
    finish(args, conversion, report, [
        "", f"{args.prefix}: a {conversion.policy.target_dtype} "
        "mixed precision model saved without its amp casts (mx.model.save_checkpoint, export() "
        "and Symbol.save drop them unless given remove_amp_cast=False); MXNet cannot bind it "
        f"as saved. mxnet_amp.load_checkpoint restores its {casts} cast(s): the report above "
        "is of that model. Save it with mxnet_amp.save_checkpoint to keep them.",
        "(inspect: no checkpoint written)"])
    return 0




def _one_line(err: AMPError) -> str:
    """The error's message on one line: a heading that ends in ':' keeps the lines after it
    (OnnxExportError's nodes and their causes), which error_text's first line would cut."""
    lines = [line.strip() for line in str(err).split("Stack trace:")[0].splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        return lines[0] + " " + "; ".join(error_text(line) for line in lines[1:])
    return error_text(err)


@contextlib.contextmanager
def _warnings_said_at_once() -> Iterator[None]:
    """Print each warning (once per text) on stderr the moment it is given: before the
    "wrote ..." lines it concerns, and not lost when the command fails afterwards."""
    shown: set[str] = set()

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        text = in_cli_terms(error_text(message))
        if issubclass(category, (UserWarning, RuntimeWarning)) and text not in shown:
            shown.add(text)
            say(f"{PROG}: warning: {text}")
    with warnings.catch_warnings():   # restores the filters and showwarning on exit
        warnings.simplefilter("always")
        # the commands say it once as a note (output.with_hardware_note), the library at each save
        warnings.simplefilter("ignore", HardwareWarning)
        warnings.showwarning = show
        yield


def main(argv: Sequence[str] | None = None, *, exit_at_interrupt: bool = False) -> int:
    """Run ``mxnet-amp`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code.

    ``exit_at_interrupt`` (the program itself, :func:`run`): after Ctrl-C the process ends
    at once, by ``os._exit(130)``, once its message is out. Every clean-up (temporary files,
    worker processes) ran while the interrupt unwound; what was left is freeing the model's
    arrays and MXNet's engine at exit, seconds for a 1 GB model, and nothing to wait for."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:   # --help, or argparse's own usage error (already printed)
        return int(done.code or 0)
    # MXNet reads these when it loads; they only quiet its informational log lines
    os.environ.setdefault("MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "0")
    os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")
    try:
        with _warnings_said_at_once():
            check_before_work(args)
            return int(args.run(args))
    except KeyboardInterrupt:
        say(f"{PROG}: interrupted")
        if exit_at_interrupt:   # here, while the interrupted frames still hold the arrays
            exit_now(EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED
    except Exception as err:  # every failure ends as one line unless --debug
        if args.debug:
            raise
        if isinstance(err, AMPError):
            msg = in_cli_terms(_one_line(err))
        elif isinstance(err, OSError):
            msg = f"{err.strerror or err}: {err.filename}" if err.filename else error_text(err)
        elif type(err).__name__ == "MXNetError":
            msg = "MXNet: " + error_text(err)
        else:
            msg = f"{type(err).__name__}: {error_text(err)} (run with --debug for the traceback)"
        say(f"{PROG}: error: {msg}")
        return EXIT_ERROR


def run() -> NoReturn:
    """The ``mxnet-amp`` program (its console script and ``python -m mxnet_amp``):
    :func:`main` on ``sys.argv``, ending at once after Ctrl-C."""
    sys.exit(main(exit_at_interrupt=True))


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` now, its output flushed, without Python's or MXNet's
    teardown (``os._exit``)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):   # closed or gone: nothing to flush
            pass
    os._exit(code)


if __name__ == "__main__":   # pragma: no cover
    run()
