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


def write_rec(path: str, count: int, seed: int = 0) -> None:
    """``count`` synthetic 224 px JPEGs (smooth noise) with labels ``i % 1000``."""
    import cv2
    import mxnet as mx
    import numpy as np
    rng = np.random.RandomState(seed)
    rec = mx.recordio.MXIndexedRecordIO(path + ".idx", path, "w")
    for i in range(count):
        small = rng.randint(0, 256, size=(14, 14, 3)).astype(np.uint8)
        img = cv2.resize(small, (SIZE, SIZE), interpolation=cv2.INTER_CUBIC)
        header = mx.recordio.IRHeader(0, float(i % 1000), i, 0)
        rec.write_idx(i, mx.recordio.pack_img(header, img, quality=90, img_fmt=".jpg"))
    rec.close()


def model(folder: str):
    """resnet50_v1 (random init, seed 0) as a checkpoint in ``folder`` (written once)."""
    import mxnet as mx
    from mxnet_amp.io import load_checkpoint, save_checkpoint
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


def record_iter(path: str):
    """The ``.rec``'s batches, exactly its records (``RecordBatches``: MXNet's
    ``ImageRecordIter`` fills a last partial batch up without reporting padding)."""
    from mxnet_amp.auto.batches import RecordBatches
    return RecordBatches(path, (3, SIZE, SIZE), BATCH, mean_r=123.68, mean_g=116.28,
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
    a = p.parse_args()
    os.makedirs(a.folder, exist_ok=True)
    if a.cell:
        dtype, n, w, mem = a.cell
        print(json.dumps(run_cell(a.folder, dtype, int(n), int(w), mem == "1")))
        return 0
    from mxnet_amp.hardware import bf16_runs_natively
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
