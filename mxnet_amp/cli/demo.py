"""``mxnet-amp demo``: a model zoo network built locally with random weights, converted and
run in float32 against low precision (natively where this machine can, else emulated)."""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ..convert import convert_model_full
from ..emulation import emulate_model
from ..errors import CLIError, error_text
from ..hardware import bf16_runs_natively, fp16_runs_natively
from ..options import make_options
from ..report.model import build_report
from ..report.sections import DemoSection, DemoSpeed
from .output import finish, native_log_silenced, with_hardware_note, with_note

if TYPE_CHECKING:
    from tqdm import tqdm

    from ..record import Conversion
    from ..report.model import ConversionReport

__all__ = ["run_demo", "available_memory"]


def run_demo(args: argparse.Namespace) -> int:
    """Run ``mxnet-amp demo`` with its parsed ``args``; returns the exit code."""
    if args.size < 16 or args.batch < 1 or args.runs < 1:
        raise CLIError("demo needs --size >= 16, --batch >= 1 and --runs >= 1")
    _check_batch_memory(args.batch, args.size, per_sample=0)   # the input alone, before any work
    try:
        return _demo(args)
    except MemoryError:   # past the lower bound checked up front: still the batch's doing
        raise CLIError(f"--batch {args.batch} at --size {args.size} ran out of memory while the "
                       "model ran: use a smaller --batch") from None
    except Exception as err:   # MXNet's allocator: "Failed to allocate CPU Memory", bad_alloc
        text = str(err)
        if "llocat" not in text and "bad_alloc" not in text:
            raise
        raise CLIError(f"--batch {args.batch} at --size {args.size}: MXNet could not allocate "
                       f"memory ({error_text(err, 200)}): use a smaller --batch") from None


def _demo(args: argparse.Namespace) -> int:
    """The demo itself, its arguments checked."""
    bar = _progress(4 + 2 * args.runs, f"demo {args.model}")
    (sym, arg_params, aux_params), x = _demo_model(args.model, args.size, args.batch, args.seed)
    bar.update(1)
    new_sym, new_args, new_aux, conversion = convert_model_full(
        sym, arg_params, aux_params,
        make_options(args.target_dtype, cast_optional_params=args.cast_optional_params,
                     fold_batchnorm=args.fold_bn))
    report = with_hardware_note(build_report(conversion, arg_params, aux_params, new_args, new_aux,
                                              model=args.model))
    bar.update(1)
    native = _runs_natively(args.target_dtype)
    # timing only matters where there is a native low precision run to compare with
    ref, fp32_times = _timed_runs(sym, arg_params, aux_params, x, args.runs if native else 1, bar)
    shape = f"{args.batch}x3x{args.size}x{args.size}"
    lines = ["", f"Demo: {args.model}, random weights, input {shape}"]
    low = _low_precision_runs(args, (new_sym, new_args, new_aux), x, native, bar, lines)
    if not native:   # the page says what the terminal says
        report = with_note(report, lines[-1])
    bar.close()
    report, demo = _accuracy_lines(ref, low, shape, conversion, lines, report)
    if low.times is not None:
        demo = dataclasses.replace(demo, speed=_speed_line(args, fp32_times, low.times, lines))
    finish(args, conversion, dataclasses.replace(report, demo=demo), lines)
    return 0


@dataclasses.dataclass(frozen=True)
class _LowRuns:
    """The converted model's runs: its outputs, its run times (None where it ran once,
    emulated), how it ran (in words) and whether that was native."""

    outputs: list
    times: list | None
    how: str
    native: bool


def _low_precision_runs(args: argparse.Namespace, model: tuple[Any, dict, dict], x: np.ndarray, native: bool,
                        bar: tqdm, lines: list[str]) -> _LowRuns:
    """The converted model's runs: timed where it runs natively, else once through
    emulation (a line in ``lines`` says so)."""
    if native:
        low, low_times = _timed_runs(*model, x, args.runs, bar)
        return _LowRuns(low, low_times, f"native {args.target_dtype}", True)
    em_sym, em_args, em_aux = emulate_model(*model)
    low, _ = _timed_runs(em_sym, em_args, em_aux, x, 1, bar)
    bar.update(2 * args.runs - 2)
    # why is the hardware note's to say (once, on the terminal and the page alike)
    lines.append(f"Native {args.target_dtype} is unavailable on this CPU (see the note); the "
                 f"{args.target_dtype} model was checked by emulation (every low precision "
                 "tensor rounded), so its speed was not measured.")
    return _LowRuns(low, None, f"{args.target_dtype} emulated in float32", False)


