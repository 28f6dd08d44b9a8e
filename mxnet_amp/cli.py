"""``mxnet-amp``: convert, inspect and try out mixed precision from the command line.

Subcommands: ``convert`` (a checkpoint pair to a new one), ``auto`` (automatic mode driven
by sample inputs), ``inspect`` (what a conversion would do, nothing written) and ``demo``
(a zoo model built locally, converted and run fp32 against low precision). Every error is
one line ``mxnet-amp: error: ...`` on stderr and exit code 2; ``--debug`` shows the
traceback instead.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import warnings
from typing import TYPE_CHECKING, Any, Iterator, NoReturn, Sequence

from .cli_output import (PROG, finish, say, with_extra, with_hardware_note)
from .errors import AMPError, CLIError, error_text

if TYPE_CHECKING:
    import numpy as np

    from .record import Conversion
    from .options import ConvertOptions
    from .report import ConversionReport

__all__ = ["main", "build_parser", "CLIError", "parse_input_spec"]

EXIT_ERROR = 2


# --- parser -------------------------------------------------------------------------------

_DTYPE_METAVAR = "{float16,bfloat16}"


class _Parser(argparse.ArgumentParser):
    """argparse with the one-line errors of every other failure: ``mxnet-amp: error: ...``
    and exit code 2, instead of the whole usage text (subcommand parsers are of this class
    too: ``add_subparsers`` makes them with the class of their parent)."""

    def error(self, message: str) -> NoReturn:
        say(f"{PROG}: error: {message} (see '{self.prog} --help')")
        raise SystemExit(EXIT_ERROR)


class _PrefixFirst(argparse.HelpFormatter):
    """Usage with the positional arguments first (``convert PREFIX [options]``): after an
    option that takes several values, ``PREFIX`` would be read as one more of them."""

    def _format_usage(self, usage: str | None, actions: Any, groups: Any, prefix: str | None) -> str:
        positionals = [a for a in actions if not a.option_strings]
        if usage is not None or not positionals:
            return super()._format_usage(usage, actions, groups, prefix)
        optionals = [a for a in actions if a.option_strings]
        parts = [self._prog] + [self._format_actions_usage(positionals, groups)] + re.findall(
            r"\(.*?\)+(?=\s|$)|\[.*?\]+(?=\s|$)|\S+", self._format_actions_usage(optionals, groups))
        head = prefix if prefix is not None else "usage: "
        indent, lines, line = " " * (len(head) + len(self._prog) + 1), [], ""
        for part in parts:
            if line and len(head) + len(line) + 1 + len(part) > self._width:
                lines.append(line)
                line = indent[len(head):]
            line = f"{line} {part}" if line.strip() else line + part
        lines.append(line)
        return head + ("\n" + " " * len(head)).join(lines) + "\n\n"


def _target_dtype(text: str) -> str:
    """``--target-dtype`` value: the aliases of :func:`mxnet_amp.policy.check_target_dtype`."""
    from .policy import check_target_dtype
    try:
        return check_target_dtype(text)
    except AMPError:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose float16 or bfloat16; "
                                         "fp16, half and bf16 are accepted too)") from None


def _conversion_options(p: argparse.ArgumentParser, dtype_required: bool) -> None:
    p.add_argument("prefix", metavar="PREFIX",
                   help="checkpoint prefix: reads PREFIX-symbol.json and PREFIX-NNNN.params")
    p.add_argument("--epoch", type=int, default=0, metavar="N", help="checkpoint epoch (default 0)")
    p.add_argument("--target-dtype", type=_target_dtype, metavar=_DTYPE_METAVAR, required=dtype_required,
                   default=None if dtype_required else "float16",
                   help="low precision dtype" + ("" if dtype_required else " (default float16)")
                   + "; fp16/half and bf16 are accepted too")
    p.add_argument("--fp32-ops", nargs="+", default=None, metavar="OP",
                   help="ops to run in float32 (on top of the shipped lists)")
    p.add_argument("--target-ops", nargs="+", default=None, metavar="OP",
                   help="ops to run in the target dtype (on top of the shipped lists)")
    p.add_argument("--widest-ops", nargs="+", default=None, metavar="OP",
                   help="ops whose float inputs are cast to the widest among them")
    p.add_argument("--follow-ops", nargs="+", default=None, metavar="OP",
                   help="ops that run in whatever dtype their inputs have (no casts)")
    p.add_argument("--exclude", nargs="+", default=None, metavar="NAME",
                   help="node names that stay in float32 whatever their op")
    p.add_argument("--data-names", nargs="+", default=None, metavar="NAME",
                   help="model inputs (default: symbol arguments with no saved param)")
    p.add_argument("--cast-optional-params", action=argparse.BooleanOptionalAction, default=True,
                   help="store weights that only low precision ops read in low precision "
                   "(default on; --no-cast-optional-params keeps every weight float32, cast at "
                   "every run, as mx.contrib.amp does by default)")
    p.add_argument("--strict-params", action="store_true",
                   help="params the symbol does not read are an error (default: a warning "
                   "naming them; stale checkpoint entries are common)")
    p.add_argument("--guard-weight-range", action=argparse.BooleanOptionalAction, default=True,
                   help="float16: keep the ops reading a weight float16 cannot hold (inf, or "
                   "mostly flushed to 0) in float32, each with its reason in the report "
                   "(default on; --no-guard-weight-range converts them, with a warning)")
    _fold_option(p)
    p.add_argument("--tune", nargs="?", const=True, default=None, metavar="CACHE.json",
                   help="bfloat16: time each Convolution / FullyConnected / Deconvolution kernel "
                   "on this machine (at --input-shape, or auto's --input shapes) and keep in "
                   "float32 those slower in bfloat16; timings cached in CACHE.json (default "
                   "~/.cache/mxnet_amp/tune.json)")
    _output_options(p)


def _fold_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fold-bn", action=argparse.BooleanOptionalAction, default=True,
                   help="fold each inference BatchNorm into the Convolution / FullyConnected / "
                   "Deconvolution before it, in float32, before rounding the weights (default "
                   "on: MXNet's own bind-time fusion folds them in low precision, far less "
                   "accurately; --no-fold-bn keeps them)")


def _output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--report", metavar="FILE.json", help="write the conversion report as JSON")
    p.add_argument("--graph", metavar="FILE", help="draw the converted graph, nodes coloured by "
                   "dtype (.svg; .dot/.gv for graphviz; .png needs cairosvg or dot)")
    p.add_argument("--html", metavar="FILE.html",
                   help="write one self-contained page with the report and the picture")
    p.add_argument("--detail", action="store_true",
                   help="draw every node (--graph, --html) instead of collapsing graphs of more "
                   "than 80 nodes into blocks")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print the report table")


def _input_shape_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME:SHAPE",
                   dest="input_shapes",
                   help="a model input's shape, e.g. data:1x3x224x224, so that every weight's "
                   "shape is checked against it (repeat for several inputs)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``mxnet-amp`` (one subparser per command)."""
    parser = _Parser(
        prog=PROG, description="Automatic mixed precision (float16 / bfloat16) for MXNet 1.9 models.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _convert_parser(sub)
    _export_onnx_parser(sub)

    p = sub.add_parser("inspect", formatter_class=_PrefixFirst,
                       help="print what a conversion would do; writes no checkpoint",
                       description="Convert in memory and print the report; no checkpoint is "
                       "written (--report/--graph/--html still write those files).")
    _conversion_options(p, dtype_required=False)
    _input_shape_option(p)
    p.set_defaults(run=_cmd_inspect)

    _auto_parser(sub)
    _demo_parser(sub)
    return parser


def _convert_parser(sub: Any) -> None:
    p = sub.add_parser("convert", formatter_class=_PrefixFirst,
                       help="convert a checkpoint and write a new one",
                       description="Convert PREFIX-symbol.json + PREFIX-NNNN.params to mixed "
                       "precision and write OUT-symbol.json + OUT-NNNN.params (casts kept).")
    _conversion_options(p, dtype_required=True)
    p.add_argument("--out", metavar="PREFIX2", default=None,
                   help="output checkpoint prefix (default PREFIX-amp)")
    p.add_argument("--out-epoch", type=int, default=None, metavar="N",
                   help="output epoch (default: the input epoch)")
    p.add_argument("--fuse-cpu", action="store_true",
                   help="write the graph already partitioned by MXNet's oneDNN backend, so every "
                   "loader (SymbolBlock.imports + a plain hybridize() included) runs the fused "
                   "CPU kernels; bfloat16 only, and the file binds on CPUs only")
    _input_shape_option(p)
    p.add_argument("--onnx", metavar="FILE.onnx", default=None,
                   help="also export the converted model to ONNX (needs --input-shape; the "
                   "onnx extra)")
    _onnx_options(p)
    p.set_defaults(run=_cmd_convert)


def _demo_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="build a zoo model locally, convert it, run fp32 vs low precision",
                       description="Build a Gluon model zoo network with random weights (no "
                       "downloads), convert it, run the fp32 and the converted model on the "
                       "same inputs and print the report, the accuracy and, where low precision "
                       "runs natively, the measured speed ratio.")
    p.add_argument("--model", default="resnet18_v1",
                   help="model zoo name (default resnet18_v1; e.g. mobilenet0.25, vgg11)")
    p.add_argument("--target-dtype", type=_target_dtype, metavar=_DTYPE_METAVAR, default="bfloat16",
                   help="low precision dtype (default bfloat16; fp16/half and bf16 are accepted too)")
    p.add_argument("--size", type=int, default=64, help="input image side (default 64)")
    p.add_argument("--batch", type=int, default=2, help="batch size (default 2)")
    p.add_argument("--runs", type=int, default=5, help="timed runs per model (default 5)")
    p.add_argument("--seed", type=int, default=0, help="seed of weights and inputs (default 0)")
    p.add_argument("--cast-optional-params", action=argparse.BooleanOptionalAction, default=True,
                   help="store weights that only low precision ops read in low precision "
                   "(default on: cast at every run instead, MXNet's bfloat16 amp_cast makes a "
                   "CPU model many times slower than float32)")
    _fold_option(p)
    _output_options(p)
    p.set_defaults(run=_cmd_demo)


