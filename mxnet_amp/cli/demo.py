"""``mxnet-amp demo``: a model zoo network built locally with random weights, converted and
run in float32 against low precision (natively where this machine can, else emulated)."""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import TYPE_CHECKING, Any, Iterator, Mapping

import numpy as np

from ..convert import convert_model_full
from ..emulation import emulate_model
from ..errors import CLIError, error_text
from ..mx.hardware import bf16_runs_natively, fp16_runs_natively
from ..options import make_options
from ..report.model import build_report
from ..report.sections import DemoSection, DemoSpeed
from .output import PROG, finish, native_log_silenced, say, with_hardware_note, with_note

if TYPE_CHECKING:
    from tqdm import tqdm

    from ..record import Conversion
    from ..report.model import ConversionReport

__all__ = ["run_demo", "available_memory"]


# one run of a model holds at most this many samples: a larger --batch runs in chunks of it
# (fewer where memory asks), so memory stays that of a chunk whatever --batch is
CHUNK_SAMPLES = 256
# the memory the two bound models may take for one chunk, at most (and half what is available)
_CHUNK_BUDGET = 1 << 30
# an estimate of the run time is said when it is longer than this (seconds)
_SAY_ESTIMATE_AFTER = 10.0


def run_demo(args: argparse.Namespace) -> int:
    """Run ``mxnet-amp demo`` with its parsed ``args``; returns the exit code."""
    if args.size < 16 or args.batch < 1 or args.runs < 1 or (args.chunk or 1) < 1:
        raise CLIError("demo needs --size >= 16, --batch >= 1, --runs >= 1 and --chunk >= 1")
    _check_chunk_memory(args.size, 1, 0, None)   # one sample's input, before any work
    try:
        return _demo(args)
    except MemoryError:   # past the lower bound checked up front: still the chunk's doing
        raise CLIError(f"--batch {args.batch} at --size {args.size} ran out of memory while the "
                       "model ran: use a smaller --chunk (the samples one run holds)") from None
    except Exception as err:   # MXNet's allocator: "Failed to allocate CPU Memory", bad_alloc
        text = str(err)
        if "llocat" not in text and "bad_alloc" not in text:
            raise
        raise CLIError(f"--batch {args.batch} at --size {args.size}: MXNet could not allocate "
                       f"memory ({error_text(err, 200)}): use a smaller --chunk (the samples one "
                       "run holds)") from None


def _demo(args: argparse.Namespace) -> int:
    """The demo itself, its arguments checked."""
    (sym, arg_params, aux_params), per_sample = _demo_model(args.model, args.size, args.seed)
    chunk = _check_chunk_memory(args.size, args.batch, per_sample, args.chunk)
    new_sym, new_args, new_aux, conversion = convert_model_full(
        sym, arg_params, aux_params,
        make_options(args.target_dtype, cast_optional_params=args.cast_optional_params,
                     fold_batchnorm=args.fold_bn))
    report = with_hardware_note(build_report(conversion, arg_params, aux_params, new_args, new_aux,
                                              model=args.model))
    native = _runs_natively(args.target_dtype)
    shape = f"{args.batch}x3x{args.size}x{args.size}"
    lines = ["", f"Demo: {args.model}, random weights, input {shape}"
             + (f" (run in chunks of {chunk})" if chunk < args.batch else "")]
    if native:
        low_model, how = (new_sym, new_args, new_aux), f"native {args.target_dtype}"
    else:
        low_model, how = emulate_model(new_sym, new_args, new_aux), \
            f"{args.target_dtype} emulated in float32"
        # why is the hardware note's to say (once, on the terminal and the page alike)
        lines.append(f"Native {args.target_dtype} is unavailable on this CPU (see the note); the "
                     f"{args.target_dtype} model was checked by emulation (every low precision "
                     "tensor rounded), so its speed was not measured.")
        report = with_note(report, lines[-1])
    # timing only matters where there is a native low precision run to compare with
    samples = _Samples(args.batch, chunk, args.size, args.seed)
    measured = _timed_runs((sym, arg_params, aux_params), low_model, samples,
                           args.runs if native else 0, args.model)
    compared = measured.compared
    report = _accuracy_lines(compared, how, conversion, lines, report)
    demo = DemoSection(native=native, execution=how, input=shape,
                       relative_max_error=compared.relative_error(),
                       top1_agreement=compared.top1_agreement(), chunk=chunk)
    if native:
        demo = dataclasses.replace(demo, speed=_speed_line(args, samples, measured.fp32_times,
                                                           measured.low_times, lines))
    finish(args, conversion, dataclasses.replace(report, demo=demo), lines)
    return 0