def _accuracy_lines(ref: list, runs: _LowRuns, shape: str, conversion: Conversion, lines: list[str],
                    report: ConversionReport) -> tuple[ConversionReport, DemoSection]:
    """Add the accuracy line (and notes where it says little) to ``lines`` and ``report``;
    returns the report and the demo's figures (its speed not yet measured)."""
    low, how = runs.outputs, runs.how
    rel = max(float(np.abs(lo - r).max() / max(float(np.abs(r).max()), 1e-30)) for lo, r in zip(low, ref))
    # top-1 agreement reads class scores: a first output of shape (batch, classes)
    agree = (float(np.mean(low[0].argmax(axis=1) == ref[0].argmax(axis=1)))
             if ref[0].ndim == 2 else None)
    lines.append(f"Accuracy ({how} vs float32): max |diff| / max |fp32| = {rel:.2e}"
                 + ("" if agree is None else f", top-1 agreement {agree * 100:.0f}% of {len(ref[0])} samples"))
    scale = min(float(np.abs(r).max()) for r in ref)
    if not np.isfinite(scale) or scale < 1e-6:
        lines.append(f"Note: the float32 outputs are degenerate with these random weights "
                     f"(max |fp32| = {scale:.3g}); the accuracy figures say little.")
        report = with_note(report, lines[-1][len("Note: "):])
    selecting = sorted(_SELECTING_OPS & conversion.original.ops())
    if selecting:
        lines.append(f"Note: the outputs come through {', '.join(selecting)}: with random weights "
                     "scores nearly tie, so any rounding selects other boxes or classes there and "
                     "the error above says little (the zoo sweep compares the tensors before them).")
        report = with_note(report, lines[-1][len("Note: "):])
    return report, DemoSection(native=runs.native, execution=how, input=shape,
                               relative_max_error=rel, top1_agreement=agree)


def _speed_line(args: argparse.Namespace, fp32_times: list[float], low_times: list[float],
                lines: list[str]) -> DemoSpeed:
    """Add the measured speed-up to ``lines``; returns it."""
    t32, t16 = float(np.median(fp32_times)), float(np.median(low_times))
    lines.append(f"Speed (median of {args.runs} runs, same process): float32 {t32 * 1e3:.1f} ms, "
                 f"{args.target_dtype} {t16 * 1e3:.1f} ms, speed-up x{t32 / t16:.2f}")
    return DemoSpeed(speedup=t32 / t16, fp32_ms=t32 * 1e3, low_ms=t16 * 1e3, runs=args.runs)


def _demo_model(name: str, size: int, batch: int, seed: int) -> tuple[tuple[Any, dict, dict], np.ndarray]:
    """A model zoo network with random weights, as ``((sym, arg_params, aux_params), input)``."""
    import mxnet as mx
    mx.random.seed(seed)
    net = _zoo_model(name)
    # He initialisation (fan-in) keeps activations of order one through a deep random
    # network; with fan-averaged inits depthwise convs shrink mobilenet's logits to ~1e-16,
    # where every low precision comparison is meaningless
    # gluoncv's detectors give whole blocks their own initializer (Xavier, which fails on a
    # 1-D bias or gamma): weights take the He init below, biases and BatchNorm params the
    # usual constants, odd params (anchors) keep their own
    for param in net.collect_params().values():
        if param.name.endswith("weight"):
            param.init = None
        elif param.name.endswith(("gamma", "running_var", "moving_var")):
            param.init = mx.init.One()
        elif param.name.endswith(("beta", "bias", "running_mean", "moving_mean")):
            param.init = mx.init.Zero()
    net.initialize(mx.init.MSRAPrelu(factor_type="in", slope=0.0))
    try:
        # one sample settles deferred shapes; the batch is drawn once it is known to fit
        net(mx.nd.array(np.random.default_rng(seed).standard_normal((1, 3, size, size))))
    except ValueError as err:   # a param whose own initializer rejects its shape
        raise CLIError(f"{name} cannot be built with random weights: {error_text(err)}") from None
    except mx.base.MXNetError as err:
        raise CLIError(f"{name} does not run on {size}x{size} inputs (try a larger --size): "
                       f"{error_text(err)}") from None
    sym = net(mx.sym.var("data"))
    if isinstance(sym, (list, tuple)):   # detection nets: ids, scores, boxes
        sym = mx.sym.Group(list(sym))
    _check_batch_memory(batch, size, _largest_activation_bytes(sym, size))
    x = np.random.default_rng(seed).standard_normal((batch, 3, size, size)).astype("float32")
    params = {p.name: p.data() for p in net.collect_params().values()}
    args = set(sym.list_arguments())
    arg_params = {k: v for k, v in params.items() if k in args}
    aux_params = {k: v for k, v in params.items() if k not in args}
    return (sym, arg_params, aux_params), x