def _export_onnx_parser(sub: Any) -> None:
    p = sub.add_parser("export-onnx", help="export a (converted) checkpoint to ONNX",
                       description="Export PREFIX-symbol.json + PREFIX-NNNN.params (a converted "
                       "checkpoint: casts kept) to ONNX, each amp cast an ONNX Cast, weights in "
                       "their stored dtypes.")
    p.add_argument("prefix", metavar="PREFIX", help="checkpoint prefix")
    p.add_argument("--epoch", type=int, default=0, metavar="N", help="checkpoint epoch (default 0)")
    p.add_argument("-o", "--out", metavar="FILE.onnx", required=True, help="the ONNX file")
    _input_shape_option(p)
    _onnx_options(p)
    p.add_argument("--report", metavar="FILE.json", help="write the export record as JSON")
    p.set_defaults(run=_cmd_export_onnx)


def _onnx_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--opset", type=int, default=13, choices=(12, 13),
                   help="ONNX opset (default 13; MXNet 1.9.1's exporter converts to 12 and 13)")
    p.add_argument("--dynamic-batch", action="store_true",
                   help="leave the first dimension of each input free ('batch')")
    p.add_argument("--external-data", action=argparse.BooleanOptionalAction, default=None,
                   help="weights in FILE.onnx.data beside the model (default: when they "
                   "exceed protobuf's 2 GB limit)")


