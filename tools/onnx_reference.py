"""Run ONNX files in true float16 / bfloat16 arithmetic with onnx's ``ReferenceEvaluator``,
in an environment of its own, and probe what arithmetic a runtime does.

MXNet 1.9.1's exporter needs ``onnx.mapping`` (gone after onnx 1.14), so the project's
environment keeps onnx 1.14.1. onnx 1.23's ``onnx.reference.ReferenceEvaluator`` (numpy,
ml_dtypes) computes each float16 op in float16 and runs bfloat16 graphs, but lives in a
newer onnx: this file runs in either. Where onnx >= 1.23 is installed (a separate venv,
``python3 -m venv .venv-onnxref && .venv-onnxref/bin/pip install onnx==1.23.2 'numpy<2.5'``)
it is the command line; the project's side (tests, ``benchmarks/onnx_export.py``) imports it
for :func:`reference_outputs`, which runs it there as a subprocess on files exported here,
and for :func:`probe_model`, which it also runs in onnxruntime.

    .venv-onnxref/bin/python tools/onnx_reference.py run MODEL.onnx INPUTS.npz OUT.npz [OUTPUT...]
    .venv-onnxref/bin/python tools/onnx_reference.py probe float16      # JSON on stdout

The probe (:func:`probe_model`) is one graph whose float32 and low precision results differ
in known ways: ``between_ops`` is ``(1 + t) - 1`` with ``t`` a quarter of the dtype's step at
1 (0 where each op's result is rounded to the dtype, ``t`` where ops compute in float32 and
round only where a kernel ends in the dtype), ``matmul`` and ``conv`` sum ``S + 1 - S``
with ``S = 2 ** (mantissa bits + 1)`` (0 with an accumulator in the dtype, 1 with a float32
accumulator, as GPUs' tensor cores and cuDNN do).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ENV_VAR = "MXNET_AMP_ONNXREF_PYTHON"   # a python with onnx >= 1.23 (CI sets it: .ci/run)
MIN_ONNX = (1, 23)
# bits of the significand after the leading one
_MANTISSA = {"float16": 10, "bfloat16": 7}
_CODE = {"float16": 10, "bfloat16": 16}


def probe_model(dtype: str = "float16", opset: int = 13):
    """The probe graph (module docstring), float32 inputs cast to ``dtype`` inside."""
    from onnx import TensorProto, helper
    code = _CODE[dtype]
    inputs = {"x": [1, 3], "w": [3, 1], "xc": [1, 3, 1, 1], "wc": [1, 3, 1, 1], "one": [1], "t": [1]}
    nodes = [helper.make_node("Cast", [n], [f"{n}_low"], name=f"{n}_cast", to=code) for n in inputs]
    nodes += [helper.make_node("Add", ["one_low", "t_low"], ["sum"], name="add"),
              helper.make_node("Sub", ["sum", "one_low"], ["diff"], name="sub"),
              helper.make_node("MatMul", ["x_low", "w_low"], ["mm"], name="matmul"),
              helper.make_node("Conv", ["xc_low", "wc_low"], ["cv"], name="conv")]
    outs = {"between_ops": ("diff", [1]), "matmul": ("mm", [1, 1]), "conv": ("cv", [1, 1, 1, 1])}
    nodes += [helper.make_node("Cast", [t], [name], name=f"{name}_out", to=TensorProto.FLOAT)
              for name, (t, _) in outs.items()]
    graph = helper.make_graph(
        nodes, f"probe_{dtype}",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, (_, s) in outs.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             producer_name="mxnet-amp probe")


def probe_inputs(dtype: str = "float16") -> dict:
    """The probe's feed: ``S, 1, -S`` summed by MatMul and Conv; ``1`` and ``t``."""
    big = float(2 ** (_MANTISSA[dtype] + 1))
    row = np.array([big, 1.0, -big], "float32")
    return {"x": row.reshape(1, 3), "w": np.ones((3, 1), "float32"),
            "xc": row.reshape(1, 3, 1, 1), "wc": np.ones((1, 3, 1, 1), "float32"),
            "one": np.ones(1, "float32"), "t": np.array([2.0 ** -(_MANTISSA[dtype] + 2)], "float32")}


