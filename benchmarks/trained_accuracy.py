"""Accuracy of trained models after float16 / bfloat16 conversion: ours vs ``mx.contrib.amp``,
and what the automatic mode keeps.

The models are those of ``tests/support/trained_models.py`` (trained here in seconds, fixed seeds):
a conv+BatchNorm CNN on scikit-learn's digits, a 2-layer transformer encoder on a
synthetic sequence task, a 2-layer LSTM on digits rows, and a raw-units model whose first
layer overflows float16. For each model and dtype, both converters' models run on the test
set: float16 through ``mxnet_amp.emulation`` (MXNet has no CPU float16 kernels), bfloat16
natively where this CPU runs it, else emulated. Recorded: test accuracy, predictions that
differ from float32 ("flips"), and the output error ``max|lp - fp32| / max|fp32|``.

The automatic mode runs on a 64-image training batch twice per model and dtype: with its
default check (each output's error relative to its scale, top-1 agreement) and with the
elementwise ``allclose`` check that was the default before (``rtol``/``atol`` given):
executions, op nodes left in low precision, and the returned model's test accuracy.

    python benchmarks/trained_accuracy.py            # all models; writes docs/trained_accuracy.md
    python benchmarks/trained_accuracy.py --quick    # cnn and overflow only, no docs page
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import _common as C

sys.path.insert(0, os.path.join(C._ROOT, "tests", "support"))
import trained_models as tm  # noqa: E402 - the shared trainers live beside the tests

DTYPES = ("float16", "bfloat16")
SAMPLE = 64


def execution(dtype: str) -> str:
    from mxnet_amp.mx.hardware import bf16_runs_natively
    return "native" if dtype == "bfloat16" and bf16_runs_natively() else "emulated"


def measure(logits: np.ndarray, ref: np.ndarray, labels: np.ndarray) -> dict:
    finite = bool(np.isfinite(logits).all())
    with np.errstate(invalid="ignore", over="ignore"):
        err = float(np.abs(logits - ref).max() / np.abs(ref).max()) if finite else float("inf")
    return {"accuracy": tm.accuracy(logits, labels), "flips": tm.flips(logits, ref),
            "rel_error": err, "finite": finite}


# the overflow model shows what happens to a layer that overflows float16; BatchNorm folding
# (our default) moves the BatchNorm's 1/std into that layer's weights and the overflow is
# gone, so the model is converted with its BatchNorm kept, as contrib keeps it
OURS_OPTIONS = {"overflow": {"fold_batchnorm": False}}


def converted(model, ref, dtype: str, which: str) -> dict:
    kw = OURS_OPTIONS.get(model.name, {}) if which == "ours" else {}
    got = C.try_convert(which, model.sym, model.arg_params, model.aux_params, target_dtype=dtype,
                        **kw)
    if not got["ok"]:
        return {"error": got["error"]}
    try:
        logits = tm.logits_of(got["sym"], got["args"], got["auxs"], model.x_test, execution(dtype))
    except Exception as err:  # noqa: BLE001 - a model that fails to run is a result
        return {"error": C.error_text(err)}
    return measure(logits, ref, model.y_test)


def auto(model, ref, dtype: str, allclose: bool) -> dict:
    from mxnet_amp import auto_convert_model
    from mxnet_amp.auto import default_tolerances
    # allclose with these tolerances was auto's default check before the scale criterion
    kw = dict(zip(("rtol", "atol"), default_tolerances(dtype))) if allclose else {}
    t0 = time.perf_counter()
    sym, args, auxs, report = auto_convert_model(model.sym, model.arg_params, model.aux_params,
                                                 tm.train_inputs(model.name, SAMPLE), dtype,
                                                 quiet=True, **kw, **OURS_OPTIONS.get(model.name, {}))
    seconds = time.perf_counter() - t0
    logits = tm.logits_of(sym, args, auxs, model.x_test, execution(dtype))
    return {"criterion": report.criterion, "executions": report.executions,
            "validated": report.validated, "low_precision_nodes": report.low_precision_nodes,
            "op_nodes": report.op_nodes, "kept_fp32": report.excluded_sym_names,
            "seconds": seconds, **measure(logits, ref, model.y_test)}


def run_model(name: str) -> dict:
    model = tm.train(name)
    ref = tm.predict(model.sym, model.arg_params, model.aux_params, model.x_test)
    row = {"model": name, "train_seconds": model.train_seconds, "test_images": len(model.y_test),
           "fp32_accuracy": tm.accuracy(ref, model.y_test)}
    for dtype in DTYPES:
        row[dtype] = {"execution": execution(dtype),
                      "ours": converted(model, ref, dtype, "ours"),
                      "contrib": converted(model, ref, dtype, "contrib"),
                      "auto": auto(model, ref, dtype, allclose=False),
                      "auto_allclose": auto(model, ref, dtype, allclose=True)}
    return row


def pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


def cell(r: dict) -> str:
    if "error" in r:
        return f"error: {r['error'][:60]}"
    return f"{pct(r['accuracy'])} / {r['flips']} / {r['rel_error']:.2g}"


def auto_cell(r: dict) -> str:
    return (f"{r['low_precision_nodes']}/{r['op_nodes']} low, {r['executions']} runs, "
            f"{pct(r['accuracy'])}, {r['flips']} flips")


def markdown(payload: dict) -> str:
    env = payload["environment"]
    lines = [
        "# Trained models: accuracy after float16 / bfloat16 conversion",
        "",
        f"Measured {env['utc']} on {env['cpu']} ({env['cpu_count']} cores, bf16 runs natively: "
        f"{env['bf16_runs_natively']}), MXNet {env['mxnet']}. Command: `{payload['command']}`.",
        "Models, data and training: `tests/support/trained_models.py` (the same models CI tests in "
        "`tests/stories/test_trained_models.py`). Each cell: test accuracy (%) / predictions that differ "
        "from float32 / `max|lp - fp32| / max|fp32|` over the test logits. float16 runs "
        "emulated (`mxnet_amp.emulation`); bfloat16 "
        + ("natively (oneDNN, unfused)." if env["bf16_runs_natively"] else "emulated.")
        + " mx.contrib.amp's models run the same way.",
        "",
        "| model | test images | fp32 acc | float16 ours | float16 contrib | bfloat16 ours | bfloat16 contrib |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in payload["results"]:
        lines.append(f"| {r['model']} | {r['test_images']} | {pct(r['fp32_accuracy'])} | "
                     + " | ".join(cell(r[d][w]) for d in DTYPES for w in ("ours", "contrib")) + " |")
    lines += [
        "",
        "## Automatic mode",
        "",
        f"`auto_convert_model` on {SAMPLE} training images; the returned model on the test set. "
        "*scale*: the default check (each output's `max|out - fp32| / max|fp32|` within 1e-2 "
        "for float16, 5e-2 for bfloat16, and no top-1 class changed); *allclose*: elementwise "
        "`allclose` with rtol/atol (1e-2/1e-3 float16, 5e-2/1e-2 bfloat16), the default before. "
        "Each cell: op nodes in low precision / op nodes, model executions, test accuracy (%), "
        "flips against float32.",
        "",
        "| model | float16 scale | float16 allclose | bfloat16 scale | bfloat16 allclose |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in payload["results"]:
        lines.append(f"| {r['model']} | "
                     + " | ".join(auto_cell(r[d][k]) for d in DTYPES for k in ("auto", "auto_allclose"))
                     + " |")
    kept = [(r["model"], d, r[d]["auto"]["kept_fp32"]) for r in payload["results"] for d in DTYPES
            if r[d]["auto"]["kept_fp32"]]
    if kept:
        lines += ["", "Nodes the default check kept in float32: "
                  + "; ".join(f"{m} {d}: {', '.join(k)}" for m, d, k in kept) + "."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="cnn and overflow only; no docs page")
    ap.add_argument("--out", help="JSON path (default benchmarks/results/trained_accuracy.json)")
    ap.add_argument("--md", help="markdown page (default docs/trained_accuracy.md; none with --quick)")
    opts = ap.parse_args(argv)
    names = ("cnn", "overflow") if opts.quick else tm.MODELS
    results = []
    for name in names:
        row = run_model(name)
        results.append(row)
        print(f"{name}: fp32 {pct(row['fp32_accuracy'])}  "
              + "  ".join(f"{d} ours {cell(row[d]['ours'])} contrib {cell(row[d]['contrib'])} "
                          f"auto {auto_cell(row[d]['auto'])}" for d in DTYPES), flush=True)
    payload = {"benchmark": "trained_accuracy", "environment": C.environment(),
               "sample_images": SAMPLE, "results": results}
    out = opts.out or C.default_out("trained_accuracy", opts.quick)
    C.write_json(out, payload)
    print(f"wrote {out}")
    md = opts.md or (None if opts.quick else os.path.join(C._ROOT, "docs", "trained_accuracy.md"))
    if md:
        payload = {"command": "python " + " ".join(sys.argv), **payload}
        with open(C.kept_beside(md), "w") as f:
            f.write(markdown(payload))
        print(f"wrote {md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