# --- helpers ------------------------------------------------------------------------------

def _version() -> str:
    from . import __version__
    return __version__


def _check_prefix(prefix: str, epoch: int) -> None:
    from .paths import checkpoint_files
    for path in checkpoint_files(prefix, epoch):
        if not os.path.isfile(path):
            raise CLIError(f"checkpoint file not found: {path}")


def _check_values(args: argparse.Namespace) -> None:
    """Numbers out of range, named by their flag (argparse only checks their type)."""
    import math
    for flag, value, least in (("--epoch", getattr(args, "epoch", None), 0),
                               ("--out-epoch", getattr(args, "out_epoch", None), 0),
                               ("--max-executions", getattr(args, "max_executions", None), 2)):
        if value is not None and value < least:
            raise CLIError(f"{flag} must be at least {least}, got {value}")
    for flag in ("rtol", "atol"):
        value = getattr(args, flag, None)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise CLIError(f"--{flag} must be a finite number >= 0, got {value}")
    value = getattr(args, "tolerance", None)
    if value is not None and not (math.isfinite(value) and value > 0):
        raise CLIError(f"--tolerance must be a finite number > 0, got {value}")
    _check_conflicts(args)
    if getattr(args, "fuse_cpu", False) and args.target_dtype == "float16":
        raise CLIError("--fuse-cpu writes a model for the CPU (oneDNN's fused nodes), and "
                       "float16 runs only on a GPU: use --target-dtype bfloat16, or drop "
                       "--fuse-cpu")
    if getattr(args, "execution", None) == "native" and args.target_dtype == "float16":
        raise CLIError("--execution native cannot run float16 here: MXNet has no float16 CPU "
                       "kernels; use --execution emulated (or auto) to check it through "
                       "emulation, and run the converted model on a GPU")


def _check_conflicts(args: argparse.Namespace) -> None:
    """Flags that contradict each other, refused by name (none silently wins)."""
    given = [flag for flag in ("rtol", "atol") if getattr(args, flag, None) is not None]
    if given and getattr(args, "tolerance", None) is not None:
        raise CLIError(f"--tolerance and --{'/--'.join(given)} are two different checks "
                       "(the scaled bound, or elementwise allclose): give one")
    if getattr(args, "inputs", None) and getattr(args, "inputs_npz", None):
        raise CLIError("--input and --inputs-npz both give sample inputs: give one of them")
    for flag, specs in (("--input", getattr(args, "inputs", None)),
                        ("--input-shape", getattr(args, "input_shapes", None))):
        seen: dict[str, str] = {}
        for spec in specs or ():
            name = spec.partition(":")[0]
            if name in seen:
                raise CLIError(f"{flag} gives {name!r} twice ({seen[name]!r} and {spec!r}): "
                               "give each input once")
            seen[name] = spec
    if getattr(args, "max_drop", None) is not None and getattr(args, "eval_data", None) is None:
        raise CLIError("--max-drop bounds the drop of the --eval-data metric: give --eval-data "
                       "and --labels too")


def _out_prefix(args: argparse.Namespace) -> str | None:
    """The output checkpoint prefix of a command that writes one (None for the others)."""
    if args.command not in ("convert", "auto"):
        return None
    return str(args.out or args.prefix + "-amp")