def _accuracy_lines(compared: _Comparison, how: str, conversion: Conversion, lines: list[str],
                    report: ConversionReport) -> ConversionReport:
    """Add the accuracy line (and notes where it says little) to ``lines`` and ``report``;
    returns the report."""
    rel, agree = compared.relative_error(), compared.top1_agreement()
    lines.append(f"Accuracy ({how} vs float32): max |diff| / max |fp32| = {rel:.2e}"
                 + ("" if agree is None else f", top-1 agreement {agree * 100:.0f}% of "
                    f"{compared.rows} samples"))
    scale = min(compared.largest)
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
    return report


def _speed_line(args: argparse.Namespace, samples: _Samples, fp32_times: list[float],
                low_times: list[float], lines: list[str]) -> DemoSpeed:
    """Add the measured speed-up to ``lines`` (a run: one pass over the ``--batch``
    samples, chunk by chunk); returns it."""
    t32, t16 = float(np.median(fp32_times)), float(np.median(low_times))
    plural = "" if args.runs == 1 else "s" if samples.chunks == 1 else "es"
    over = (f"{args.runs} run{plural}" if samples.chunks == 1 else
            f"{args.runs} pass{plural} over {samples.batch} samples in chunks of {samples.chunk}")
    per = "" if samples.chunks == 1 else (f" ({t32 * 1e3 / samples.batch:.2f} and "
                                          f"{t16 * 1e3 / samples.batch:.2f} ms a sample)")
    lines.append(f"Speed (median of {over}, same process): float32 {t32 * 1e3:.1f} ms, "
                 f"{args.target_dtype} {t16 * 1e3:.1f} ms{per}, speed-up x{t32 / t16:.2f}")
    return DemoSpeed(speedup=t32 / t16, fp32_ms=t32 * 1e3, low_ms=t16 * 1e3, runs=args.runs)


def _demo_model(name: str, size: int, seed: int) -> tuple[tuple[Any, dict, dict], int]:
    """A model zoo network with random weights, as ``((sym, arg_params, aux_params), bytes
    of its largest activation a sample)``."""
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
        # one sample settles deferred shapes
        net(mx.nd.array(np.random.default_rng(seed).standard_normal((1, 3, size, size))))
    except ValueError as err:   # a param whose own initializer rejects its shape
        raise CLIError(f"{name} cannot be built with random weights: {error_text(err)}") from None
    except mx.base.MXNetError as err:
        raise CLIError(f"{name} does not run on {size}x{size} inputs (try a larger --size): "
                       f"{error_text(err)}") from None
    sym = net(mx.sym.var("data"))
    if isinstance(sym, (list, tuple)):   # detection nets: ids, scores, boxes
        sym = mx.sym.Group(list(sym))
    params = {p.name: p.data() for p in net.collect_params().values()}
    args = set(sym.list_arguments())
    arg_params = {k: v for k, v in params.items() if k in args}
    aux_params = {k: v for k, v in params.items() if k not in args}
    return (sym, arg_params, aux_params), _largest_activation_bytes(sym, size)


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


