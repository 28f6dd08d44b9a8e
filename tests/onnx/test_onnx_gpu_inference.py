"""benchmarks/onnx_gpu_inference.py, the GPU inference script for exported files: its CPU
path (onnxruntime's CPU EP) runs here on gpu_inference.py's quick cases; a GPU runtime this
machine lacks is refused at once, nothing written. Its GPU paths are not run in this project."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ort = pytest.importorskip("onnxruntime", reason="onnxruntime, installed --no-deps (docs/onnx.md)")


def _run(tmp_path, *args):
    out = tmp_path / "gpu.json"
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, os.path.join("benchmarks", "onnx_gpu_inference.py"), *args,
                           "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return proc, out


def test_cpu_path_times_float32_against_float16_and_judges_the_outputs(tmp_path):
    proc, out = _run(tmp_path, "--runtime", "ort-cpu", "--quick")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    rows = {r["case"]: r for r in data["results"]}
    resnet = rows["resnet18_v1_64px_bs2"]
    assert resnet["runtime"] == "ort-cpu" and resnet["batch"] == 2
    fp32, fp16 = resnet["variants"]["fp32"], resnet["variants"]["fp16"]
    assert fp32["items_per_s"] > 0 and fp16["items_per_s"] > 0 and fp16["speedup_over_fp32"] > 0
    assert fp16["file_bytes"] < 0.6 * fp32["file_bytes"]            # float16 weights
    assert 0 < max(resnet["fp16_vs_fp32"]) < 0.01                   # two files, close outputs
    # the encoder's Reshape(-3) has no ONNX form in MXNet's converter: recorded, not fatal
    assert "Reshape" in rows["bert_encoder_1x32_seq8_bs2"]["error"]


def test_a_gpu_runtime_this_machine_lacks_is_refused_and_nothing_is_written(tmp_path):
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA EP: nothing to refuse")
    proc, out = _run(tmp_path, "--runtime", "ort-cuda", "--quick")
    assert proc.returncode == 2 and "refusing to run" in proc.stderr and "CUDAExecutionProvider" in proc.stderr
    assert not out.exists()