def _files(args: argparse.Namespace) -> tuple[list[tuple[str, str | None]], list[tuple[str, str | None]]]:
    """``(inputs, outputs)``: every file the command reads and writes, labelled."""
    from .checkpoint import checkpoint_inputs, checkpoint_outputs
    inputs: list[tuple[str, str | None]] = []
    if hasattr(args, "prefix"):
        inputs += checkpoint_inputs(args.prefix, args.epoch)
    for spec in getattr(args, "inputs", None) or ():
        value = spec.partition(":")[2]
        if value.endswith(".npy"):
            inputs.append(("--input file", value))
    inputs.append(("--inputs-npz file", getattr(args, "inputs_npz", None)))
    outputs: list[tuple[str, str | None]] = []
    out = _out_prefix(args)
    if out is not None:
        epoch = args.epoch if getattr(args, "out_epoch", None) is None else args.out_epoch
        outputs += [(f"{what} (--out)", path) for what, path in checkpoint_outputs(out, epoch)]
    onnx_file = getattr(args, "onnx", None) if args.command == "convert" else getattr(args, "out", None) \
        if args.command == "export-onnx" else None
    outputs += [("ONNX file", onnx_file), ("ONNX external data", onnx_file and onnx_file + ".data")]
    outputs += [("--report file", getattr(args, "report", None)),
                ("--graph file", getattr(args, "graph", None)),
                ("--html file", getattr(args, "html", None))]
    return inputs, outputs


def _check_outputs(args: argparse.Namespace) -> None:
    """Fail before any work on a number out of range, or an output that cannot be written
    or would overwrite an input (nothing half done, nothing lost)."""
    from .draw import check_graph_path
    from .paths import check_outputs
    _check_values(args)
    check_outputs(*_files(args))
    if getattr(args, "graph", None):
        check_graph_path(args.graph)


# API argument names in error messages -> the flags that set them
_FLAG_OF = {"out_prefix": "--out", "out_epoch": "--out-epoch", "data_names": "--data-names",
            "excluded_sym_names": "--exclude", "target_dtype_ops": "--target-ops",
            "fp32_ops": "--fp32-ops", "widest_dtype_ops": "--widest-ops",
            "follow_ops": "--follow-ops",
            "max_executions": "--max-executions", "target_dtype": "--target-dtype",
            "cast_optional_params": "--cast-optional-params", "sample_inputs": "--input",
            "data_shapes": "--input-shape", "guard_weight_range": "--guard-weight-range"}
_API_NAME = re.compile(r"\b(" + "|".join(_FLAG_OF) + r")\b")


def _in_cli_terms(message: str) -> str:
    """An API error message with the argument names the command line spells as flags."""
    return _API_NAME.sub(lambda m: _FLAG_OF[m.group(1)], message)


def _options(args: argparse.Namespace) -> ConvertOptions:
    """The conversion options the flags ask for (the op lists read once)."""
    from .options import make_options
    return make_options(args.target_dtype, args.target_ops, args.fp32_ops, args.widest_ops,
                        follow_ops=args.follow_ops, excluded_sym_names=args.exclude,
                        cast_optional_params=args.cast_optional_params,
                        fold_batchnorm=args.fold_bn, strict_params=args.strict_params,
                        guard_weight_range=args.guard_weight_range,
                        tune=getattr(args, "tune", None),
                        # the flags add to the shipped lists ("move"), as their help says
                        overrides="move")


def _convert_prefix(args: argparse.Namespace, write: bool) -> tuple[Conversion, ConversionReport]:
    from .checkpoint import checkpoint_conversion
    from .report import build_report
    _check_prefix(args.prefix, args.epoch)
    shapes = dict(_shape_spec(spec, "--input-shape") for spec in args.input_shapes)
    conversion, new_args, new_aux, _ = checkpoint_conversion(
        args.prefix, args.epoch, getattr(args, "out", None), getattr(args, "out_epoch", None),
        _options(args), data_names=args.data_names, write=write, progress=None,
        data_shapes=shapes or None, fused_for="cpu" if getattr(args, "fuse_cpu", False) else None)
    report = build_report(conversion, new_arg_params=new_args, new_aux_params=new_aux,
                          model=os.path.basename(args.prefix))
    return conversion, with_hardware_note(report)


# --- commands -----------------------------------------------------------------------------

def _cmd_convert(args: argparse.Namespace) -> int:
    if args.onnx:
        _onnx_preflight(args)
    conversion, report = _convert_prefix(args, write=True)
    out = args.out or args.prefix + "-amp"
    epoch = args.epoch if args.out_epoch is None else args.out_epoch
    if args.onnx:
        record = _export_onnx(args, out, epoch, args.onnx)
        report = with_extra(report, {"onnx": record.to_dict(), "notes": [
            *report.extra.get("notes", ()), *record.describe().splitlines()]})
    finish(args, conversion, report)
    say(f"{PROG}: wrote {out}-symbol.json and {out}-{epoch:04d}.params"
        + (f" and {args.onnx}" if args.onnx else ""))
    return 0


def _onnx_preflight(args: argparse.Namespace) -> None:
    """Before any file is written: input shapes given, onnx installed, every op exportable."""
    import mxnet as mx
    from .onnx_export import check_exportable
    from .paths import checkpoint_files
    if not args.input_shapes:
        raise CLIError("--onnx needs the shape of each model input: --input-shape NAME:SHAPE")
    _check_prefix(args.prefix, args.epoch)
    check_exportable(mx.sym.load(checkpoint_files(args.prefix, args.epoch)[0]), args.opset)


