"""The ``mxnet-amp`` argument parser: one subparser per command, the options they share, and
the ``NAME:SHAPE`` specs of ``--input-shape``. What each command runs is given by
:mod:`mxnet_amp.cli.main`."""
from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Callable, Mapping, NoReturn

from .. import __version__
from ..errors import AMPError, CLIError
from ..policy import check_target_dtype
from .output import EXIT_ERROR, PROG, say

__all__ = ["command_parser", "shape_spec"]


_DTYPE_METAVAR = "{float16,bfloat16}"


class _Parser(argparse.ArgumentParser):
    """argparse with the one-line errors of every other failure: ``mxnet-amp: error: ...``
    and exit code 2, instead of the whole usage text (subcommand parsers are of this class
    too: ``add_subparsers`` makes them with the class of their parent)."""

    _argv: list[str] = []

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        # kept for error(): a subcommand's parser is called with the words after the command
        self._argv = [str(a) for a in (sys.argv[1:] if args is None else args)]
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        say(f"{PROG}: error: {message}{self._prefix_hint(message)} (see '{self.prog} --help')")
        raise SystemExit(EXIT_ERROR)

    def _prefix_hint(self, message: str) -> str:
        """Where a missing PREFIX went: read as the last value of an option that takes
        several (``--exclude a b PREFIX``); empty when it was not."""
        if "PREFIX" not in message:
            return ""
        many = {o for a in self._actions if a.nargs in ("+", "*") for o in a.option_strings}
        option, last = None, None
        for word in self._argv:
            if word.startswith("-") and len(word) > 1:
                option = word.split("=")[0] if word.split("=")[0] in many and "=" not in word else None
            elif option is not None:
                last = (option, word)
        if last is None:
            return ""
        return (f": {last[1]!r} was read as one more value of {last[0]}; put PREFIX right after "
                f"the command ({self.prog} PREFIX {last[0]} ...)")


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


def command_parser(runs: Mapping[str, Callable[[argparse.Namespace], int]]) -> argparse.ArgumentParser:
    """The argument parser of ``mxnet-amp``: one subparser per command, each running
    ``runs[command]`` (``args.run``)."""
    parser = _Parser(
        prog=PROG, description="Automatic mixed precision (float16 / bfloat16) for MXNet 1.9 models.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _convert_parser(sub, runs["convert"])
    _export_onnx_parser(sub, runs["export-onnx"])

    p = sub.add_parser("inspect", formatter_class=_PrefixFirst,
                       help="print what a conversion would do; writes no checkpoint",
                       description="Convert in memory and print the report; no checkpoint is "
                       "written (--report/--graph/--html still write those files).")
    _conversion_options(p, dtype_required=False)
    _input_shape_option(p)
    p.set_defaults(run=runs["inspect"])

    _auto_parser(sub, runs["auto"])
    _demo_parser(sub, runs["demo"])
    return parser


def _convert_parser(sub: Any, run: Callable[[argparse.Namespace], int]) -> None:
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
    p.set_defaults(run=run)


def _demo_parser(sub: Any, run: Callable[[argparse.Namespace], int]) -> None:
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
    p.add_argument("--batch", type=int, default=2,
                   help="random samples both models run and are compared on (default 2)")
    p.add_argument("--chunk", type=int, default=None, metavar="C",
                   help="samples one run holds: a larger --batch runs C at a time, so memory "
                   "stays that of C samples (default: --batch, at most 256 and what fits in "
                   "half the memory available, up to 1 GiB)")
    p.add_argument("--runs", type=int, default=5,
                   help="timed runs per model, each over all --batch samples (default 5)")
    p.add_argument("--seed", type=int, default=0, help="seed of weights and inputs (default 0)")
    p.add_argument("--cast-optional-params", action=argparse.BooleanOptionalAction, default=True,
                   help="store weights that only low precision ops read in low precision "
                   "(default on: cast at every run instead, MXNet's bfloat16 amp_cast makes a "
                   "CPU model many times slower than float32)")
    _fold_option(p)
    _output_options(p)
    p.set_defaults(run=run)


def _export_onnx_parser(sub: Any, run: Callable[[argparse.Namespace], int]) -> None:
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
    p.set_defaults(run=run)


def _onnx_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--opset", type=int, default=13, choices=(12, 13),
                   help="ONNX opset (default 13; MXNet 1.9.1's exporter converts to 12 and 13)")
    p.add_argument("--dynamic-batch", action="store_true",
                   help="leave the first dimension of each input free ('batch')")
    p.add_argument("--external-data", action=argparse.BooleanOptionalAction, default=None,
                   help="weights in FILE.onnx.data beside the model (default: when they "
                   "exceed protobuf's 2 GB limit)")



def shape_spec(spec: str, flag: str, other: str = "") -> tuple[str, tuple[int, ...]]:
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


def _auto_parser(sub: Any, run: Callable[[argparse.Namespace], int]) -> None:
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
    p.set_defaults(run=run)


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
