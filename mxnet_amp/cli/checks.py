"""What the ``mxnet-amp`` commands check before any work (numbers in range, flags that
contradict each other, inputs present, outputs writable and not overwriting an input), and the
flags turned into the API's terms: conversion options, and API argument names in error
messages spelled as flags."""
from __future__ import annotations

import argparse
import math
import os
import re

from ..checkpoint import checkpoint_inputs, checkpoint_outputs
from ..errors import CLIError
from ..files.paths import check_outputs, checkpoint_files
from ..mx.hardware import native_note
from ..options import ConvertOptions, OpLists, make_options
from ..report.draw import check_graph_path

__all__ = ["check_prefix", "out_prefix", "check_before_work", "in_cli_terms", "options_of"]


def check_prefix(prefix: str, epoch: int) -> None:
    """:class:`CLIError` naming the first file of checkpoint ``prefix``/``epoch`` that is missing."""
    for path in checkpoint_files(prefix, epoch):
        if not os.path.isfile(path):
            raise CLIError(f"checkpoint file not found: {path}")


def _check_values(args: argparse.Namespace) -> None:
    """Numbers out of range, named by their flag (argparse only checks their type)."""
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
    if getattr(args, "execution", None) == "native" and args.target_dtype == "bfloat16":
        note = native_note("bfloat16")   # refused before the model is read, as float16 is
        if note is not None:
            raise CLIError(f"--execution native cannot run bfloat16 here: {note}")


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


def out_prefix(args: argparse.Namespace) -> str | None:
    """The output checkpoint prefix of a command that writes one (None for the others)."""
    if args.command not in ("convert", "auto"):
        return None
    return str(args.out or args.prefix + "-amp")


def _files(args: argparse.Namespace) -> tuple[list[tuple[str, str | None]], list[tuple[str, str | None]]]:
    """``(inputs, outputs)``: every file the command reads and writes, labelled."""
    inputs: list[tuple[str, str | None]] = []
    if hasattr(args, "prefix"):
        inputs += checkpoint_inputs(args.prefix, args.epoch)
    for spec in getattr(args, "inputs", None) or ():
        value = spec.partition(":")[2]
        if value.endswith(".npy"):
            inputs.append(("--input file", value))
    inputs.append(("--inputs-npz file", getattr(args, "inputs_npz", None)))
    outputs: list[tuple[str, str | None]] = []
    out = out_prefix(args)
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


def check_before_work(args: argparse.Namespace) -> None:
    """Fail before any work on a number out of range, or an output that cannot be written
    or would overwrite an input (nothing half done, nothing lost)."""
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


def in_cli_terms(message: str) -> str:
    """An API error message with the argument names the command line spells as flags."""
    return _API_NAME.sub(lambda m: _FLAG_OF[m.group(1)], message)


def options_of(args: argparse.Namespace) -> ConvertOptions:
    """The conversion options the flags ask for (the op lists read once)."""
    # the flags add to the shipped lists ("move"), as their help says
    lists = OpLists(args.target_ops, args.fp32_ops, args.widest_ops, follow_ops=args.follow_ops,
                    excluded_sym_names=args.exclude, overrides="move")
    return make_options(args.target_dtype, lists,
                        cast_optional_params=args.cast_optional_params,
                        fold_batchnorm=args.fold_bn, strict_params=args.strict_params,
                        guard_weight_range=args.guard_weight_range,
                        tune=getattr(args, "tune", None))
