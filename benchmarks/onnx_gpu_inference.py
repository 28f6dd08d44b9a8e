"""GPU inference of exported ONNX files: float32 against float16, on onnxruntime's CUDA or
TensorRT execution provider or on torch CUDA through onnx2torch.

The models, inputs and timing are benchmarks/gpu_inference.py's (the MXNet GPU script): the
same cases (``cpu_inference.build``: gluoncv zoo nets with calibrated BatchNorm on uniform
[-1, 1) images, the BERT-style encoder on random token ids), float16 converted by ours with
``cast_optional_params=True``, interleaved timing rounds (the order rotates each round),
throughput (median over rounds), latency per batch (median, 90th percentile) and the speedup
over float32 (median of per-round ratios). Each model is exported twice by
``mxnet_amp.export_onnx`` (dynamic batch): the float32 model and its float16 conversion.
Each output of the float16 file is judged against the float32 file on the same runtime
(``max|fp16 - fp32| / max|fp32|``). Files exported elsewhere run with ``--files FP32 FP16``.
A case MXNet's exporter cannot convert is recorded with its error (the BERT-style encoder of
``_common.bert_encoder``: MXNet's Reshape converter has no form for its ``-3``).

    python benchmarks/onnx_gpu_inference.py --runtime ort-cuda        # CUDA EP
    python benchmarks/onnx_gpu_inference.py --runtime ort-trt         # TensorRT EP (fp16 on)
    python benchmarks/onnx_gpu_inference.py --runtime torch-cuda      # onnx2torch, torch CUDA
    python benchmarks/onnx_gpu_inference.py --runtime ort-cpu --quick # CPU path (CI runs it)
    python benchmarks/onnx_gpu_inference.py --runtime ort-cuda --files m32.onnx m16.onnx \\
        --input-shape data:8x3x224x224

A GPU runtime that is not there (``onnxruntime-gpu`` without a GPU, no torch CUDA) is
refused at once with exit code 2, writing nothing. Not run on a GPU in this project (no
GPU was lent): the CPU path runs in the tests (tests/stories/test_benchmarks_smoke.py).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

REFUSAL_EXIT = 2
RUNTIMES = ("ort-cuda", "ort-trt", "torch-cuda", "ort-cpu")


def runtime_problem(runtime: str) -> str | None:
    """Why ``runtime`` cannot run here, or None when it can."""
    if runtime.startswith("ort-"):
        try:
            import onnxruntime as ort
        except ImportError as err:
            return f"onnxruntime is not importable ({err}); GPU: pip install onnxruntime-gpu"
        provider = {"ort-cuda": "CUDAExecutionProvider", "ort-trt": "TensorrtExecutionProvider",
                    "ort-cpu": "CPUExecutionProvider"}[runtime]
        if provider not in ort.get_available_providers():
            return (f"onnxruntime {ort.__version__} has no {provider} here (available: "
                    f"{', '.join(ort.get_available_providers())}); install onnxruntime-gpu on a GPU machine")
        return None
    try:
        import onnx2torch  # noqa: F401
        import torch
    except ImportError as err:
        return f"torch-cuda needs torch and onnx2torch ({err})"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device"
    return None


class Runner:
    """One ONNX file on one runtime: ``run(feed) -> list of numpy outputs`` (to completion)."""

    def __init__(self, path: str, runtime: str) -> None:
        self.runtime = runtime
        if runtime.startswith("ort-"):
            import onnxruntime as ort
            providers = {"ort-cuda": ["CUDAExecutionProvider"],
                         "ort-trt": [("TensorrtExecutionProvider", {"trt_fp16_enable": True}),
                                     "CUDAExecutionProvider"],
                         "ort-cpu": ["CPUExecutionProvider"]}[runtime]
            self.session = ort.InferenceSession(path, providers=providers)
            self.names = [o.name for o in self.session.get_outputs()]
            return
        import onnx
        import onnx2torch
        import torch
        self.module = onnx2torch.convert(onnx.load(path)).cuda().eval()
        self.torch = torch

    def run(self, feed: dict) -> list:
        if self.runtime.startswith("ort-"):
            return self.session.run(None, feed)
        torch = self.torch
        with torch.inference_mode():
            outs = self.module(*[torch.from_numpy(v).cuda() for v in feed.values()])
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
            torch.cuda.synchronize()
            return [o.float().cpu().numpy() for o in outs]


def export_pair(spec, folder: str) -> tuple[str, str, object]:
    """The case's float32 model and its float16 conversion, exported; and its data maker."""
    import mxnet_amp
    from cpu_inference import build
    sym, args, auxs, make_data = build(spec)
    shape = make_data(1).shape
    paths = []
    for dtype in (None, "float16"):
        model = (sym, args, auxs) if dtype is None else mxnet_amp.convert_model(
            sym, args, auxs, target_dtype=dtype, cast_optional_params=True)
        path = os.path.join(folder, f"{dtype or 'float32'}.onnx")
        mxnet_amp.export_onnx(*model, {"data": shape}, path, dynamic_batch=True)
        paths.append(path)
    return paths[0], paths[1], make_data