def _export_onnx(args: argparse.Namespace, prefix: str, epoch: int, path: str) -> Any:
    from .checkpoint import checkpoint_inputs
    from .io import load_checkpoint
    from .onnx_export import export_onnx
    shapes = dict(_shape_spec(spec, "--input-shape") for spec in args.input_shapes)
    sym, arg_params, aux_params = load_checkpoint(prefix, epoch)
    protect = [p for _, p in checkpoint_inputs(args.prefix, args.epoch) if p]
    return export_onnx(sym, arg_params, aux_params, shapes, path, opset=args.opset,
                       dynamic_batch=args.dynamic_batch, external_data=args.external_data,
                       protect=protect)


def _cmd_export_onnx(args: argparse.Namespace) -> int:
    import json
    from .io import atomic_write
    if not args.input_shapes:
        raise CLIError("export-onnx needs the shape of each model input: --input-shape NAME:SHAPE")
    _check_prefix(args.prefix, args.epoch)
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
    from .errors import StrippedCastsError
    try:
        conversion, report = _convert_prefix(args, write=False)
    except StrippedCastsError:
        return _inspect_stripped(args)
    finish(args, conversion, report, ["", "(inspect: no checkpoint written)"])
    return 0


def _inspect_stripped(args: argparse.Namespace) -> int:
    """A converted model saved without its amp casts: say so, and report on the model with
    its casts restored (a StrippedCastsError where they cannot be)."""
    from .checkpoint import restoring_load
    from .report import build_report
    _, arg_params, aux_params, conversion = restoring_load(args.prefix, args.epoch, progress=None)
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


def parse_input_spec(spec: str, seed: int = 0) -> tuple[str, np.ndarray]:
    """``NAME:1x3x224x224`` -> (name, random normal float32 array); ``NAME:FILE.npy`` ->
    (name, the array in the file). Raises :class:`CLIError` naming the spec."""
    import numpy as np
    name, sep, value = spec.partition(":")
    if not sep or not name or not value:
        raise CLIError(f"bad --input {spec!r}: expected NAME:SHAPE (e.g. data:1x3x224x224) "
                       "or NAME:FILE.npy")
    if value.endswith(".npy"):
        if not os.path.isfile(value):
            raise CLIError(f"--input {spec!r}: file not found: {value}")
        try:
            return name, np.load(value, allow_pickle=False)
        except (ValueError, OSError) as err:
            raise CLIError(f"--input {spec!r}: cannot read {value}: {err}") from None
    name, shape = _shape_spec(spec, "--input", "nor a .npy file")
    rng = np.random.default_rng(seed)
    return name, rng.standard_normal(shape).astype("float32")


def _shape_spec(spec: str, flag: str, other: str = "") -> tuple[str, tuple[int, ...]]:
    """``NAME:1x3x224x224`` -> (name, shape); :class:`CLIError` naming ``flag`` and ``spec``."""
    name, sep, value = spec.partition(":")
    try:
        shape = tuple(int(d) for d in value.lower().split("x"))
    except ValueError:
        shape = ()
    if not sep or not name or not shape or any(d <= 0 for d in shape):
        raise CLIError(f"bad {flag} {spec!r}: expected NAME:SHAPE with SHAPE like 1x3x224x224 "
                       f"(positive integers joined by 'x'){', ' + other if other else ''}")
    return name, shape


def _auto_parser(sub: Any) -> None:
    """The ``auto`` subcommand's arguments."""
    p = sub.add_parser("auto", formatter_class=_PrefixFirst,
                       help="automatic mode: choose float32 nodes from sample inputs",
                       description="Convert, run sample inputs through the fp32 and the converted "
                       "model, and keep in float32 what the accuracy check asks for.")
    _conversion_options(p, dtype_required=False)
    p.add_argument("--input", action="append", default=[], metavar="NAME:SPEC", dest="inputs",
                   help="a sample input: NAME:1x3x224x224 (random normal values) or "
                   "NAME:FILE.npy; repeat for several inputs")
    p.add_argument("--inputs-npz", metavar="FILE.npz", default=None,
                   help="sample inputs from an .npz file (one array per input name)")
    p.add_argument("--seed", type=int, default=0, help="seed for generated inputs (default 0)")
    p.add_argument("--tolerance", type=float, default=None, metavar="T",
                   help="bound on each output's max|out-fp32|/max|fp32| (the default check, which "
                   "also keeps every top-1 class); default 1e-2 float16, 5e-2 bfloat16")
    p.add_argument("--rtol", type=float, default=None,
                   help="check elementwise allclose instead, with this relative tolerance "
                   "(default 1e-2 float16, 5e-2 bfloat16 when only --atol is given)")
    p.add_argument("--atol", type=float, default=None,
                   help="check elementwise allclose instead, with this absolute tolerance "
                   "(default 1e-3 float16, 1e-2 bfloat16 when only --rtol is given)")
    p.add_argument("--execution", choices=("auto", "native", "emulated"), default="auto",
                   help="run the converted model natively or through emulation (default: "
                   "native where the hardware runs the dtype)")
    p.add_argument("--max-executions", type=int, default=None, metavar="N",
                   help="upper bound on model runs during the search")
    p.add_argument("--eval-data", metavar="X.npz|DATA.rec|FOLDER", default=None,
                   help="evaluation data: an .npz (one array per input name, with --labels), "
                   "or, read a batch at a time, a RecordIO .rec of images (labels in its "
                   "records) or a folder of .npz batches (inputs by name, 'label') or .npy "
                   "batches; each configuration is judged on all of it")
    p.add_argument("--labels", metavar="y.npy", default=None,
                   help="labels of an --eval-data .npz (class ids for top1/top5, targets for mse)")
    p.add_argument("--metric", default="top1", metavar="NAME",
                   help="task metric of the outputs: top1 (default), top5 (in percent), mse, or "
                   "with a .rec/folder any mx.metric name (acc, top_k_accuracy, ce, ...)")
    p.add_argument("--max-drop", type=float, default=None, metavar="D",
                   help="largest metric drop that passes (top1/top5: percentage points; mse: "
                   "increase of the loss; with --drop relative: a fraction of the float32 "
                   "score); default 0.5")
    p.add_argument("--drop", choices=("absolute", "relative"), default="absolute",
                   help="--max-drop in the metric's units (default) or relative to the float32 score")
    _eval_data_options(p)
    p.add_argument("--out", metavar="PREFIX2", default=None,
                   help="output checkpoint prefix (default PREFIX-amp)")
    p.set_defaults(run=_cmd_auto)


