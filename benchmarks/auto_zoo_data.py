"""Automatic mode judged by the task metric over the whole test set, on the trained zoo
(``benchmarks/trained_zoo.py``'s recipes, checkpoints from its cache or trained here).

For each classifier recipe and dtype: the plain conversion's top-1 drop on the test set
(float16 emulated; bfloat16 native where this CPU runs it, else emulated), then
``auto_convert_model(eval_data=<test set in batches of 50>, metric='acc', max_drop=0.01)``:
what it keeps, in how many runs, over how many samples. Where the plain conversion already
meets ``max_drop`` nothing should be kept.

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
import trained_models as tm  # noqa: E402
import zoo_trainers as zt  # noqa: E402
from trained_zoo import QUICK, RECIPES  # noqa: E402

MAX_DROP = 0.01
BATCH = 50


def plain_accuracy(model, dtype: str, execution: str) -> float:
    """Top-1 of the plain conversion (every op the lists allow in ``dtype``)."""
    from mxnet_amp import convert_model, emulate_model
    sym, args, auxs = convert_model(model.sym, model.arg_params, model.aux_params,
                                    target_dtype=dtype)
    if execution == "emulated":
        sym, args, auxs = emulate_model(sym, args, auxs)
    return tm.accuracy(zt.rows(tm.predict(sym, args, auxs, model.x_test)),
                       model.y_test.reshape(-1))


def row(recipe, cache_dir: str | None, dtype: str, workers: int) -> dict:
    from mxnet_amp.auto import auto_convert_model
    from mxnet_amp.hardware import bf16_runs_natively
    model = zt.train(recipe, cache_dir)
    execution = "native" if dtype == "bfloat16" and bf16_runs_natively() else "emulated"
    x, y = model.x_test, model.y_test.reshape(len(model.x_test), -1)[:, 0].astype(np.float32)
    fp32 = tm.accuracy(zt.rows(tm.predict(model.sym, model.arg_params, model.aux_params, x)),
                       y)
    plain = plain_accuracy(model, dtype, execution)
    start = time.perf_counter()
    _, _, _, report = auto_convert_model(
        model.sym, model.arg_params, model.aux_params,
        eval_data=[(x[i:i + BATCH], y[i:i + BATCH]) for i in range(0, len(x), BATCH)],
        target_dtype=dtype, execution=execution, metric="acc", max_drop=MAX_DROP,
        workers=workers, quiet=True)
    return {"model": recipe.name, "dtype": dtype, "execution": execution,
            "cached": model.cached, "fp32_top1": fp32, "plain_top1": plain,
            "plain_meets_max_drop": fp32 - plain <= MAX_DROP, "max_drop": MAX_DROP,
            "kept_fp32": report.excluded_sym_names, "executions": report.executions,
            "samples": report.samples, "batches": report.batches,
            "auto_metric": report.metric, "validated": report.validated,
            "seconds": round(time.perf_counter() - start, 1), "load": os.getloadavg()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["quick"] + [r.name for r in RECIPES])
    ap.add_argument("--dtype", nargs="+", default=["float16", "bfloat16"])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--out", default=os.path.join(C._ROOT, "benchmarks", "results",
                                                  "auto_zoo_data.jsonl"))
    a = ap.parse_args()
    recipes = {r.name: r for r in RECIPES}
    recipes["quick"] = QUICK
    for name in a.models:
        recipe = recipes[name]
        if recipe.task != "digits":
            print(json.dumps({"model": name, "skipped": f"task {recipe.task}: not a classifier"}))
            continue
        for dtype in a.dtype:
            result = row(recipe, a.cache_dir, dtype, a.workers)
            print(json.dumps(result), flush=True)
            with open(a.out, "a") as f:
                f.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