def probe_verdict(outputs: dict, dtype: str = "float16") -> dict:
    """What the probe's outputs say of a runtime's arithmetic (and the raw values)."""
    t = float(probe_inputs(dtype)["t"][0])
    between = float(np.asarray(outputs["between_ops"]).ravel()[0])

    def accumulator(v) -> str:
        v = float(np.asarray(v).ravel()[0])
        return dtype if v == 0.0 else "float32" if v == 1.0 else f"unclear ({v})"
    return {"dtype": dtype,
            "rounds_each_op": between == 0.0,
            "between_ops": ("each op's result rounded to " + dtype if between == 0.0 else
                            "float32 between ops" if between == t else f"unclear ({between})"),
            "matmul_accumulator": accumulator(outputs["matmul"]),
            "conv_accumulator": accumulator(outputs["conv"]),
            "values": {k: float(np.asarray(v).ravel()[0]) for k, v in outputs.items()}}


def evaluate(model_path: str, feed: dict, outputs=None) -> list:
    """Outputs of ``ReferenceEvaluator`` on the file (``outputs``: those names, in that order;
    default all, in the file's order), as float32 arrays (bfloat16 widened)."""
    import onnx
    from onnx.reference import ReferenceEvaluator
    model = onnx.load(model_path)
    outs = ReferenceEvaluator(model).run(list(outputs) if outputs else None, feed)
    return [np.asarray(o).astype("float32") for o in outs]


def _onnx_version_ok() -> bool:
    import onnx
    return tuple(int(p) for p in onnx.__version__.split(".")[:2]) >= MIN_ONNX


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("run", "probe"):
        print(__doc__, file=sys.stderr)
        return 2
    import onnx
    if not _onnx_version_ok():
        print(f"onnx_reference: onnx {onnx.__version__} here; the float16/bfloat16 reference needs "
              f"onnx >= {'.'.join(map(str, MIN_ONNX))} (a venv of its own: see this file)", file=sys.stderr)
        return 2
    if args[0] == "probe":
        dtype = args[1] if len(args) > 1 else "float16"
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "probe.onnx")
            onnx.save(probe_model(dtype), path)
            outs = evaluate(path, probe_inputs(dtype))
        names = [o.name for o in probe_model(dtype).graph.output]
        print(json.dumps({"onnx": onnx.__version__, **probe_verdict(dict(zip(names, outs)), dtype)}))
        return 0
    model_path, inputs_path, out_path, *names = args[1:]
    with np.load(inputs_path) as data:
        feed = {k: data[k] for k in data.files}
    outs = evaluate(model_path, feed, names)
    np.savez(out_path, *outs)
    return 0


def reference_python() -> str | None:
    """The interpreter named by :data:`ENV_VAR`, or None where it is not set."""
    return os.environ.get(ENV_VAR) or None


def reference_outputs(model_path: str, feed: dict, python: str, timeout: float = 1800, outputs=()) -> list:
    """Run ``model_path`` on ``feed`` in ``ReferenceEvaluator`` under ``python`` (a venv with
    onnx >= 1.23): a subprocess, from files (the model as exported here; inputs and outputs
    as .npz). ``outputs``: the names wanted, in that order (an export's ``symbol_outputs``:
    MXNet's order); default all, in the file's order. Raises ``RuntimeError`` with the
    child's error text when it fails."""
    with tempfile.TemporaryDirectory() as folder:
        inputs, out = os.path.join(folder, "in.npz"), os.path.join(folder, "out.npz")
        np.savez(inputs, **feed)
        proc = subprocess.run([python, os.path.abspath(__file__), "run", os.fspath(model_path), inputs, out,
                               *outputs],
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"ReferenceEvaluator under {python} failed on {model_path}:\n{proc.stderr[-3000:]}")
        with np.load(out) as data:
            return [data[f"arr_{k}"] for k in range(len(data.files))]


def reference_probe(python: str, dtype: str = "float16") -> dict:
    """:func:`probe_verdict` of ``ReferenceEvaluator`` under ``python`` (a subprocess)."""
    proc = subprocess.run([python, os.path.abspath(__file__), "probe", dtype], capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"the probe under {python} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def onnxruntime_probe(dtype: str = "float16") -> dict:
    """:func:`probe_verdict` of onnxruntime's CPU execution provider (in this process)."""
    import onnxruntime as ort
    sess = ort.InferenceSession(probe_model(dtype).SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return {"onnxruntime": ort.__version__, **probe_verdict(dict(zip(names, sess.run(None, probe_inputs(dtype)))), dtype)}


if __name__ == "__main__":
    raise SystemExit(main())
