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
from typing import TYPE_CHECKING, Sequence

from .errors import AMPError, CLIError, error_text

if TYPE_CHECKING:
    import numpy as np

    from .convert import Conversion
    from .options import ConvertOptions
    from .report import ConversionReport

__all__ = ["main", "build_parser", "CLIError", "parse_input_spec"]

PROG = "mxnet-amp"
EXIT_ERROR = 2


# --- parser -------------------------------------------------------------------------------

_DTYPE_METAVAR = "{float16,bfloat16}"


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
    p.add_argument("--fold-bn", action="store_true",
                   help="fold each inference BatchNorm into the Convolution / FullyConnected / "
                   "Deconvolution before it (in float32, before rounding the weights)")
    _output_options(p)


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
    parser = argparse.ArgumentParser(
        prog=PROG, description="Automatic mixed precision (float16 / bfloat16) for MXNet 1.9 models.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("convert", help="convert a checkpoint and write a new one",
                       description="Convert PREFIX-symbol.json + PREFIX-NNNN.params to mixed "
                       "precision and write OUT-symbol.json + OUT-NNNN.params (casts kept).")
    _conversion_options(p, dtype_required=True)
    p.add_argument("--out", metavar="PREFIX2", default=None,
                   help="output checkpoint prefix (default PREFIX-amp)")
    p.add_argument("--out-epoch", type=int, default=None, metavar="N",
                   help="output epoch (default: the input epoch)")
    _input_shape_option(p)
    p.set_defaults(run=_cmd_convert)

    p = sub.add_parser("inspect", help="print what a conversion would do; writes no checkpoint",
                       description="Convert in memory and print the report; no checkpoint is "
                       "written (--report/--graph/--html still write those files).")
    _conversion_options(p, dtype_required=False)
    _input_shape_option(p)
    p.set_defaults(run=_cmd_inspect)

    _auto_parser(sub)

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
    _output_options(p)
    p.set_defaults(run=_cmd_demo)
    return parser


# --- helpers ------------------------------------------------------------------------------

def _version() -> str:
    from . import __version__
    return __version__


def _say(*parts) -> None:
    print(*parts, file=sys.stderr)


def _check_prefix(prefix: str, epoch: int) -> None:
    from .paths import checkpoint_files
    for path in checkpoint_files(prefix, epoch):
        if not os.path.isfile(path):
            raise CLIError(f"checkpoint file not found: {path}")


def _check_values(args) -> None:
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


def _out_prefix(args) -> str | None:
    """The output checkpoint prefix of a command that writes one (None for the others)."""
    if args.command not in ("convert", "auto"):
        return None
    return args.out or args.prefix + "-amp"


def _files(args) -> tuple[list, list]:
    """``(inputs, outputs)``: every file the command reads and writes, labelled."""
    from .checkpoint import checkpoint_inputs, checkpoint_outputs
    inputs = checkpoint_inputs(args.prefix, args.epoch) if hasattr(args, "prefix") else []
    for spec in getattr(args, "inputs", None) or ():
        value = spec.partition(":")[2]
        if value.endswith(".npy"):
            inputs.append(("--input file", value))
    inputs.append(("--inputs-npz file", getattr(args, "inputs_npz", None)))
    outputs = []
    out = _out_prefix(args)
    if out is not None:
        epoch = args.epoch if getattr(args, "out_epoch", None) is None else args.out_epoch
        outputs = [(f"{what} (--out)", path) for what, path in checkpoint_outputs(out, epoch)]
    outputs += [("--report file", getattr(args, "report", None)),
                ("--graph file", getattr(args, "graph", None)),
                ("--html file", getattr(args, "html", None))]
    return inputs, outputs


def _check_outputs(args) -> None:
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
            "data_shapes": "--input-shape"}
_API_NAME = re.compile(r"\b(" + "|".join(_FLAG_OF) + r")\b")


def _in_cli_terms(message: str) -> str:
    """An API error message with the argument names the command line spells as flags."""
    return _API_NAME.sub(lambda m: _FLAG_OF[m.group(1)], message)


def _write_outputs(args, conversion, report) -> list[str]:
    """Write --report / --graph / --html; returns what was written."""
    from .draw import graph_svg, write_graph
    from .io import atomic_write
    from .report import report_html
    written = []
    limit = None if getattr(args, "detail", False) else 80

    def text_writer(text):
        def write(tmp):
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
        atomic_write(args.html, text_writer(report_html(report, graph_svg(conversion, report.model or "", limit))))
        written.append(args.html)
    return written


