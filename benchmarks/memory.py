"""Peak memory converting a large fp32 checkpoint: ours vs ``mx.contrib.amp``.

A synthetic checkpoint of ``--layers`` FullyConnected layers of ``--width`` x ``--width``
float32 weights (default 10 x 8192^2: 2.68 GB of params) is written to a fresh folder under
/tmp; then each method converts it to float16 with ``cast_optional_params=True`` (so the
weights are stored in fp16) and writes the result, each in its own child process, one at a
time. A child's peak RSS is its ``VmHWM`` (it reports it) and the kernel's ``ru_maxrss`` for
it (``os.wait4``); both are given as multiples of the fp32 param bytes. The folder is
deleted at the end.

Methods:

* ``ours_checkpoint``: ``mxnet_amp.checkpoint.convert_checkpoint`` (casts weight by weight,
  dropping each fp32 original);
* ``contrib``: ``mx.model.load_checkpoint`` + ``mx.contrib.amp.convert_model`` +
  ``mx.model.save_checkpoint(..., remove_amp_cast=False)``, as its docs show;
* ``ours_convert_model``: ``mxnet_amp.load_checkpoint`` + ``mxnet_amp.convert_model`` +
  ``mxnet_amp.save_checkpoint`` (the in-memory API: it never modifies the caller's dicts, so
  it holds fp32 and fp16 copies at once; shown for reference). The caller rebinds its names
  to the result, so each fp32 array can go once its cast has run;
* ``ours_convert_model_keep_fp32``: the same, but the caller keeps the fp32 dicts until the
  fp16 checkpoint is written (a user comparing both, say): the peak this method must show
  is fp32 + fp16, which checks that the measurement sees a second copy when there is one.
* ``ours_auto``: ``mxnet_amp.load_checkpoint`` + ``mxnet_amp.auto_convert_model`` on one
  sample row (float16 on a CPU: the checks run emulated) + ``mxnet_amp.save_checkpoint``.
  The caller's fp32 dicts live throughout (auto needs them for the float32 reference and
  returns a model beside them), so its floor is fp32 + fp16, as for the method above;
* ``ours_auto_fp32_weights``: the same with ``cast_optional_params=False`` (weights stay
  float32, cast in the graph): the returned model shares the caller's arrays.
* ``ours_onnx_fp32_weights`` (``--methods``; the onnx extra): ``mxnet_amp.load_checkpoint``
  + ``convert_model(..., cast_optional_params=False)`` (2.68 GB of float32 weights: past
  protobuf's 2 GB) + ``mxnet_amp.export_onnx`` to ``OUT.onnx``, which puts the weights in
  ``OUT.onnx.data`` (external data), written one weight at a time;
* ``ours_onnx``: the same with float16 weights (1.34 GB: inline in the ``.onnx`` file, whose
  protobuf message holds a copy of them while it is written).

    python benchmarks/memory.py            # 2.68 GB of fp32 params (needs ~4 GB RAM, ~7 GB /tmp)
    python benchmarks/memory.py --quick    # 4 x 512^2, seconds
    python benchmarks/memory.py --methods ours_onnx_fp32_weights ours_onnx --out benchmarks/results/memory_onnx.json

``--before-src DIR`` (a source tree of another commit, e.g. ``git archive <commit> | tar -x
-C DIR``) also runs the named ``--before-methods`` with that tree's ``mxnet_amp``, right after
the same method with this one, on the same checkpoint: before/after rows from one run.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
METHODS = ("ours_checkpoint", "contrib", "ours_convert_model", "ours_convert_model_keep_fp32",
           "ours_auto", "ours_auto_fp32_weights")
# ONNX export (the onnx extra): not in the default run, name them with --methods
ONNX_METHODS = ("ours_onnx_fp32_weights", "ours_onnx")


# ---------------------------------------------------------------------------- children

def _vm(field: str) -> int:
    """A ``/proc/self/status`` figure in bytes (``VmHWM``: peak RSS, ``VmRSS``: now)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _symbol(layers: int, width: int):
    import mxnet as mx
    x = mx.sym.var("data")
    for i in range(layers):
        x = mx.sym.FullyConnected(x, num_hidden=width, name=f"fc{i}")
        x = mx.sym.Activation(x, act_type="relu", name=f"relu{i}")
    return x


def child_make(prefix: str, layers: int, width: int) -> dict:
    """Write the fp32 checkpoint, one weight generated at a time."""
    import mxnet as mx
    sym = _symbol(layers, width)
    params = {}
    for i in range(layers):
        params[f"arg:fc{i}_weight"] = mx.nd.random.normal(0, 0.01, (width, width))
        params[f"arg:fc{i}_bias"] = mx.nd.zeros((width,))
    mx.nd.waitall()
    mx.nd.save(f"{prefix}-0000.params", params)
    sym.save(f"{prefix}-symbol.json")
    return {"param_bytes": sum(v.size * 4 for v in params.values())}


