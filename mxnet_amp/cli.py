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
import sys
import time
import warnings
from typing import Sequence

from .errors import AMPError

__all__ = ["main", "build_parser", "CLIError", "parse_input_spec"]

PROG = "mxnet-amp"
EXIT_ERROR = 2


class CLIError(AMPError, ValueError):
    """A command line value is wrong (a bad ``--input`` spec, say)."""


# --- parser -------------------------------------------------------------------------------

def _conversion_options(p: argparse.ArgumentParser, dtype_required: bool) -> None:
    p.add_argument("prefix", metavar="PREFIX",
                   help="checkpoint prefix: reads PREFIX-symbol.json and PREFIX-NNNN.params")
    p.add_argument("--epoch", type=int, default=0, metavar="N", help="checkpoint epoch (default 0)")
    p.add_argument("--target-dtype", choices=("float16", "bfloat16"), required=dtype_required,
                   default=None if dtype_required else "float16",
                   help="low precision dtype" + ("" if dtype_required else " (default float16)"))
    p.add_argument("--fp32-ops", nargs="+", default=None, metavar="OP",
                   help="ops to run in float32 (on top of the shipped lists)")
    p.add_argument("--target-ops", nargs="+", default=None, metavar="OP",
                   help="ops to run in the target dtype (on top of the shipped lists)")
    p.add_argument("--widest-ops", nargs="+", default=None, metavar="OP",
                   help="ops whose float inputs are cast to the widest among them")
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
    p.add_argument("-q", "--quiet", action="store_true", help="do not print the report table")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``mxnet-amp`` (one subparser per command)."""
    parser = argparse.ArgumentParser(
        prog=PROG, description="Automatic mixed precision (float16 / bfloat16) for MXNet 1.9 models.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
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
    p.set_defaults(run=_cmd_convert)

    p = sub.add_parser("inspect", help="print what a conversion would do; writes no checkpoint",
                       description="Convert in memory and print the report; no checkpoint is "
                       "written (--report/--graph/--html still write those files).")
    _conversion_options(p, dtype_required=False)
    p.set_defaults(run=_cmd_inspect)

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
    p.add_argument("--rtol", type=float, default=None,
                   help="relative tolerance of the output check (default 1e-2 float16, 5e-2 bfloat16)")
    p.add_argument("--atol", type=float, default=None,
                   help="absolute tolerance of the output check (default 1e-3 float16, 1e-2 bfloat16)")
    p.add_argument("--execution", choices=("auto", "native", "emulated"), default="auto",
                   help="run the converted model natively or through emulation (default: "
                   "native where the hardware runs the dtype)")
    p.add_argument("--max-executions", type=int, default=None, metavar="N",
                   help="upper bound on model runs during the search")
    p.add_argument("--out", metavar="PREFIX2", default=None,
                   help="output checkpoint prefix (default PREFIX-amp)")
    p.set_defaults(run=_cmd_auto)

    p = sub.add_parser("demo", help="build a zoo model locally, convert it, run fp32 vs low precision",
                       description="Build a Gluon model zoo network with random weights (no "
                       "downloads), convert it, run the fp32 and the converted model on the "
                       "same inputs and print the report, the accuracy and, where low precision "
                       "runs natively, the measured speed ratio.")
    p.add_argument("--model", default="resnet18_v1",
                   help="model zoo name (default resnet18_v1; e.g. mobilenet0.25, vgg11)")
    p.add_argument("--target-dtype", choices=("float16", "bfloat16"), default="bfloat16",
                   help="low precision dtype (default bfloat16)")
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

def _say(*parts) -> None:
    print(*parts, file=sys.stderr)


def _progress(total: int, desc: str):
    """A progress bar on stderr, shown only on a terminal."""
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, file=sys.stderr, disable=None, leave=False)


def _check_prefix(prefix: str, epoch: int) -> None:
    for path in (f"{prefix}-symbol.json", f"{prefix}-{epoch:04d}.params"):
        if not os.path.isfile(path):
            raise CLIError(f"checkpoint file not found: {path}")


def _check_outputs(args) -> None:
    """Fail before any work when an output cannot be written (nothing half done)."""
    from .draw import check_graph_path
    paths = [getattr(args, "report", None), getattr(args, "graph", None), getattr(args, "html", None)]
    out = getattr(args, "out", None)
    if out:
        paths.append(out + "-symbol.json")
    for path in paths:
        if path:
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(folder):
                raise CLIError(f"cannot write {path}: folder {folder} does not exist")
    if getattr(args, "graph", None):
        check_graph_path(args.graph)


def _write_outputs(args, conversion, report) -> list[str]:
    """Write --report / --graph / --html; returns what was written."""
    from .draw import graph_svg, write_graph
    from .io import atomic_write
    from .report import report_html
    written = []

    def text_writer(text):
        def write(tmp):
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
        return write
    if args.report:
        atomic_write(args.report, text_writer(report.to_json()))
        written.append(args.report)
    if args.graph:
        write_graph(conversion, args.graph, title=report.model or "")
        written.append(args.graph)
    if args.html:
        atomic_write(args.html, text_writer(report_html(report, graph_svg(conversion, report.model or ""))))
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


def _convert_args(args) -> dict:
    return dict(target_dtype=args.target_dtype, target_dtype_ops=args.target_ops,
                fp32_ops=args.fp32_ops, widest_dtype_ops=args.widest_ops,
                excluded_sym_names=args.exclude, data_names=args.data_names,
                cast_optional_params=args.cast_optional_params, fold_batchnorm=args.fold_bn)


def _convert_prefix(args, write: bool):
    from .checkpoint import convert_checkpoint
    from .report import build_report
    _check_prefix(args.prefix, args.epoch)
    if sys.stderr.isatty():
        # convert_checkpoint has no progress hook: say what is going on, once
        _say(f"{PROG}: converting {args.prefix} to {args.target_dtype}…")
    conversion, new_args, new_aux, _ = convert_checkpoint(
        args.prefix, args.epoch, getattr(args, "out", None), getattr(args, "out_epoch", None),
        write=write, **_convert_args(args))
    report = build_report(conversion, new_arg_params=new_args, new_aux_params=new_aux,
                          excluded=args.exclude or (), model=os.path.basename(args.prefix))
    return conversion, report


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


def parse_input_spec(spec: str, seed: int = 0):
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
    try:
        shape = tuple(int(d) for d in value.lower().split("x"))
    except ValueError:
        shape = ()
    if not shape or any(d <= 0 for d in shape):
        raise CLIError(f"bad --input {spec!r}: shape {value!r} is not like 1x3x224x224 "
                       "(positive integers joined by 'x'), nor a .npy file")
    rng = np.random.default_rng(seed)
    return name, rng.standard_normal(shape).astype("float32")


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
        from .auto import auto_convert_model
    except ImportError as err:
        raise CLIError(f"automatic mode is not available in this installation ({err})") from None
    from .convert import convert_model_full
    from .io import load_checkpoint, save_checkpoint
    from .report import build_report
    _check_prefix(args.prefix, args.epoch)
    inputs = _sample_inputs(args)
    out = args.out or args.prefix + "-amp"
    if os.path.abspath(out) == os.path.abspath(args.prefix):
        raise CLIError(f"refusing to overwrite the input checkpoint {args.prefix!r}; choose another --out")
    sym, arg_params, aux_params = load_checkpoint(args.prefix, args.epoch)
    unknown = sorted(set(inputs) - set(sym.list_arguments()))
    if unknown:
        raise CLIError(f"sample input(s) {unknown} are not inputs of {args.prefix}-symbol.json "
                       f"(its inputs without params: "
                       f"{[n for n in sym.list_arguments() if n not in arg_params]})")
    options = _convert_args(args)
    new_sym, new_args, new_aux, auto = auto_convert_model(
        sym, arg_params, aux_params, inputs, rtol=args.rtol, atol=args.atol,
        execution=args.execution, max_executions=args.max_executions,
        quiet=not sys.stderr.isatty(), **options)
    save_checkpoint(out, args.epoch, new_sym, new_args, new_aux)
    # the report needs the Conversion record: the same conversion with the chosen exclusions
    excluded = sorted(set(options.pop("excluded_sym_names") or ()) | set(auto.excluded_sym_names))
    _, _, _, conversion = convert_model_full(sym, arg_params, aux_params,
                                             excluded_sym_names=excluded, **options)
    reasons = {k.name: f"auto: {k.reason}" + ("" if k.value is None else f" ({k.value:.3g})")
               for k in auto.kept_fp32 if k.reason != "user"}
    report = build_report(conversion, arg_params, aux_params, new_args, new_aux,
                          excluded=excluded, model=os.path.basename(args.prefix),
                          reasons=reasons)
    report = _with_extra(report, {"auto": auto.to_dict()})
    _finish(args, conversion, report, ["", auto.summary()])
    _say(f"{PROG}: wrote {out}-symbol.json and {out}-{args.epoch:04d}.params")
    return 0


def _cmd_demo(args) -> int:
    import numpy as np
    from .convert import convert_model_full
    from .report import build_report
    if args.size < 16 or args.batch < 1 or args.runs < 1:
        raise CLIError("demo needs --size >= 16, --batch >= 1 and --runs >= 1")
    bar = _progress(4 + 2 * args.runs, f"demo {args.model}")
    sym, arg_params, aux_params, x = _demo_model(args.model, args.size, args.batch, args.seed)
    bar.update(1)
    new_sym, new_args, new_aux, conversion = convert_model_full(
        sym, arg_params, aux_params, target_dtype=args.target_dtype,
        cast_optional_params=args.cast_optional_params)
    report = build_report(conversion, arg_params, aux_params, new_args, new_aux, model=args.model)
    bar.update(1)
    native = _runs_natively(args.target_dtype)
    # timing only matters where there is a native low precision run to compare with
    ref, fp32_times = _timed_runs(sym, arg_params, aux_params, x, args.runs if native else 1, bar)
    lines = ["", f"Demo: {args.model}, random weights, input {args.batch}x3x{args.size}x{args.size}"]
    if native:
        low, low_times = _timed_runs(new_sym, new_args, new_aux, x, args.runs, bar)
        how = f"native {args.target_dtype}"
    else:
        from .emulation import emulate_model
        em_sym, em_args, em_aux = emulate_model(new_sym, new_args, new_aux)
        low, _ = _timed_runs(em_sym, em_args, em_aux, x, 1, bar)
        bar.update(2 * args.runs - 2)
        low_times = None
        how = f"{args.target_dtype} emulated in float32"
        why = ("no avx512: oneDNN has no bf16 matrix kernels here" if args.target_dtype == "bfloat16"
               else "MXNet has no float16 kernels for CPU")
        lines.append(f"Native {args.target_dtype} is unavailable on this CPU ({why}); the "
                     f"{args.target_dtype} model was checked by emulation (every low precision "
                     "tensor rounded), so no speed ratio was measured.")
    bar.close()
    rel = float(np.abs(low - ref).max() / max(float(np.abs(ref).max()), 1e-30))
    agree = float(np.mean(low.argmax(axis=1) == ref.argmax(axis=1)))
    lines.append(f"Accuracy ({how} vs float32): max |diff| / max |fp32| = {rel:.2e}, "
                 f"top-1 agreement {agree * 100:.0f}% of {len(ref)} samples")
    scale = float(np.abs(ref).max())
    if not np.isfinite(scale) or scale < 1e-6:
        lines.append(f"Note: the float32 outputs are degenerate with these random weights "
                     f"(max |fp32| = {scale:.3g}); the accuracy figures say little.")
    if low_times is not None:
        t32, t16 = float(np.median(fp32_times)), float(np.median(low_times))
        lines.append(f"Speed (median of {args.runs} runs, same process): float32 {t32 * 1e3:.1f} ms, "
                     f"{args.target_dtype} {t16 * 1e3:.1f} ms, speed-up x{t32 / t16:.2f}")
        report = _with_extra(report, {"speedup": t32 / t16, "fp32_ms": t32 * 1e3, "low_ms": t16 * 1e3})
    report = _with_extra(report, {"native": native, "relative_max_error": rel, "top1_agreement": agree})
    _finish(args, conversion, report, lines)
    return 0


def _with_extra(report, extra: dict):
    import dataclasses
    return dataclasses.replace(report, extra={**report.extra, **extra})


def _runs_natively(target_dtype: str) -> bool:
    from .hardware import bf16_runs_natively, fp16_runs_natively
    with _native_log_silenced():
        return bf16_runs_natively() if target_dtype == "bfloat16" else fp16_runs_natively()


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


def _demo_model(name: str, size: int, batch: int, seed: int):
    """A model zoo network with random weights, as (sym, arg_params, aux_params, input)."""
    import mxnet as mx
    import numpy as np
    from mxnet.gluon.model_zoo import vision
    mx.random.seed(seed)
    try:
        net = vision.get_model(name, pretrained=False)
    except ValueError:
        raise CLIError(f"unknown model zoo name {name!r} (try resnet18_v1, mobilenet0.25, "
                       "squeezenet1.1)") from None
    # He initialisation (fan-in) keeps activations of order one through a deep random
    # network; with fan-averaged inits depthwise convs shrink mobilenet's logits to ~1e-16,
    # where every low precision comparison is meaningless
    net.initialize(mx.init.MSRAPrelu(factor_type="in", slope=0.0))
    x = np.random.default_rng(seed).standard_normal((batch, 3, size, size)).astype("float32")
    try:
        net(mx.nd.array(x))   # settles deferred shapes
    except mx.base.MXNetError as err:
        raise CLIError(f"{name} does not run on {size}x{size} inputs (try a larger --size): "
                       f"{_one_line(err)}") from None
    sym = net(mx.sym.var("data"))
    params = {p.name: p.data() for p in net.collect_params().values()}
    args = set(sym.list_arguments())
    arg_params = {k: v for k, v in params.items() if k in args}
    aux_params = {k: v for k, v in params.items() if k not in args}
    return sym, arg_params, aux_params, x


def _timed_runs(sym, arg_params, aux_params, x, runs: int, bar):
    """Output of ``sym`` on ``x`` (float32 numpy) and the wall time of each of ``runs`` runs."""
    import mxnet as mx
    # copies: the float32 and the converted model share the arrays of float32 params, and
    # after a float32 run oneDNN has reordered them in place, which MXNet 1.9.1's bfloat16
    # grouped convolutions then fail to read
    args = {k: v.copy() for k, v in arg_params.items()}
    args["data"] = mx.nd.array(x)
    exe = sym.bind(mx.cpu(), args=args, aux_states={k: v.copy() for k, v in aux_params.items()},
                   grad_req="null")
    exe.forward(is_train=False)[0].wait_to_read()   # warm-up: kernels chosen, memory planned
    times = []
    out = None
    for _ in range(runs):
        start = time.perf_counter()
        out = exe.forward(is_train=False)[0]
        out.wait_to_read()
        times.append(time.perf_counter() - start)
        bar.update(1)
    return out.astype("float32").asnumpy(), times


# --- entry point --------------------------------------------------------------------------

def _one_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    first = text.splitlines()[0]
    return first if len(first) < 2000 else first[:2000] + "…"


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
            text = _one_line(w.message)
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
            msg = _one_line(err)
        elif isinstance(err, OSError):
            msg = f"{err.strerror or err}: {err.filename}" if err.filename else _one_line(err)
        elif type(err).__name__ == "MXNetError":
            msg = "MXNet: " + _one_line(err)
        else:
            msg = f"{type(err).__name__}: {_one_line(err)} (run with --debug for the traceback)"
        _say(f"{PROG}: error: {msg}")
        return EXIT_ERROR


if __name__ == "__main__":   # pragma: no cover
    sys.exit(main())