def _finish(args, conversion, report, extra_lines=()) -> None:
    written = _write_outputs(args, conversion, report)
    if not args.quiet:
        print(report.format_table())
    lines = list(extra_lines)
    if args.quiet:
        # the report table is what --quiet leaves out; the command's own findings stay
        while lines and not lines[0]:
            lines.pop(0)
    for line in lines:
        print(line)
    for path in written:
        _say(f"{PROG}: wrote {path}")


def _options(args: argparse.Namespace) -> ConvertOptions:
    """The conversion options the flags ask for (the op lists read once)."""
    from .options import make_options
    return make_options(args.target_dtype, args.target_ops, args.fp32_ops, args.widest_ops,
                        follow_ops=args.follow_ops, excluded_sym_names=args.exclude,
                        cast_optional_params=args.cast_optional_params,
                        fold_batchnorm=args.fold_bn)


def _convert_prefix(args: argparse.Namespace, write: bool) -> tuple[Conversion, ConversionReport]:
    from .checkpoint import checkpoint_conversion
    from .report import build_report
    _check_prefix(args.prefix, args.epoch)
    shapes = dict(_shape_spec(spec, "--input-shape") for spec in args.input_shapes)
    conversion, new_args, new_aux, _ = checkpoint_conversion(
        args.prefix, args.epoch, getattr(args, "out", None), getattr(args, "out_epoch", None),
        _options(args), data_names=args.data_names, write=write, progress=None,
        data_shapes=shapes or None)
    report = build_report(conversion, new_arg_params=new_args, new_aux_params=new_aux,
                          model=os.path.basename(args.prefix))
    return conversion, _with_hardware_note(report)


def _folded_lines(conversion) -> list[str]:
    folded = conversion.folded_batchnorms
    if not folded:
        return []
    return ["", f"Folded {len(folded)} BatchNorm(s) into the op before them (--fold-bn)."]


# --- commands -----------------------------------------------------------------------------

def _cmd_convert(args) -> int:
    conversion, report = _convert_prefix(args, write=True)
    out = args.out or args.prefix + "-amp"
    epoch = args.epoch if args.out_epoch is None else args.out_epoch
    _finish(args, conversion, report, _folded_lines(conversion))
    _say(f"{PROG}: wrote {out}-symbol.json and {out}-{epoch:04d}.params")
    return 0


def _cmd_inspect(args) -> int:
    conversion, report = _convert_prefix(args, write=False)
    _finish(args, conversion, report,
            _folded_lines(conversion) + ["", "(inspect: no checkpoint written)"])
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