def _check_chunk_memory(size: int, batch: int, per_sample: int, chunk: int | None) -> int:
    """The samples one run holds (``--chunk``, else at most :data:`CHUNK_SAMPLES` and what
    fits half the memory available, up to 1 GiB); :class:`CLIError` naming the flag when
    even that cannot fit.

    The memory is a lower bound, so that what is refused cannot run: per sample, the two
    models bound at once (float32 and low precision), each with its float32 input, the copy
    MXNet binds and the largest activation (``per_sample`` bytes; 0 before the model is
    built), and the input as drawn (float64). Measured on resnet18_v1 at 64x64, one model's
    run takes 0.57 MB a sample where this bound says 0.36 MB: hence the halving.
    """
    pixels = 3 * size * size
    need = 2 * (pixels * 4 * 2 + per_sample) + pixels * 8
    available = available_memory()
    if chunk is not None:
        chunk = min(chunk, batch)
        if available is not None and chunk * need > available:
            raise CLIError(f"--chunk {chunk} needs at least {chunk * need / 2**30:.1f} GiB of memory "
                           f"at --size {size}; {available / 2**30:.1f} GiB is available: give at "
                           f"most {available // need} (or leave --chunk out)")
        return chunk
    budget = _CHUNK_BUDGET if available is None else min(_CHUNK_BUDGET, available // 2)
    fits = budget // need
    if fits < 1:
        raise CLIError(f"one sample at --size {size} needs at least {need / 2**30:.1f} GiB of "
                       f"memory ({'its input' if not per_sample else 'its input and activations'}"
                       f"); {(available or 0) / 2**30:.1f} GiB is available: use a smaller --size")
    return int(min(batch, CHUNK_SAMPLES, fits))


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


class _Samples:
    """The ``batch`` random samples, drawn ``chunk`` at a time from one seeded generator (the
    values of one draw of the whole batch); the last chunk is filled up with more draws,
    whose outputs are not counted, so one executor serves every chunk."""

    def __init__(self, batch: int, chunk: int, size: int, seed: int) -> None:
        self.batch, self.chunk, self.size, self.seed = batch, chunk, size, seed
        self.chunks = -(-batch // chunk)

    def __iter__(self) -> Iterator[tuple[np.ndarray, int]]:
        """``(chunk input, rows of it that count)`` for each chunk."""
        rng = np.random.default_rng(self.seed)
        for start in range(0, self.batch, self.chunk):
            x = rng.standard_normal((self.chunk, 3, self.size, self.size)).astype("float32")
            yield x, min(self.chunk, self.batch - start)


class _Comparison:
    """The float32 and the low precision outputs compared chunk by chunk, nothing kept but
    the figures: per output the largest |difference| and the largest |float32|, and the rows
    whose top-1 class agrees (where the first output is class scores)."""

    def __init__(self) -> None:
        self.diff: list[float] = []
        self.largest: list[float] = []
        self.rows = 0
        self.agreeing: int | None = None

    def add(self, ref: list[np.ndarray], low: list[np.ndarray], rows: int) -> None:
        """Count the first ``rows`` rows of one chunk's outputs."""
        diff = [_largest_abs(lo[:rows] - r[:rows]) for lo, r in zip(low, ref)]
        largest = [_largest_abs(r[:rows]) for r in ref]
        self.diff = [_worse(a, b) for a, b in zip(self.diff, diff)] if self.diff else diff
        self.largest = [_worse(a, b) for a, b in zip(self.largest, largest)] if self.largest else largest
        self.rows += rows
        if ref[0].ndim == 2:
            agree = int(np.sum(low[0][:rows].argmax(axis=1) == ref[0][:rows].argmax(axis=1)))
            self.agreeing = (self.agreeing or 0) + agree

    def relative_error(self) -> float:
        """max over the outputs of max |low - fp32| / max |fp32|."""
        return max(d / max(r, 1e-30) if np.isfinite(r) else float("nan")
                   for d, r in zip(self.diff, self.largest))

    def top1_agreement(self) -> float | None:
        """The share of samples whose top-1 class agrees (None: no class scores)."""
        return None if self.agreeing is None else self.agreeing / self.rows


@dataclasses.dataclass(frozen=True)
class _Measured:
    """What the demo's runs measured: the outputs compared, and each timed pass of the
    float32 and the low precision model (seconds; empty where none was timed)."""

    compared: _Comparison
    fp32_times: list[float]
    low_times: list[float]


def _largest_abs(values: np.ndarray) -> float:
    return float(np.abs(values).max()) if values.size else 0.0


def _worse(a: float, b: float) -> float:
    """The larger, or nan when either is (a nan anywhere is what the figure must show)."""
    return float("nan") if np.isnan(a) or np.isnan(b) else max(a, b)


def _bind(model: tuple[Any, Mapping, Mapping], chunk: int, size: int) -> Any:
    """``model`` bound for inference on one chunk of samples."""
    import mxnet as mx
    sym, arg_params, aux_params = model
    # copies: the float32 and the converted model share the arrays of float32 params, and
    # after a float32 run oneDNN has reordered them in place, which MXNet 1.9.1's bfloat16
    # grouped convolutions then fail to read
    args = {k: v.copy() for k, v in arg_params.items()}
    args["data"] = mx.nd.zeros((chunk, 3, size, size))
    return sym.bind(mx.cpu(), args=args, aux_states={k: v.copy() for k, v in aux_params.items()},
                    grad_req="null")


def _forward(exe: Any, x: np.ndarray) -> float:
    """Run ``exe`` on ``x``; the seconds it took (the copy of ``x`` in not counted)."""
    exe.arg_dict["data"][:] = x
    exe.arg_dict["data"].wait_to_read()
    start = time.perf_counter()
    for out in exe.forward(is_train=False):
        out.wait_to_read()
    return time.perf_counter() - start


def _timed_runs(fp32: tuple[Any, Mapping, Mapping], low: tuple[Any, Mapping, Mapping],
                samples: _Samples, runs: int, name: str) -> _Measured:
    """Both models bound for one chunk; a warm-up run of each (kernels chosen, memory
    planned), one pass over the samples comparing their outputs chunk by chunk, then
    ``runs`` timed passes of each (0: none). Returns the comparison and each pass's time."""
    first = next(iter(samples))[0]
    exes = [_bind(fp32, samples.chunk, samples.size), _bind(low, samples.chunk, samples.size)]
    per_chunk = [_forward(exe, first) for exe in exes]   # warm-up
    if samples.chunks > 1:   # timed again, warm: the estimate multiplies it
        per_chunk = [_forward(exe, first) for exe in exes]
    total = samples.batch * 2 * (1 + runs)
    estimate = samples.chunks * sum(per_chunk) * (1 + runs)
    if estimate > _SAY_ESTIMATE_AFTER:
        say(f"{PROG}: demo: about {_duration(estimate)} to run {samples.batch} samples "
            f"{2 * (1 + runs)} times in {samples.chunks} chunks of {samples.chunk} (Ctrl-C stops it)")
    bar = _progress(total, f"demo {name}")
    compared = _Comparison()
    for x, rows in samples:
        outs = []
        for exe in exes:
            _forward(exe, x)
            outs.append([o.astype("float32").asnumpy() for o in exe.outputs])
            bar.update(rows)
        compared.add(outs[0], outs[1], rows)
    times: list[list[float]] = [[], []]
    for k, exe in enumerate(exes):
        for _ in range(runs):
            elapsed = 0.0
            for x, rows in samples:
                elapsed += _forward(exe, x)
                bar.update(rows)
            times[k].append(elapsed)
    bar.close()
    return _Measured(compared, times[0], times[1])


def _duration(seconds: float) -> str:
    """``seconds`` as a person says it: 40 s, 12 min, 3.5 h, 2.1 days."""
    for unit, length in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= 1.5 * length:
            count = seconds / length
            return f"{count:.2g} {unit}" if count < 10 else f"{count:.0f} {unit}"
    return f"{seconds:.0f} s"


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
