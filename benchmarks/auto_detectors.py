"""Automatic mode on gluoncv detectors with random weights (issue 24): executions and
nodes kept in float32, judged on the dense tensors before NMS / box decoding.

Each model is built offline and its BatchNorm calibrated exactly as the zoo sweep does
(``tools/zoo_sweep``: He-normal weights, every BatchNorm's statistics set layer by layer
from what reaches it on smooth random images, the detector's in-graph backbone included),
exported, then converted by :func:`mxnet_amp.auto_convert_model` with the default check,
emulated. Also recorded: the float32 model's own sensitivity (its judged tensors when only
its input and weights are rounded to the dtype, run in float32): random calibrated nets are
chaotic (tools/zoo_sweep/__init__.py), and that figure says how far any low precision
deployment starts from.

    python benchmarks/auto_detectors.py --out benchmarks/results/auto_detectors.json
    python benchmarks/auto_detectors.py --quick          # one model, float16 (seconds)
    python benchmarks/auto_detectors.py --code /tmp/old --label main --out old.json
        # the same with the mxnet_amp package of an older checkout (git archive REV mxnet_amp)
    python benchmarks/auto_detectors.py --render new.json old.json   # the table in the doc
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
if "--code" in sys.argv[:-1]:   # another checkout's mxnet_amp, before this one's
    sys.path.insert(0, os.path.abspath(sys.argv[sys.argv.index("--code") + 1]))

from _common import environment, write_between_markers, write_json  # noqa: E402

MODELS = ("ssd_512_mobilenet1.0_voc", "ssd_512_resnet50_v1_voc", "yolo3_mobilenet1.0_voc",
          "yolo3_darknet53_voc")
DTYPES = ("float16", "bfloat16")
MAX_EXECUTIONS = 200


def _judged_graph(sym):
    """The graph with the dense tensors the auto check judges as its outputs."""
    from mxnet_amp.ir.graph import Graph
    from mxnet_amp.mx.io import graph_from_symbol, graph_to_symbol
    from mxnet_amp.passes.dense_outputs import dense_outputs
    graph = graph_from_symbol(sym)
    split = dense_outputs(graph)
    heads = tuple(graph.heads[k] for k in split.dense) + split.feeds
    return graph_to_symbol(Graph(graph.nodes, heads, graph.attrs))


def _sensitivity(model, dtype: str) -> float:
    """max over the judged tensors of max|f(round(x), round(w)) - f(x, w)| / max|f(x, w)|,
    all in float32."""
    import mxnet as mx
    import numpy as np

    from mxnet_amp.emulation import round_numpy
    probe = _judged_graph(model.sym)

    def run(args, x):
        values = {**args, **model.auxs, "data": x}
        outs = mx.nd.CachedOp(probe)(*[values[n] for n in probe.list_inputs()])
        return [o.asnumpy() for o in (outs if isinstance(outs, (list, tuple)) else [outs])]
    ref = run(model.args, model.x)
    rounded = run({k: mx.nd.array(round_numpy(v.asnumpy(), dtype)) for k, v in model.args.items()},
                  mx.nd.array(round_numpy(model.x.asnumpy(), dtype)))
    worst = 0.0
    for r, o in zip(ref, rounded):
        finite = np.isfinite(r)
        scale = float(np.abs(r[finite]).max(initial=0.0)) or 1.0
        worst = max(worst, float(np.abs(o[finite] - r[finite]).max(initial=0.0)) / scale)
    return worst


def one(name: str, dtype: str) -> dict:
    """Build and calibrate ``name`` as the zoo sweep does, then auto-convert it."""
    from mxnet_amp.auto import auto_convert_model
    from tools.zoo_sweep.sweep import _Model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _Model(name, "calibrated")
        model.export()
        start = time.perf_counter()
        _, _, _, report = auto_convert_model(model.sym, model.args, model.auxs, model.data,
                                             dtype, execution="emulated", quiet=True,
                                             max_executions=MAX_EXECUTIONS)
    seconds = time.perf_counter() - start
    first = next((s for s in report.steps if s.kind == "check"), None)
    reasons: dict[str, int] = {}
    for k in report.kept_fp32:
        reasons[k.reason] = reasons.get(k.reason, 0) + 1
    return {"model": name, "dtype": dtype, "input_shape": model.rec["input_shape"],
            "calibrated_batchnorms": model.rec["calibrated_batchnorms"],
            "executions": report.executions, "validated": report.validated,
            "minimality": report.minimality,
            "kept": len(report.kept_fp32), "kept_by_reason": reasons,
            "candidates": report.low_precision_nodes + len(report.kept_fp32),
            "op_nodes": report.op_nodes, "error_all_low": first.relative_error if first else None,
            "error_returned": report.relative_error, "tolerance": report.tolerance,
            "sensitivity": _sensitivity(model, dtype), "steps": [s.kind for s in report.steps],
            "judged_before_nms": any("dense tensors" in n for n in report.notes),
            "seconds": round(seconds, 1)}


def degenerate(name: str, dtype: str = "bfloat16", fraction: float = 0.5) -> dict:
    """Issue 32: the detector with ``fraction`` of every BatchNorm's running variances
    negative (a net initialised and never trained, its statistics set by hand), converted
    with ``fold_batchnorm=False`` (folding refuses such statistics). Executions, seconds,
    peak RSS growth, and the typed error when auto stops."""
    import resource

    import numpy as np

    import mxnet as mx
    from mxnet_amp.auto import auto_convert_model
    from mxnet_amp.errors import AMPError
    from tools.zoo_sweep.sweep import _Model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _Model(name, "calibrated")
        model.export()
    rng = np.random.RandomState(0)
    auxs = dict(model.auxs)
    for key in [k for k in auxs if k.endswith(("moving_var", "running_var"))]:
        var = auxs[key].asnumpy()
        flip = rng.uniform(size=var.shape) < fraction
        auxs[key] = mx.nd.array(np.where(flip, -np.abs(var) - 1.0, var))
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    start = time.perf_counter()
    row = {"model": name, "dtype": dtype, "negative_variance_fraction": fraction}
    try:
        _, _, _, report = auto_convert_model(model.sym, model.args, auxs, model.data, dtype,
                                             fold_batchnorm=False, quiet=True,
                                             max_executions=MAX_EXECUTIONS)
        row.update(executions=report.executions, validated=report.validated,
                   notes=list(report.notes))
    except AMPError as err:
        row.update(error=type(err).__name__, message=str(err)[:400],
                   nodes=len(getattr(err, "nodes", ())))
    row.update(seconds=round(time.perf_counter() - start, 1),
               peak_rss_gb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20, 2),
               rss_before_gb=round(rss_before, 2))
    return row


def markdown(results: list[dict]) -> str:
    """One row per model and dtype, a column pair per result file (labelled)."""
    labels = [r.get("label", "") for r in results]
    head = "| model | dtype | error, all low precision | float32 on rounded input+weights | " \
        + " | ".join(f"{lab}: executions | {lab}: kept float32 (of candidates), error"
                     for lab in labels) + " |"
    lines = [head, "|" + "---|" * (4 + 2 * len(results))]
    keyed = [{(r["model"], r["dtype"]): r for r in res["rows"]} for res in results]
    for key in [(r["model"], r["dtype"]) for r in results[0]["rows"]]:
        first = keyed[0][key]
        cells = [key[0], key[1], f"{first['error_all_low']:.3g} (tol {first['tolerance']:g})",
                 f"{first['sensitivity']:.3g}"]
        for rows in keyed:
            r = rows.get(key)
            cells += ([f"{r['executions']}" + (" (the cap)" if r["executions"] >= MAX_EXECUTIONS
                                                else "")
                       + ("" if r["validated"] else " (not validated)"),
                       f"{r['kept']} ({r['candidates']}), {r['error_returned']:.3g}"
                       + (f"; {r['kept_by_reason']['budget']} of them undecided at the cap"
                          if r["kept_by_reason"].get("budget") else "")]
                      if r and "error" not in r else ["-", "-"])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(paths: list[str], doc: str) -> None:
    """Write the table of the result files ``paths`` between the markers of ``doc``."""
    results = []
    for path in paths:
        with open(path) as f:
            results.append(json.load(f))
    envs = "; ".join(f"{r.get('label')}: `{r.get('command', '')}` at {r['environment'].get('utc')}"
                     f" (load {r['environment'].get('loadavg')})" for r in results)
    table = markdown(results) + f"\n\nMeasured on {results[0]['environment'].get('cpu')}: {envs}."
    write_between_markers(doc, "auto_detectors", table)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="SSD-512 mobilenet1.0, float16 only")
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--dtypes", nargs="+", default=list(DTYPES))
    ap.add_argument("--label", default="this branch")
    ap.add_argument("--code", default=None, help="a folder holding the mxnet_amp package to run")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "auto_detectors.json"))
    ap.add_argument("--render", nargs="+", metavar="RESULT.json", default=None,
                    help="only write the table of these result files into docs/emulation_and_auto.md")
    ap.add_argument("--degenerate", action="store_true",
                    help="the first model with negative BatchNorm variances, --no-fold-bn "
                         "(issue 32): executions, seconds, peak RSS, or the typed error")
    args = ap.parse_args(argv)
    if args.render:
        render(args.render, os.path.join(ROOT, "docs", "emulation_and_auto.md"))
        return 0
    if args.degenerate:
        row = degenerate(args.models[0], args.dtypes[-1])
        print(json.dumps(row), flush=True)
        write_json(args.out, {"rows": [row], "environment": environment()})
        return 0
    if args.quick:
        args.models, args.dtypes = [MODELS[0]], ["float16"]
    import mxnet_amp
    print("mxnet_amp from", os.path.dirname(mxnet_amp.__file__), flush=True)
    rows = []
    for name in args.models:
        for dtype in args.dtypes:
            try:
                row = one(name, dtype)
            except Exception as err:  # noqa: BLE001 - recorded, the next model runs
                row = {"model": name, "dtype": dtype, "error": str(err).splitlines()[0][:300]}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "steps"}), flush=True)
            write_json(args.out, {"label": args.label, "rows": rows, "partial": True,
                                  "environment": environment()})
    write_json(args.out, {"label": args.label, "rows": rows, "environment": environment(),
                          "max_executions": MAX_EXECUTIONS})
    return 0


if __name__ == "__main__":
    sys.exit(main())