def child_convert(method: str, prefix: str, out_prefix: str) -> dict:
    """Run one conversion method; report peak RSS before anything else can raise it."""
    import mxnet as mx
    import mxnet_amp  # noqa: F401 - imported before the baseline so both sides pay for it
    from mxnet.contrib import amp
    baseline = _vm("VmRSS")
    extra = {}
    t0 = time.perf_counter()
    if method == "ours_checkpoint":
        from mxnet_amp.checkpoint import convert_checkpoint
        convert_checkpoint(prefix, 0, out_prefix, target_dtype="float16", cast_optional_params=True)
    elif method == "contrib":
        sym, args, auxs = mx.model.load_checkpoint(prefix, 0)
        sym, args, auxs = amp.convert_model(sym, args, auxs, target_dtype="float16",
                                            cast_optional_params=True)
        mx.model.save_checkpoint(out_prefix, 0, sym, args, auxs, remove_amp_cast=False)
    elif method == "ours_convert_model":
        sym, args, auxs = mxnet_amp.load_checkpoint(prefix, 0)
        sym, args, auxs = mxnet_amp.convert_model(sym, args, auxs, target_dtype="float16",
                                                  cast_optional_params=True)
        mxnet_amp.save_checkpoint(out_prefix, 0, sym, args, auxs)
    elif method == "ours_convert_model_keep_fp32":
        sym32, args32, auxs32 = mxnet_amp.load_checkpoint(prefix, 0)
        sym, args, auxs = mxnet_amp.convert_model(sym32, args32, auxs32, target_dtype="float16",
                                                  cast_optional_params=True)
        mxnet_amp.save_checkpoint(out_prefix, 0, sym, args, auxs)
        mx.nd.waitall()
        assert len(args32) == len(args)  # the fp32 originals are alive up to here
    elif method in ("ours_auto", "ours_auto_fp32_weights"):
        import numpy as np
        sym32, args32, auxs32 = mxnet_amp.load_checkpoint(prefix, 0)
        width = args32["fc0_weight"].shape[1]
        sample = np.random.RandomState(0).standard_normal((1, width)).astype(np.float32)
        stages = {"load": _vm("VmHWM")}
        sym, args, auxs, report = mxnet_amp.auto_convert_model(
            sym32, args32, auxs32, {"data": sample}, "float16", quiet=True,
            cast_optional_params=method == "ours_auto")
        mx.nd.waitall()
        stages["auto"] = _vm("VmHWM")
        mxnet_amp.save_checkpoint(out_prefix, 0, sym, args, auxs)
        mx.nd.waitall()
        stages["save"] = _vm("VmHWM")
        assert len(args32) == len(args)  # the fp32 originals are alive up to here
        extra = {"auto_executions": report.executions, "auto_validated": report.validated,
                 "auto_low_precision_nodes": report.low_precision_nodes,
                 # peak RSS so far at the end of each stage: where the peak comes from
                 "peak_by_stage_end_bytes": stages}
    elif method in ONNX_METHODS:
        sym, args, auxs = mxnet_amp.load_checkpoint(prefix, 0)
        width = args["fc0_weight"].shape[1]
        sym, args, auxs = mxnet_amp.convert_model(sym, args, auxs, target_dtype="float16",
                                                  cast_optional_params=method == "ours_onnx")
        stages = {"convert": _vm("VmHWM")}
        record = mxnet_amp.export_onnx(sym, args, auxs, {"data": (1, width)}, out_prefix + ".onnx")
        stages["export"] = _vm("VmHWM")
        extra = {"onnx_bytes": record.model_bytes, "onnx_data_bytes": record.data_bytes,
                 "onnx_external_data": record.data_path is not None, "export_s": record.seconds,
                 "peak_by_stage_end_bytes": stages}
    else:
        raise SystemExit(f"unknown method {method!r}")
    mx.nd.waitall()
    return {"vmhwm_bytes": _vm("VmHWM"), "baseline_rss_bytes": baseline,
            "seconds": time.perf_counter() - t0, "mxnet_amp_file": mxnet_amp.__file__, **extra}


# ---------------------------------------------------------------------------- parent