def _auto_parser(sub) -> None:
    """The ``auto`` subcommand's arguments."""
    p = sub.add_parser("auto", help="automatic mode: choose float32 nodes from sample inputs",
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
    p.add_argument("--eval-data", metavar="X.npz", default=None,
                   help="labelled evaluation inputs (one array per input name): judge each "
                   "configuration by the task metric on them (with --labels) instead of "
                   "output closeness; they are the sample inputs unless --input is given")
    p.add_argument("--labels", metavar="y.npy", default=None,
                   help="labels of --eval-data (class ids for top1/top5, targets for mse)")
    p.add_argument("--metric", choices=("top1", "top5", "mse"), default="top1",
                   help="task metric of the first output (default top1, in percent)")
    p.add_argument("--max-drop", type=float, default=None, metavar="D",
                   help="largest metric drop that passes (top1/top5: percentage points; mse: "
                   "increase of the loss; with --drop relative: a fraction of the float32 "
                   "score); default 0.5")
    p.add_argument("--drop", choices=("absolute", "relative"), default="absolute",
                   help="--max-drop in the metric's units (default) or relative to the float32 score")
    p.add_argument("--out", metavar="PREFIX2", default=None,
                   help="output checkpoint prefix (default PREFIX-amp)")
    p.set_defaults(run=_cmd_auto)


def _eval_metric(args) -> tuple[dict, object]:
    """``(inputs, metric)`` of ``--eval-data``/``--labels``/``--metric`` (``({}, None)``
    without ``--eval-data``)."""
    import numpy as np
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


def _sample_inputs(args) -> dict:
    import numpy as np
    inputs = {}
    for k, spec in enumerate(args.inputs):
        name, value = parse_input_spec(spec, args.seed + k)
        inputs[name] = value
    if args.inputs_npz:
        if not os.path.isfile(args.inputs_npz):
            raise CLIError(f"--inputs-npz: file not found: {args.inputs_npz}")
        try:
            with np.load(args.inputs_npz, allow_pickle=False) as data:
                for name in data.files:
                    inputs[name] = data[name]
        except (ValueError, OSError) as err:
            raise CLIError(f"--inputs-npz {args.inputs_npz}: cannot read: {err}") from None
    if not inputs:
        raise CLIError("auto needs sample inputs: --input NAME:SHAPE, --input NAME:FILE.npy "
                       "or --inputs-npz FILE.npz")
    return inputs


def _cmd_auto(args) -> int:
    try:
        from .auto import auto_convert, auto_settings
    except ImportError as err:
        raise CLIError(f"automatic mode is not available in this installation ({err})") from None
    from .io import load_checkpoint, save_checkpoint
    from .report import build_report
    _check_prefix(args.prefix, args.epoch)
    eval_inputs, metric = _eval_metric(args)
    inputs = _sample_inputs(args) if (args.inputs or args.inputs_npz or not eval_inputs) \
        else eval_inputs
    if metric is not None and inputs is not eval_inputs:
        raise CLIError("--eval-data gives the inputs the metric is measured on: leave out "
                       "--input/--inputs-npz")
    out = _out_prefix(args)
    sym, arg_params, aux_params = load_checkpoint(args.prefix, args.epoch, progress=None)
    unknown = sorted(set(inputs) - set(sym.list_arguments()))
    if unknown:
        raise CLIError(f"--input names {unknown}, which are not inputs of {args.prefix}-symbol.json "
                       f"(its inputs without params: "
                       f"{[n for n in sym.list_arguments() if n not in arg_params]})")
    try:
        settings = auto_settings(
            args.target_dtype, args.rtol, args.atol, tolerance=args.tolerance,
            max_executions=args.max_executions, metric=metric,
            max_drop=(0.5 if args.max_drop is None else args.max_drop) if metric else None,
            drop=args.drop)
    except ValueError as err:
        raise CLIError(f"auto: {err}") from None
    new_sym, new_args, new_aux, auto = auto_convert(
        sym, arg_params, aux_params, inputs, _options(args), settings, execution=args.execution,
        data_names=args.data_names, quiet=not sys.stderr.isatty())
    if not auto.reference_finite:
        raise CLIError("the float32 model's outputs hold inf or nan on these sample inputs "
                       "(--input / --inputs-npz), so the converted model cannot be checked "
                       "against them; nothing written. Give representative inputs "
                       "(--input NAME:FILE.npy) or fix the float32 model first")
    save_checkpoint(out, args.epoch, new_sym, new_args, new_aux, progress=None)
    # the report reads what the pass decided for the returned model
    conversion = auto.conversion
    from .auto.records import kept_text
    reasons = {k.name: f"auto: {k.reason}: {kept_text(k)}" for k in auto.kept_fp32
               if k.reason != "user"}
    report = build_report(conversion, arg_params, aux_params, new_args, new_aux,
                          model=os.path.basename(args.prefix), reasons=reasons)
    report = _with_extra(report, {"auto": auto.to_dict()})
    _finish(args, conversion, report, ["", auto.summary()])
    _say(f"{PROG}: wrote {out}-symbol.json and {out}-{args.epoch:04d}.params")
    return 0


def _with_extra(report, extra: dict):
    import dataclasses
    return dataclasses.replace(report, extra={**report.extra, **extra})


def _with_note(report, note: str):
    """``report`` with ``note`` added to ``extra['notes']`` (shown in the table and HTML)."""
    return _with_extra(report, {"notes": [*report.extra.get("notes", ()), note]})


def _with_hardware_note(report):
    """Say now, on stderr and in the report, when this machine cannot run the model."""
    from .hardware import native_note
    with _native_log_silenced():
        note = native_note(report.target_dtype)
    if note is None:
        return report
    _say(f"{PROG}: note: {note}")
    return _with_note(report, note[0].upper() + note[1:])


@contextlib.contextmanager
def _native_log_silenced():
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


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo
    return run_demo(args)


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
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _check_outputs(args)
            code = args.run(args)
        shown = set()
        for w in caught:
            text = error_text(w.message)
            if issubclass(w.category, (UserWarning, RuntimeWarning)) and text not in shown:
                shown.add(text)
                _say(f"{PROG}: warning: {text}")
        return code
    except KeyboardInterrupt:
        _say(f"{PROG}: interrupted")
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
        _say(f"{PROG}: error: {msg}")
        return EXIT_ERROR


if __name__ == "__main__":   # pragma: no cover
    sys.exit(main())
