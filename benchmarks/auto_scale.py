"""Automatic mode on evaluation data of any size: memory, time per sample and workers.

resnet50_v1 (gluon model zoo, random init with a fixed seed) at 224 px, judged by top-1
accuracy (``metric='acc'``, ``max_drop=0.01``) on N images streamed from a ``.rec`` this
script writes (``mx.recordio``: synthetic smooth-noise JPEGs, labels ``i % 1000``: the
labels only exercise the metric; the model is random, so both models score ~0).
Each cell (dtype, N, workers) runs in its own process, so its peak RSS is its own: the
parent's ``ru_maxrss`` and the largest worker's (``RUSAGE_CHILDREN``).

    python benchmarks/auto_scale.py --sizes 256,2048 --workers 1,2 --dtype float16
    python benchmarks/auto_scale.py --sizes 256 --in-memory      # decisions vs in memory

Results append to ``--out`` (JSON lines): one line per cell.

``--planted`` (issue 41): the same resnet50_v1 with two planted culprits
(``benchmarks/planted_resnet.py``: an overflow one and an accuracy one), its BatchNorms
calibrated, labelled with the float32 model's own top-1 (a pass of its own, before the run
and not counted in it), searched in float16 (emulated) over the ``.rec`` streamed: whether
the kept set is exactly the two culprits, and the samples run through a model in all
(``report.sample_evaluations``, every pass over the data counted) against ``3.5 N``.
Rows go to ``benchmarks/results/auto_scale_planted.json`` (one per N, the latest kept).

    python benchmarks/auto_scale.py --planted --sizes 256 --max-drop 0.02
    python benchmarks/auto_scale.py --planted --quick      # 64 images at 64 px (smoke test)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import _common as C  # noqa: E402  (benchmarks/ is the script's folder)

SIZE = 224
BATCH = 32
PLANTED_OUT = os.path.join(_ROOT, "benchmarks", "results", "auto_scale_planted.json")


def write_rec(path: str, count: int, seed: int = 0, size: int = SIZE) -> None:
    """``count`` synthetic ``size`` px JPEGs (smooth noise) with labels ``i % 1000``."""
    import cv2
    import mxnet as mx
    import numpy as np
    rng = np.random.RandomState(seed)
    rec = mx.recordio.MXIndexedRecordIO(path + ".idx", path, "w")
    for i in range(count):
        small = rng.randint(0, 256, size=(14, 14, 3)).astype(np.uint8)
        img = cv2.resize(small, (size, size), interpolation=cv2.INTER_CUBIC)
        header = mx.recordio.IRHeader(0, float(i % 1000), i, 0)
        rec.write_idx(i, mx.recordio.pack_img(header, img, quality=90, img_fmt=".jpg"))
    rec.close()


def model(folder: str):
    """resnet50_v1 (random init, seed 0) as a checkpoint in ``folder`` (written once)."""
    import mxnet as mx
    from mxnet_amp.mx.io import load_checkpoint, save_checkpoint
    prefix = os.path.join(folder, "resnet50_v1")
    if not os.path.exists(prefix + "-symbol.json"):
        from mxnet.gluon.model_zoo import vision

        from mxnet_amp.gluon.model import block_model
        mx.random.seed(0)
        net = vision.resnet50_v1(pretrained=False)
        net.initialize(mx.init.Xavier())
        net.hybridize()
        net(mx.nd.zeros((1, 3, SIZE, SIZE)))
        sym, args, auxs, _ = block_model(net, ["data"])
        save_checkpoint(prefix, 0, sym, args, auxs, progress=None)
    return load_checkpoint(prefix, 0, progress=None)


def record_iter(path: str, size: int = SIZE):
    """The ``.rec``'s batches, exactly its records (``RecordBatches``: MXNet's
    ``ImageRecordIter`` fills a last partial batch up without reporting padding)."""
    from mxnet_amp.auto.batches import RecordBatches
    return RecordBatches(path, (3, size, size), BATCH, mean_r=123.68, mean_g=116.28,
                         mean_b=103.53, std_r=58.395, std_g=57.12, std_b=57.375,
                         preprocess_threads=1)


def run_cell(folder: str, dtype: str, count: int, workers: int, in_memory: bool) -> dict:
    """One auto run over ``count`` images; its figures."""
    import numpy as np

    from mxnet_amp.auto import auto_convert_model
    rec = os.path.join(folder, f"images{count}.rec")
    if not os.path.exists(rec):
        write_rec(rec, count)
    sym, args, auxs = model(folder)
    execution = "emulated" if dtype == "float16" else "native"
    load_before = os.getloadavg()
    start = time.perf_counter()
    if in_memory:   # the same images held in memory, one list of batches, one worker
        batches = list(record_iter(rec))
        x = np.concatenate([b[0] for b in batches])
        y = np.concatenate([b[1] for b in batches])
        _, _, _, report = auto_convert_model(
            sym, args, auxs, eval_data=[(x[i:i + BATCH], y[i:i + BATCH])
                                        for i in range(0, len(x), BATCH)],
            target_dtype=dtype, execution=execution, metric="acc", max_drop=0.01,
            workers=workers, quiet=True)
        del x, y, batches
    else:
        _, _, _, report = auto_convert_model(
            sym, args, auxs, eval_data=record_iter(rec), target_dtype=dtype,
            execution=execution, metric="acc", max_drop=0.01, workers=workers, quiet=True)
    wall = time.perf_counter() - start
    return {"dtype": dtype, "execution": execution, "samples": count, "workers": workers,
            "in_memory": in_memory, "wall_s": round(wall, 2),
            "s_per_sample": round(wall / count, 4),
            "pass_seconds": list(report.pass_seconds),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            "peak_worker_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024,
            "kept_fp32": report.excluded_sym_names, "executions": report.executions,
            "validated": report.validated, "metric": report.metric,
            "judged_samples": report.samples, "batches": report.batches,
            "load_before": load_before, "load_after": os.getloadavg()}


def _planted(folder: str, count: int, size: int):
    """The planted model (deterministic: built again in each process) and its raw ``.rec``."""
    import planted_resnet as P
    raw = os.path.join(folder, f"images{count}-{size}px.rec")
    if not os.path.exists(raw):
        write_rec(raw, count, size=size)
    calibration = next(iter(record_iter(raw, size)))[0][:16]   # the set's first 16 images
    return P.build(calibration), raw


def _digest(args: dict) -> str:
    import hashlib
    h = hashlib.md5()
    for k in sorted(args):
        h.update(k.encode() + args[k].asnumpy().tobytes())
    return h.hexdigest()[:12]


def label_planted(folder: str, count: int, size: int) -> dict:
    """The planted model's float32 top-1 as each record's label (a ``.rec`` named after the
    model's digest: a changed model is labelled again); the labelling pass's figures."""
    import numpy as np

    import planted_resnet as P
    planted, raw = _planted(folder, count, size)
    rec = os.path.join(folder, f"planted{count}-{size}px-{_digest(planted.args)}.rec")
    start = time.perf_counter()
    if not os.path.exists(rec):
        labels = P.top1(planted.sym, planted.args, planted.auxs,
                        (x for x, _ in record_iter(raw, size)))
        P.label_rec(raw, rec + ".tmp", labels)
        os.replace(rec + ".tmp.idx", rec + ".idx")
        os.replace(rec + ".tmp", rec)
    labels = np.concatenate([y for _, y in record_iter(rec, size)])
    return {"rec": rec, "label_seconds": round(time.perf_counter() - start, 2),
            "classes": int(len(set(labels.astype(int).tolist())))}


def planted_cell(folder: str, rec: str, count: int, size: int, workers: int,
                 max_drop: float) -> dict:
    """``auto_convert_model`` on the planted model over the labelled ``rec``: its figures."""
    from mxnet_amp.auto import auto_convert_model
    planted, _ = _planted(folder, count, size)
    load_before = os.getloadavg()
    start = time.perf_counter()
    _, _, _, report = auto_convert_model(
        planted.sym, planted.args, planted.auxs, eval_data=record_iter(rec, size),
        target_dtype="float16", execution="emulated", metric="acc", max_drop=max_drop,
        workers=workers, quiet=True)
    wall = time.perf_counter() - start
    kept = sorted(report.excluded_sym_names)
    evaluations = report.sample_evaluations
    return {"samples": count, "image_px": size, "workers": workers, "max_drop": max_drop,
            "planted": {"overflow": planted.overflow, "accuracy": planted.accuracy},
            "kept_fp32": [{"name": k.name, "reason": k.reason} for k in report.kept_fp32],
            "exact": kept == planted.culprits, "validated": report.validated,
            "executions": report.executions, "minimality": report.minimality,
            "sample_evaluations": evaluations,
            "evaluations_per_sample": round(evaluations / count, 4) if evaluations else None,
            "within_3_5_n": bool(evaluations is not None and evaluations <= 3.5 * count),
            "attribution_samples": report.attribution_samples, "metric": report.metric,
            "steps": [st.to_dict() for st in report.steps],
            "pass_seconds": list(report.pass_seconds), "wall_s": round(wall, 2),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            "peak_worker_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024,
            "load_before": load_before, "load_after": os.getloadavg(),
            "summary": report.summary()}


def _child(*argv: str) -> dict:
    """This script in a process of its own (its peak RSS its own); its last stdout line."""
    out = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_planted(a: argparse.Namespace) -> int:
    """Each size: label, then the auto run, each in its own process; rows into ``a.out``."""
    size = 64 if a.quick else SIZE
    sizes = [64] if a.quick else [int(n) for n in a.sizes.split(",")]
    workers = a.workers.split(",")[-1]
    rows = []
    if os.path.exists(a.out) and not a.quick:
        with open(a.out) as f:
            rows = [r for r in json.load(f)["rows"] if r["samples"] not in sizes]
    for n in sizes:
        labelled = _child("--folder", a.folder, "--label", str(n), str(size))
        row = _child("--folder", a.folder, "--planted-cell", labelled["rec"], str(n), str(size),
                     workers, str(a.max_drop))
        row.update(label_seconds=labelled["label_seconds"], label_classes=labelled["classes"],
                   utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), machine=machine())
        print(json.dumps({k: row[k] for k in ("samples", "exact", "executions",
                                             "evaluations_per_sample", "wall_s")}), flush=True)
        rows.append(row)
        C.write_json(a.out, {"environment": C.environment(),
                             "rows": sorted(rows, key=lambda r: r["samples"])})
    return 0


def machine() -> dict:
    flags = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model_name = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = line
                break
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
    return {"cpu": model_name, "cores": os.cpu_count(),
            "flags": [f for f in wanted if f" {f}" in flags], "python": platform.python_version()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="256,2048,10000")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--dtype", default="float16,bfloat16")
    p.add_argument("--in-memory", action="store_true",
                   help="also run each size with the images held in memory (decisions compared)")
    p.add_argument("--folder", default="/tmp/mxnet-amp-auto-scale")
    p.add_argument("--out", default=os.path.join(_ROOT, "benchmarks", "results", "auto_scale.jsonl"))
    p.add_argument("--cell", nargs=4, metavar=("DTYPE", "N", "WORKERS", "IN_MEMORY"),
                   help=argparse.SUPPRESS)
    p.add_argument("--planted", action="store_true",
                   help="the planted resnet50_v1 (two culprits), float16; rows to --out "
                        "(default benchmarks/results/auto_scale_planted.json)")
    p.add_argument("--max-drop", type=float, default=0.02, help="--planted: the allowed top-1 drop")
    p.add_argument("--quick", action="store_true", help="--planted: 64 images at 64 px")
    p.add_argument("--label", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("--planted-cell", nargs=5, help=argparse.SUPPRESS)
    a = p.parse_args()
    os.makedirs(a.folder, exist_ok=True)
    if a.label:
        print(json.dumps(label_planted(a.folder, int(a.label[0]), int(a.label[1]))))
        return 0
    if a.planted_cell:
        rec, n, size, w, drop = a.planted_cell
        print(json.dumps(planted_cell(a.folder, rec, int(n), int(size), int(w), float(drop))))
        return 0
    if a.planted:
        if a.out == p.get_default("out"):
            a.out = PLANTED_OUT
        return run_planted(a)
    if a.cell:
        dtype, n, w, mem = a.cell
        print(json.dumps(run_cell(a.folder, dtype, int(n), int(w), mem == "1")))
        return 0
    from mxnet_amp.mx.hardware import bf16_runs_natively
    dtypes = [d for d in a.dtype.split(",") if d != "bfloat16" or bf16_runs_natively()]
    for dtype in dtypes:
        for n in (int(s) for s in a.sizes.split(",")):
            cells = [(w, "0") for w in a.workers.split(",")]
            if a.in_memory:
                cells.append((a.workers.split(",")[0], "1"))
            for w, mem in cells:
                out = subprocess.run([sys.executable, __file__, "--folder", a.folder, "--cell",
                                      dtype, str(n), w, mem], capture_output=True, text=True)
                if out.returncode:
                    print(out.stderr[-3000:], file=sys.stderr)
                    return 1
                row = json.loads(out.stdout.strip().splitlines()[-1])
                row.update(machine=machine(),
                           utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
                C.append_row(a.out, row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