def _eval_data_options(p: argparse.ArgumentParser) -> None:
    """How ``auto`` reads a .rec or a folder of batches, and where it judges them."""
    p.add_argument("--batch-size", type=int, default=32, metavar="B",
                   help="images per batch read from an --eval-data .rec (default 32)")
    p.add_argument("--data-shape", default=None, metavar="3x224x224",
                   help="an --eval-data .rec's images as CxHxW (crop/resize to it; required for .rec)")
    p.add_argument("--resize", type=int, default=-1, metavar="S",
                   help="resize a .rec image's shorter side to S before the crop (default: none)")
    p.add_argument("--mean-rgb", default=None, metavar="R,G,B",
                   help="subtracted from a .rec image's channels, e.g. 123.68,116.28,103.53")
    p.add_argument("--std-rgb", default=None, metavar="R,G,B",
                   help="divides a .rec image's channels after the mean, e.g. 58.4,57.12,57.38")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="worker processes judging the batches of a .rec/folder --eval-data "
                   "(default: one per core; 1: in the main process)")
    p.add_argument("--attribution-samples", type=int, default=8, metavar="N",
                   help="first samples of a .rec/folder --eval-data the range check and the "
                   "attribution run on (every tensor of them is held; default 8)")


def _streamed(args: argparse.Namespace) -> bool:
    """Whether ``--eval-data`` is read a batch at a time (a .rec or a folder)."""
    return args.eval_data is not None and (os.path.isdir(args.eval_data)
                                           or args.eval_data.endswith(".rec"))


