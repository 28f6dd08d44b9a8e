"""``mxnet-amp auto``: the sample inputs and evaluation data its flags name, the task metric,
and the automatic conversion written with its report (auto's sections in it)."""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import warnings
from typing import Any, Iterator

import numpy as np

from ..auto.api import auto_convert, auto_settings
from ..auto.batches import NpzFolder, RecordBatches
from ..auto.evaluation import usable_cores
from ..auto.html import report_section
from ..auto.metrics import builtin_metric
from ..errors import AMPError, CLIError
from ..mx.io import load_checkpoint, save_checkpoint
from ..report.model import build_report
from .checks import check_prefix, options_of, out_prefix
from .demo import available_memory
from .output import PROG, finish, say
from .parser import shape_spec

__all__ = ["cmd_auto", "parse_input_spec"]


def parse_input_spec(spec: str, seed: int = 0) -> tuple[str, np.ndarray]:
    """``NAME:1x3x224x224`` -> (name, random normal float32 array); ``NAME:FILE.npy`` ->
    (name, the array in the file). Raises :class:`CLIError` naming the spec."""
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
    name, shape = shape_spec(spec, "--input", "nor a .npy file")
    need, available = 12 * int(np.prod(shape)), available_memory()   # drawn float64, kept float32
    if available is not None and need > available:
        raise CLIError(f"--input {spec!r}: drawing it takes {need / 2**30:.1f} GiB of memory and "
                       f"{available / 2**30:.1f} GiB is available: give a smaller shape")
    rng = np.random.default_rng(seed)
    return name, rng.standard_normal(shape).astype("float32")


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
    if len(values) != 3 or not all(np.isfinite(values)):
        raise CLIError(f"{flag} takes three numbers R,G,B, got {text!r}")
    if flag == "--std-rgb" and min(abs(v) for v in values) == 0:
        # each channel is divided by it: a zero makes every input inf or nan
        raise CLIError(f"--std-rgb {text}: the channels are divided by these; none may be 0")
    return values


def _eval_stream(args: argparse.Namespace) -> tuple[Any, Any]:
    """``(eval_data, metric)`` of a .rec or folder ``--eval-data``: batches read lazily,
    and the metric as an mx.metric (top1/top5 in percent, as for an .npz)."""
    if args.labels is not None:
        raise CLIError("--labels labels an .npz --eval-data; a .rec or folder holds its labels")
    if args.batch_size < 1 or args.workers is not None and args.workers < 1 \
            or args.attribution_samples < 1:
        raise CLIError("--batch-size, --workers and --attribution-samples must be at least 1")
    if args.workers is not None and args.workers > 4 * usable_cores():
        raise CLIError(f"--workers {args.workers}: this machine has {usable_cores()} cores and each "
                       f"worker process runs batches on cores of its own; give at most "
                       f"{usable_cores()} (or leave --workers out: one per core)")
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
            def get(self) -> tuple[str, float]:
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
    return inputs, builtin_metric(args.metric, labels)


def _sample_inputs(args: argparse.Namespace) -> tuple[dict, dict[str, str]]:
    """The sample inputs, and the flag that gave each (errors name that flag)."""
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


def _check_memory(sym: Any, inputs: dict, sources: dict[str, str]) -> None:
    """:class:`CLIError` naming the input flag when the sample inputs cannot fit: the range
    check and the attribution hold every tensor the model computes on them (float32), so
    their sum is a lower bound of what the run needs (as ``demo`` checks its ``--batch``).
    Nothing is refused where the shapes or the memory available are unknown."""
    import warnings as _warnings
    internals = sym.get_internals()
    with _warnings.catch_warnings():
        _warnings.simplefilter("ignore")   # partial inference warns about what it cannot tell
        try:
            _, shapes, _ = internals.infer_shape_partial(
                **{k: v.shape for k, v in inputs.items() if hasattr(v, "shape")})
        except Exception:   # noqa: BLE001 (MXNetError: the run names the bad shape itself)
            return
    weights = set(sym.list_inputs())
    need = sum(4 * int(np.prod(shape)) for name, shape in zip(internals.list_outputs(), shapes or ())
               if name not in weights and shape and 0 not in shape)
    available = available_memory()
    if available is not None and need > available:
        raise CLIError(f"{_input_flag(sources)}: the model's tensors on these sample inputs take at "
                       f"least {need / 2**30:.1f} GiB (the checks hold every one of them), and "
                       f"{available / 2**30:.1f} GiB is available: give fewer or smaller samples")


def cmd_auto(args: argparse.Namespace) -> int:
    """``mxnet-amp auto``: keep in float32 what the accuracy check on the sample inputs (or
    ``--eval-data``) asks for, and write the converted checkpoint with its report."""
    check_prefix(args.prefix, args.epoch)
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
    out_prefix(args)
    sym, arg_params, aux_params = load_checkpoint(args.prefix, args.epoch, progress=None)
    unknown = sorted(set(inputs) - set(sym.list_arguments()))
    if unknown:
        raise CLIError(f"{_input_flag({n: sources[n] for n in unknown})} names {unknown}, which "
                       f"are not inputs of {args.prefix}-symbol.json (its inputs without params: "
                       f"{[n for n in sym.list_arguments() if n not in arg_params]})")
    _check_memory(sym, inputs, sources)
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
            sym, arg_params, aux_params, inputs, options_of(args), settings,
            execution=args.execution, data_names=args.data_names, quiet=not sys.stderr.isatty())
    return _write_auto(args, sym, arg_params, aux_params, new_sym, new_args, new_aux, auto)


def _auto_streamed(args: argparse.Namespace) -> int:
    """``auto`` judged on a .rec or a folder of batches, read a batch at a time."""
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
        sym, arg_params, aux_params, None, options_of(args), settings, execution=args.execution,
        data_names=args.data_names, quiet=not sys.stderr.isatty(), eval_data=data,
        workers=args.workers, attribution_samples=args.attribution_samples)
    return _write_auto(args, sym, arg_params, aux_params, new_sym, new_args, new_aux, auto)


def _write_auto(args: argparse.Namespace, sym: Any, arg_params: dict, aux_params: dict,
                new_sym: Any, new_args: dict, new_aux: dict, auto: Any) -> int:
    """Write what ``auto`` returned, with its report."""
    out = out_prefix(args)
    if not auto.reference_finite:
        given = ("--eval-data" if args.eval_data is not None and not (args.inputs or args.inputs_npz)
                 else "--input / --inputs-npz")
        raise CLIError(f"the float32 model's outputs hold inf or nan on these sample inputs "
                       f"({given}), so the converted model cannot be checked "
                       "against them; nothing written. Give representative inputs "
                       "(--input NAME:FILE.npy) or fix the float32 model first")
    assert out is not None and auto.conversion is not None   # auto writes; its record is kept
    save_checkpoint(out, args.epoch, new_sym, new_args, new_aux, progress=None)
    # the report reads what the pass decided for the returned model
    conversion = auto.conversion
    report = build_report(conversion, arg_params, aux_params, new_args, new_aux,
                          model=os.path.basename(args.prefix))
    report = dataclasses.replace(report, auto=report_section(auto))
    files = [f"{out}-symbol.json", f"{out}-{args.epoch:04d}.params"]
    finish(args, conversion, report, ["", auto.summary()], on_disk=files)
    say(f"{PROG}: wrote {' and '.join(files)}")
    return 0