def spawn(args: list[str], src: str | None = None) -> tuple[dict | None, int, int, str]:
    """Run ``memory.py --child ...`` with ``mxnet_amp`` from ``src`` (default this checkout);
    returns (its JSON report, exit code, ru_maxrss bytes, stderr tail)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [src or os.path.dirname(HERE)]
            + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", *args],
                                stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        lines = [ln for ln in out.read().splitlines() if ln.startswith("{")]
        report = json.loads(lines[-1]) if lines else None
        return report, proc.returncode, usage.ru_maxrss * 1024, err.read()[-2000:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a 4 MB checkpoint, seconds (the smoke test)")
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--width", type=int, default=8192)
    ap.add_argument("--methods", nargs="*", default=list(METHODS), choices=METHODS + ONNX_METHODS)
    ap.add_argument("--workdir", default="/tmp", help="where the temporary checkpoint folder goes")
    ap.add_argument("--out", help="JSON path (default benchmarks/results/memory.json)")
    ap.add_argument("--before-src", help="a source tree of another commit: also run --before-methods "
                    "with its mxnet_amp (rows named '<method> (before)')")
    ap.add_argument("--before-label", help="how the docs name the --before-src tree (e.g. 'commit a450558')")
    ap.add_argument("--before-methods", nargs="*", default=["ours_auto", "ours_auto_fp32_weights"],
                    choices=METHODS)
    ap.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.child is not None:
        kind, *rest = opts.child
        report = (child_make(rest[0], int(rest[1]), int(rest[2])) if kind == "make"
                  else child_convert(kind, *rest))
        print(json.dumps(report))
        return 0

    import _common as C
    layers, width = (4, 512) if opts.quick else (opts.layers, opts.width)
    folder = tempfile.mkdtemp(prefix="mxamp_membench_", dir=opts.workdir)
    results = []
    try:
        prefix = os.path.join(folder, "big")
        made, rc, _, err = spawn(["make", prefix, str(layers), str(width)])
        if rc != 0 or made is None:
            raise SystemExit(f"could not write the checkpoint (exit {rc}):\n{err}")
        param_bytes = made["param_bytes"]
        in_file = os.path.getsize(f"{prefix}-0000.params")
        print(f"checkpoint: {layers} x FullyConnected {width}x{width}, "
              f"{param_bytes / 1e9:.3f} GB of fp32 params in {folder}")
        runs = [(m, None) for m in opts.methods]
        if opts.before_src:
            runs = [r for m in opts.methods for r in
                    ([(m, opts.before_src)] if m in opts.before_methods else []) + [(m, None)]]
        for method, src in runs:
            out_prefix = os.path.join(folder, method)
            report, rc, maxrss, err = spawn([method, prefix, out_prefix], src)
            row = {"method": method + (" (before)" if src else ""), "exit_code": rc}
            if src:
                row["mxnet_amp_source"] = os.path.abspath(src)
            if rc == 0 and report is not None and method in ONNX_METHODS:
                row.update({**report, "ru_maxrss_bytes": maxrss,
                            "peak_over_param_bytes": report["vmhwm_bytes"] / param_bytes,
                            "peak_above_baseline_over_param_bytes":
                                (report["vmhwm_bytes"] - report["baseline_rss_bytes"]) / param_bytes,
                            "ru_maxrss_over_param_bytes": maxrss / param_bytes})
                for suffix in (".onnx", ".onnx.data"):
                    if os.path.exists(out_prefix + suffix):
                        os.unlink(out_prefix + suffix)
            elif rc == 0 and report is not None:
                out_file = os.path.getsize(f"{out_prefix}-0000.params")
                with open(f"{out_prefix}-symbol.json") as f:
                    casts = sum(n["op"] in C.CAST_OPS for n in json.load(f)["nodes"])
                row.update({
                    **report, "ru_maxrss_bytes": maxrss,
                    "peak_over_param_bytes": report["vmhwm_bytes"] / param_bytes,
                    "peak_above_baseline_over_param_bytes":
                        (report["vmhwm_bytes"] - report["baseline_rss_bytes"]) / param_bytes,
                    "ru_maxrss_over_param_bytes": maxrss / param_bytes,
                    "output_params_file_over_input": out_file / in_file,
                    "output_cast_nodes": casts})
                for suffix in ("-0000.params", "-symbol.json"):
                    os.unlink(out_prefix + suffix)  # keep /tmp small between children
            else:
                row["error"] = err.strip().splitlines()[-1] if err.strip() else "no report"
            results.append(row)
            _print([row])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    payload = {"benchmark": "memory", "target_dtype": "float16", "cast_optional_params": True,
               "layers": layers, "width": width, "param_bytes": param_bytes,
               "input_params_file_bytes": in_file, "environment": C.environment(),
               "target_peak_over_param_bytes": 1.6, "results": results}
    if opts.before_src:
        payload["before_src_label"] = opts.before_label or os.path.abspath(opts.before_src)
    print()
    _print(results)
    out = opts.out or C.default_out("memory", opts.quick)
    C.write_json(out, payload)
    print(f"wrote {out} (temporary checkpoint deleted)")
    return 0


def _print(rows) -> None:
    import _common as C
    C.print_table(["method", "peak RSS GB", "peak / param bytes", "(peak - baseline) / param bytes",
                   "seconds", "out file / in file", "error"],
                  [[r["method"], r.get("vmhwm_bytes", 0) / 1e9 if "vmhwm_bytes" in r else None,
                    r.get("peak_over_param_bytes"), r.get("peak_above_baseline_over_param_bytes"),
                    r.get("seconds"), r.get("output_params_file_over_input"), r.get("error", "")[:80]]
                   for r in rows])


if __name__ == "__main__":
    raise SystemExit(main())