def _floats3(flag: str, text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != 3:
        raise CLIError(f"{flag} takes three numbers R,G,B, got {text!r}")
    return values


def _eval_stream(args: argparse.Namespace) -> tuple[Any, Any]:
    """``(eval_data, metric)`` of a .rec or folder ``--eval-data``: batches read lazily,
    and the metric as an mx.metric (top1/top5 in percent, as for an .npz)."""
    from .auto.batches import NpzFolder, RecordBatches
    from .errors import AMPError
    if args.labels is not None:
        raise CLIError("--labels labels an .npz --eval-data; a .rec or folder holds its labels")
    if args.batch_size < 1 or args.workers is not None and args.workers < 1 \
            or args.attribution_samples < 1:
        raise CLIError("--batch-size, --workers and --attribution-samples must be at least 1")
    try:
        if os.path.isdir(args.eval_data):
            data: Any = NpzFolder(args.eval_data)
        else:
            if args.data_shape is None:
                raise CLIError("--eval-data DATA.rec needs --data-shape CxHxW (e.g. 3x224x224)")
            shape = _shape("--data-shape", args.data_shape)
            options: dict = {"resize": args.resize}
            for key, values in (("mean", _floats3("--mean-rgb", args.mean_rgb)),
                                ("std", _floats3("--std-rgb", args.std_rgb))):
                if values is not None:
                    options.update(zip((f"{key}_r", f"{key}_g", f"{key}_b"), values))
            data = RecordBatches(args.eval_data, shape, args.batch_size, **options)
    except AMPError as err:
        raise CLIError(f"--eval-data: {err}") from None
    return data, _stream_metric(args.metric)


def _stream_metric(name: str) -> Any:
    """The mx.metric of ``--metric`` for streamed data (top1/top5 in percent)."""
    import mxnet as mx
    if name in ("top1", "top5"):
        k = int(name[-1])

        class Percent(mx.metric.TopKAccuracy if k > 1 else mx.metric.Accuracy):  # type: ignore
            def get(self):  # noqa: ANN201 - mx.metric's own signature
                label, value = super().get()
                return name, 100.0 * value
        return Percent(top_k=k, name=name) if k > 1 else Percent(name=name)
    try:
        return mx.metric.create(name)
    except (ValueError, KeyError, AssertionError):
        raise CLIError(f"--metric {name!r}: neither top1/top5/mse nor an mx.metric name "
                       "(acc, top_k_accuracy, ce, mse, ...)") from None


def _shape(flag: str, text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(v) for v in text.lower().split("x"))
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise CLIError(f"{flag} takes CxHxW like 3x224x224, got {text!r}")
    return shape


def _eval_metric(args: argparse.Namespace) -> tuple[dict, Any]:
    """``(inputs, metric)`` of ``--eval-data``/``--labels``/``--metric`` (``({}, None)``
    without ``--eval-data``)."""
    import numpy as np
    if args.metric not in ("top1", "top5", "mse"):
        raise CLIError(f"--metric {args.metric!r} with an .npz --eval-data: top1, top5 or mse "
                       "(any mx.metric name with a .rec or a folder)")
    if args.eval_data is None:
        if args.labels is not None:
            raise CLIError("--labels needs --eval-data (the inputs they label)")
        return {}, None
    if args.labels is None:
        raise CLIError("--eval-data needs --labels (y.npy: what the metric compares with)")
    for flag, path in (("--eval-data", args.eval_data), ("--labels", args.labels)):
        if not os.path.isfile(path):
            raise CLIError(f"{flag}: file not found: {path}")
    try:
        with np.load(args.eval_data, allow_pickle=False) as data:
            inputs = {name: data[name] for name in data.files}
        labels = np.load(args.labels, allow_pickle=False)
    except (ValueError, OSError) as err:
        raise CLIError(f"--eval-data/--labels: cannot read: {err}") from None
    rows = {len(v) for v in inputs.values()}
    if rows != {len(labels)}:
        raise CLIError(f"--labels {args.labels} has {len(labels)} rows, --eval-data "
                       f"{args.eval_data} has {sorted(rows)}")
    from .auto.metrics import builtin_metric
    return inputs, builtin_metric(args.metric, labels)


def _sample_inputs(args: argparse.Namespace) -> tuple[dict, dict[str, str]]:
    """The sample inputs, and the flag that gave each (errors name that flag)."""
    import numpy as np
    inputs, sources = {}, {}
    for k, spec in enumerate(args.inputs):
        name, value = parse_input_spec(spec, args.seed + k)
        inputs[name], sources[name] = value, "--input"
    if args.inputs_npz:
        if not os.path.isfile(args.inputs_npz):
            raise CLIError(f"--inputs-npz: file not found: {args.inputs_npz}")
        try:
            with np.load(args.inputs_npz, allow_pickle=False) as data:
                for name in data.files:
                    inputs[name], sources[name] = data[name], "--inputs-npz"
        except (ValueError, OSError) as err:
            raise CLIError(f"--inputs-npz {args.inputs_npz}: cannot read: {err}") from None
    if not inputs:
        raise CLIError("auto needs sample inputs: --input NAME:SHAPE, --input NAME:FILE.npy "
                       "or --inputs-npz FILE.npz")
    return inputs, sources


def _input_flag(sources: dict[str, str], message: str = "") -> str:
    """The flag that gave the inputs ``message`` names (all of them when it names none)."""
    named = {flag for name, flag in sources.items() if repr(name) in message} or set(sources.values())
    return " / ".join(sorted(named))


@contextlib.contextmanager
def _inputs_named_by_flag(sources: dict[str, str]) -> Iterator[None]:
    """In the errors and warnings of the block, ``sample_inputs`` becomes the flag that gave
    the input named (``--input`` or ``--inputs-npz``)."""
    def rename(text: str) -> str:
        return text.replace("sample_inputs", _input_flag(sources, text))
    outer = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], *rest: Any, **kwargs: Any) -> None:
        outer(rename(str(message)), category, *rest, **kwargs)
    with warnings.catch_warnings():   # puts the outer showwarning back on exit
        warnings.showwarning = show
        try:
            yield
        except AMPError as err:
            err.args = (rename(str(err)),)
            raise


