"""Automatic mode judged by the task metric over the whole test set, on the trained zoo
(``benchmarks/trained_zoo.py``'s recipes, checkpoints from its cache or trained here).

For each recipe and dtype: the plain conversion's task metric on the test set (float16
emulated; bfloat16 native where this CPU runs it, else emulated), then
``auto_convert_model(eval_data=<test set in batches of 50>, metric=..., max_drop=0.01)``:
what it keeps, in how many runs, over how many samples. Where the plain conversion already
meets ``max_drop`` nothing should be kept. The metric: top-1 (``'acc'``) for the image
classifiers and the BERT-style encoder, per-pixel accuracy (``'acc'`` on the masks) for
Fast-SCNN, gluoncv's ``VOC07MApMetric`` (IoU 0.5, through ``metric_inputs``) for the SSD.

    python benchmarks/auto_zoo_data.py --models quick resnet18_v1
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

import _common as C

sys.path.insert(0, os.path.join(C._ROOT, "tests", "support"))
import zoo_trainers as zt  # noqa: E402
from trained_zoo import QUICK, RECIPES  # noqa: E402

MAX_DROP = 0.01
BATCH = 50


def task_metric(recipe, model):
    """``(eval batches, metric factory, metric_inputs or None)`` of ``recipe``'s task."""
    x = model.x_test
    if recipe.task == "boxes":
        from gluoncv.utils.metrics.voc_detection import VOC07MApMetric
        labels = model.y_test.astype(np.float32)       # (N, objects, 5): class, box

        def metric_inputs(gt, outputs):
            ids, scores, boxes = outputs[:3]
            return (boxes, ids, scores, gt[0].slice_axis(axis=-1, begin=1, end=5),
                    gt[0].slice_axis(axis=-1, begin=0, end=1))
        return _batches(x, labels), lambda: VOC07MApMetric(iou_thresh=0.5), metric_inputs
    import mxnet as mx
    # a segmentation net's label is its whole mask; a classifier's, one class per input
    y = (model.y_test if recipe.task == "masks"
         else model.y_test.reshape(len(x), -1)[:, 0]).astype(np.float32)
    return _batches(x, y), mx.metric.Accuracy, None


def _batches(x: np.ndarray, y: np.ndarray) -> list:
    return [(x[i:i + BATCH], y[i:i + BATCH]) for i in range(0, len(x), BATCH)]


def score(sym, args, auxs, data: list, metric, metric_inputs) -> float:
    """``metric`` (a fresh one) over ``data``, the model run batch by batch (CachedOp)."""
    import mxnet as mx
    metric = metric()
    for xb, yb in data:
        values = {**args, **auxs, "data": mx.nd.array(xb)}
        with mx.autograd.pause(train_mode=False):
            outs = mx.nd.CachedOp(sym)(*[values[n] for n in sym.list_inputs()])
        outs = [o.astype("float32") for o in (outs if isinstance(outs, (list, tuple)) else [outs])]
        labels = [mx.nd.array(yb)]
        metric.update(*(metric_inputs(labels, outs) if metric_inputs else (labels, outs[:1])))
    return float(np.ravel(metric.get()[1])[-1])


def row(recipe, cache_dir: str | None, dtype: str, workers: int) -> dict:
    from mxnet_amp import convert_model, emulate_model
    from mxnet_amp.auto import auto_convert_model
    from mxnet_amp.mx.hardware import bf16_runs_natively
    model = zt.train(recipe, cache_dir)
    execution = "native" if dtype == "bfloat16" and bf16_runs_natively() else "emulated"
    data, metric, metric_inputs = task_metric(recipe, model)
    fp32 = score(model.sym, model.arg_params, model.aux_params, data, metric, metric_inputs)
    low = convert_model(model.sym, model.arg_params, model.aux_params, target_dtype=dtype)
    plain = score(*(emulate_model(*low) if execution == "emulated" else low), data, metric, metric_inputs)
    start = time.perf_counter()
    _, _, _, report = auto_convert_model(
        model.sym, model.arg_params, model.aux_params, eval_data=data, target_dtype=dtype,
        execution=execution, metric=metric(), metric_inputs=metric_inputs, max_drop=MAX_DROP,
        workers=workers, quiet=True)
    return {"model": recipe.name, "task": recipe.task, "dtype": dtype, "execution": execution,
            "cached": model.cached, "fp32_top1": fp32, "plain_top1": plain,
            "plain_meets_max_drop": fp32 - plain <= MAX_DROP, "max_drop": MAX_DROP,
            "kept_fp32": report.excluded_sym_names, "executions": report.executions,
            "samples": report.samples, "batches": report.batches,
            "auto_metric": report.metric, "validated": report.validated,
            "seconds": round(time.perf_counter() - start, 1), "load": os.getloadavg()}


_METRIC_TEXT = {"digits": "top-1", "majority": "top-1", "masks": "pixel accuracy", "boxes": "VOC07 mAP"}


def render(rows: list) -> str:
    """The markdown table of the JSON lines: the last row of each model and dtype, in the
    order of the recipes."""
    last = {(r["model"], r["dtype"]): r for r in rows if "dtype" in r}
    order = [QUICK.name] + [r.name for r in RECIPES]
    lines = ["| model | dtype | metric | float32 | plain conversion | plain meets 0.01? | auto kept | "
             "auto runs | samples judged | validated | measured (load) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (model, dtype), r in sorted(last.items(), key=lambda kv: (order.index(kv[0][0])
                                                                  if kv[0][0] in order else len(order), kv[0][1])):
        metric = _METRIC_TEXT.get(r.get("task", "digits"), "?")
        lines.append(f"| {model} | {dtype} ({r['execution']}) | {metric} | {100 * r['fp32_top1']:.2f}% | "
                     f"{100 * r['plain_top1']:.2f}% | {'yes' if r['plain_meets_max_drop'] else '**no**'} | "
                     f"{len(r['kept_fp32'])} | {r['executions']} | {r['samples']} | "
                     f"{'yes' if r['validated'] else '**no**'} | {r['load'][0]:.0f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["quick"] + [r.name for r in RECIPES])
    ap.add_argument("--dtype", nargs="+", default=["float16", "bfloat16"])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--out", default=os.path.join(C._ROOT, "benchmarks", "results",
                                                  "auto_zoo_data.jsonl"))
    ap.add_argument("--render", action="store_true",
                    help="run nothing: docs/benchmarks.md's table from the JSON lines (--out)")
    a = ap.parse_args()
    if a.render:
        with open(a.out) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        C.write_between_markers(os.path.join(C._ROOT, "docs", "benchmarks.md"), "auto_zoo_data",
                                render(rows))
        return 0
    recipes = {r.name: r for r in RECIPES}
    recipes["quick"] = QUICK
    for name in a.models:
        recipe = recipes[name]
        for dtype in a.dtype:
            C.append_row(a.out, row(recipe, a.cache_dir, dtype, a.workers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