def run_case(label: str, fp32: str, fp16: str, feed: dict, runtime: str, rounds: int, per_round: int) -> dict:
    """Both files on ``runtime``: timing in interleaved rounds, the float16 outputs judged
    against the float32 ones."""
    import _common as C
    batch = next(iter(feed.values())).shape[0]
    row: dict = {"case": label, "runtime": runtime, "batch": batch, "rounds": rounds,
                 "batches_per_round": per_round, "variants": {}}
    runners = {"fp32": Runner(fp32, runtime), "fp16": Runner(fp16, runtime)}
    outs = {k: [np.asarray(o, dtype="float32") for o in r.run(feed)] for k, r in runners.items()}
    row["fp16_vs_fp32"] = [float(np.abs(a - b).max() / max(float(np.abs(b).max()), 1e-30))
                           for a, b in zip(outs["fp16"], outs["fp32"])]
    latencies: dict[str, list[float]] = {k: [] for k in runners}

    def timed(key):
        def one_round():
            for _ in range(per_round):
                t0 = time.perf_counter()
                runners[key].run(feed)
                latencies[key].append(time.perf_counter() - t0)
        return one_round
    times = C.interleaved_times({k: timed(k) for k in runners}, rounds, warmup=1)
    for key, ts in times.items():
        lat = np.array(latencies[key][per_round:])   # the warm-up round dropped
        row["variants"][key] = {
            "file_bytes": os.path.getsize(fp32 if key == "fp32" else fp16),
            "items_per_s": batch * per_round / C.median(ts),
            "latency_ms_median": 1e3 * float(np.median(lat)),
            "latency_ms_p90": 1e3 * float(np.percentile(lat, 90)),
            "speedup_over_fp32": C.paired_ratio(times["fp32"], ts)}
    return row


def _shape(text: str) -> tuple[str, tuple[int, ...]]:
    name, _, dims = text.partition(":")
    return name, tuple(int(d) for d in dims.split("x"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", choices=RUNTIMES, default="ort-cuda")
    ap.add_argument("--quick", action="store_true", help="gpu_inference.py's tiny cases, seconds")
    ap.add_argument("--files", nargs=2, metavar=("FP32", "FP16"), help="run these files instead")
    ap.add_argument("--input-shape", action="append", default=[], metavar="NAME:AxBx..",
                    help="with --files: each input's shape (uniform [-1, 1) float32 data)")
    ap.add_argument("--out", help="JSON path (default benchmarks/results/onnx_gpu_inference[_quick].json)")
    opts = ap.parse_args(argv)
    problem = runtime_problem(opts.runtime)
    if problem:
        print(f"onnx_gpu_inference: refusing to run: {problem}", file=sys.stderr)
        return REFUSAL_EXIT
    import _common as C
    from gpu_inference import FULL, QUICK
    from mxnet_amp.errors import AMPError
    rows = []
    if opts.files:
        shapes = dict(_shape(s) for s in opts.input_shape)
        rng = np.random.default_rng(1)
        feed = {k: rng.uniform(-1, 1, v).astype("float32") for k, v in shapes.items()}
        rows.append(run_case(os.path.basename(opts.files[1]), *opts.files, feed, opts.runtime, 5, 10))
    for label, spec, batch, rounds, per_round in ([] if opts.files else QUICK if opts.quick else FULL):
        with tempfile.TemporaryDirectory() as folder:
            try:
                fp32, fp16, make_data = export_pair(spec, folder)
            except AMPError as err:   # recorded: an op MXNet's exporter cannot convert
                rows.append({"case": label, "runtime": opts.runtime, "error": str(err)})
                print(f"{label}: not exported: {err}")
                continue
            feed = {"data": make_data(batch).asnumpy().astype("float32")}
            rows.append(run_case(label, fp32, fp16, feed, opts.runtime, rounds, per_round))
        _print(rows[-1:])
    out = opts.out or C.default_out("onnx_gpu_inference", opts.quick)
    C.write_json(out, {"benchmark": "onnx_gpu_inference", "runtime": opts.runtime,
                       "environment": C.environment(), "results": rows})
    print(f"wrote {out}")
    return 0


def _print(rows) -> None:
    import _common as C
    C.print_table(["case", "runtime", "variant", "items/s", "latency ms", "p90 ms", "x fp32", "fp16-fp32 err"],
                  [[r["case"], r["runtime"], key, v["items_per_s"], v["latency_ms_median"], v["latency_ms_p90"],
                    v["speedup_over_fp32"], max(r["fp16_vs_fp32"]) if key == "fp16" else None]
                   for r in rows for key, v in r.get("variants", {}).items()])


if __name__ == "__main__":
    raise SystemExit(main())