def _largest_activation_bytes(sym: Any, size: int) -> int:
    """The float32 bytes of the largest tensor ``sym`` computes, per sample (a run holds it,
    whatever MXNet's memory planner shares)."""
    import warnings
    internals = sym.get_internals()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # partial inference warns about what it cannot tell
        _, shapes, _ = internals.infer_shape_partial(data=(1, 3, size, size))
    weights = set(sym.list_inputs())   # their size does not grow with the batch
    return max((4 * int(np.prod(s)) for name, s in zip(internals.list_outputs(), shapes or ())
                if name not in weights and s and 0 not in s), default=0)


def _check_batch_memory(batch: int, size: int, per_sample: int) -> None:
    """:class:`CLIError` naming ``--batch`` when a run cannot fit in the memory available.

    A lower bound, so that what is refused cannot run: the input as drawn (float64, then its
    float32 copy), or during a run the float32 input, the copy MXNet binds and the largest
    activation (``per_sample`` bytes a sample; 0 before the model is built). Measured on
    resnet18_v1 at 64x64 a run takes 0.54 MB a sample; this bound says 0.36 MB.
    """
    pixels = 3 * size * size
    need = batch * max(pixels * (8 + 4), pixels * 4 * 2 + per_sample)
    available = available_memory()
    if available is None or need <= available:
        return
    fits = available // max(need // batch, 1)
    raise CLIError(f"--batch {batch} needs at least {need / 2**30:.1f} GiB of memory at --size "
                   f"{size} ({'its input' if not per_sample else 'its input and activations'}); "
                   f"{available / 2**30:.1f} GiB is available: use a smaller --batch"
                   + (f" (at most {fits}; fewer may be needed)" if per_sample and fits else ""))


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux's MemAvailable; None where unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import os
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _zoo_model(name: str) -> Any:
    """``name`` from MXNet's model zoo, else from gluoncv's when it is installed; no weights
    downloaded (``pretrained=False``, and ``pretrained_base=False`` where gluoncv takes it)."""
    from mxnet.gluon.model_zoo import vision
    try:
        return vision.get_model(name, pretrained=False)
    except ValueError:
        pass
    try:
        from gluoncv.model_zoo import get_model, get_model_list
    except ImportError:
        raise CLIError(f"unknown model zoo name {name!r} (try resnet18_v1, mobilenet0.25, "
                       "squeezenet1.1; install gluoncv, the 'zoo' extra, for its models)") from None
    if name.lower() not in get_model_list():
        raise CLIError(f"unknown model name {name!r}: in neither MXNet's nor gluoncv's model zoo "
                       "(try resnet18_v1, mobilenet0.25, resnet50_v1b)")
    try:
        return get_model(name, pretrained=False, pretrained_base=False)
    except TypeError:   # classification nets have no base network to leave untrained
        return get_model(name, pretrained=False)


def _timed_runs(sym: Any, arg_params: Mapping, aux_params: Mapping, x: np.ndarray, runs: int,
                bar: tqdm) -> tuple[list[np.ndarray], list[float]]:
    """Outputs of ``sym`` on ``x`` (float32 numpy) and the wall time of each of ``runs`` runs."""
    import mxnet as mx
    # copies: the float32 and the converted model share the arrays of float32 params, and
    # after a float32 run oneDNN has reordered them in place, which MXNet 1.9.1's bfloat16
    # grouped convolutions then fail to read
    args = {k: v.copy() for k, v in arg_params.items()}
    args["data"] = mx.nd.array(x)
    exe = sym.bind(mx.cpu(), args=args, aux_states={k: v.copy() for k, v in aux_params.items()},
                   grad_req="null")
    for out in exe.forward(is_train=False):   # warm-up: kernels chosen, memory planned
        out.wait_to_read()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for out in exe.forward(is_train=False):
            out.wait_to_read()
        times.append(time.perf_counter() - start)
        bar.update(1)
    return [o.astype("float32").asnumpy() for o in exe.outputs], times


def _runs_natively(target_dtype: str) -> bool:
    with native_log_silenced():
        return bf16_runs_natively() if target_dtype == "bfloat16" else fp16_runs_natively()


def _progress(total: int, desc: str) -> tqdm:
    """A progress bar on stderr, shown only on a terminal."""
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, file=sys.stderr, disable=None, leave=False)


# ops that select by score (detection heads): their outputs are not comparable across
# precisions on a random-weight net
_SELECTING_OPS = frozenset({"_contrib_box_nms", "_contrib_box_non_maximum_suppression", "topk",
                            "argsort", "sort", "_contrib_MultiBoxDetection"})