def _cmd_auto(args: argparse.Namespace) -> int:
    try:
        from .auto import auto_convert, auto_settings
    except ImportError as err:
        raise CLIError(f"automatic mode is not available in this installation ({err})") from None
    from .io import load_checkpoint
    _check_prefix(args.prefix, args.epoch)
    if _streamed(args):
        return _auto_streamed(args)
    eval_inputs, metric = _eval_metric(args)
    if args.inputs or args.inputs_npz or not eval_inputs:
        inputs, sources = _sample_inputs(args)
    else:
        inputs, sources = eval_inputs, dict.fromkeys(eval_inputs, "--eval-data")
    if metric is not None and inputs is not eval_inputs:
        raise CLIError("--eval-data gives the inputs the metric is measured on: leave out "
                       "--input/--inputs-npz")
    _out_prefix(args)
    sym, arg_params, aux_params = load_checkpoint(args.prefix, args.epoch, progress=None)
    unknown = sorted(set(inputs) - set(sym.list_arguments()))
    if unknown:
        raise CLIError(f"{_input_flag({n: sources[n] for n in unknown})} names {unknown}, which "
                       f"are not inputs of {args.prefix}-symbol.json (its inputs without params: "
                       f"{[n for n in sym.list_arguments() if n not in arg_params]})")
    try:
        settings = auto_settings(
            args.target_dtype, args.rtol, args.atol, tolerance=args.tolerance,
            max_executions=args.max_executions, metric=metric,
            max_drop=(0.5 if args.max_drop is None else args.max_drop) if metric else None,
            drop=args.drop)
    except ValueError as err:
        raise CLIError(f"auto: {err}") from None
    with _inputs_named_by_flag(sources):
        new_sym, new_args, new_aux, auto = auto_convert(
            sym, arg_params, aux_params, inputs, _options(args), settings,
            execution=args.execution, data_names=args.data_names, quiet=not sys.stderr.isatty())
    return _write_auto(args, sym, arg_params, aux_params, new_sym, new_args, new_aux, auto)


def _auto_streamed(args: argparse.Namespace) -> int:
    """``auto`` judged on a .rec or a folder of batches, read a batch at a time."""
    from .auto import auto_convert, auto_settings
    from .io import load_checkpoint
    data, metric = _eval_stream(args)
    sym, arg_params, aux_params = load_checkpoint(args.prefix, args.epoch, progress=None)
    max_drop = 0.5 if args.max_drop is None else args.max_drop
    try:
        settings = auto_settings(args.target_dtype, args.rtol, args.atol, tolerance=args.tolerance,
                                 max_executions=args.max_executions, metric=metric,
                                 max_drop=max_drop, drop=args.drop)
    except ValueError as err:
        raise CLIError(f"auto: {err}") from None
    new_sym, new_args, new_aux, auto = auto_convert(
        sym, arg_params, aux_params, None, _options(args), settings, execution=args.execution,
        data_names=args.data_names, quiet=not sys.stderr.isatty(), eval_data=data,
        workers=args.workers, attribution_samples=args.attribution_samples)
    return _write_auto(args, sym, arg_params, aux_params, new_sym, new_args, new_aux, auto)


def _write_auto(args: argparse.Namespace, sym: Any, arg_params: dict, aux_params: dict,
                new_sym: Any, new_args: dict, new_aux: dict, auto: Any) -> int:
    """Write what ``auto`` returned, with its report."""
    from .io import save_checkpoint
    from .report import build_report
    out = _out_prefix(args)
    if not auto.reference_finite:
        raise CLIError("the float32 model's outputs hold inf or nan on these sample inputs "
                       "(--input / --inputs-npz), so the converted model cannot be checked "
                       "against them; nothing written. Give representative inputs "
                       "(--input NAME:FILE.npy) or fix the float32 model first")
    assert out is not None and auto.conversion is not None   # auto writes; its record is kept
    save_checkpoint(out, args.epoch, new_sym, new_args, new_aux, progress=None)
    # the report reads what the pass decided for the returned model
    conversion = auto.conversion
    report = build_report(conversion, arg_params, aux_params, new_args, new_aux,
                          model=os.path.basename(args.prefix))
    report = with_extra(report, {"auto": auto.to_dict()})
    finish(args, conversion, report, ["", auto.summary()])
    say(f"{PROG}: wrote {out}-symbol.json and {out}-{args.epoch:04d}.params")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo
    return run_demo(args)


@contextlib.contextmanager
def _warnings_said_at_once() -> Iterator[None]:
    """Print each warning (once per text) on stderr the moment it is given: before the
    "wrote ..." lines it concerns, and not lost when the command fails afterwards."""
    shown: set[str] = set()

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        text = _in_cli_terms(error_text(message))
        if issubclass(category, (UserWarning, RuntimeWarning)) and text not in shown:
            shown.add(text)
            say(f"{PROG}: warning: {text}")
    with warnings.catch_warnings():   # restores the filters and showwarning on exit
        warnings.simplefilter("always")
        warnings.showwarning = show
        yield


# --- entry point --------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """Run ``mxnet-amp`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
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
            _check_outputs(args)
            return int(args.run(args))
    except KeyboardInterrupt:
        say(f"{PROG}: interrupted")
        return 130
    except Exception as err:  # every failure ends as one line unless --debug
        if args.debug:
            raise
        if isinstance(err, AMPError):
            msg = _in_cli_terms(error_text(err))
        elif isinstance(err, OSError):
            msg = f"{err.strerror or err}: {err.filename}" if err.filename else error_text(err)
        elif type(err).__name__ == "MXNetError":
            msg = "MXNet: " + error_text(err)
        else:
            msg = f"{type(err).__name__}: {error_text(err)} (run with --debug for the traceback)"
        say(f"{PROG}: error: {msg}")
        return EXIT_ERROR


if __name__ == "__main__":   # pragma: no cover
    sys.exit(main())
