"""Float16 models exported to ONNX and run in onnxruntime (CPU EP), judged against MXNet fp32.

Each model is built as the other CPU benchmarks build it (gluoncv, ``pretrained=False``,
random He init with BatchNorm statistics calibrated on a random batch, as
benchmarks/cpu_inference.py and tools/zoo_sweep do; BERT: gluonnlp 0.10's
``bert_12_768_12``, random Normal(0.02) weights, as benchmarks/nlp_inference.py), converted
to float16 by ``mxnet_amp.convert_model`` (defaults: BatchNorms folded, weights stored in
float16), exported by ``mxnet_amp.export_onnx`` (opset 13) and run in onnxruntime's CPU
execution provider, which runs these graphs (computing in float32 where it has no float16
kernel: :func:`_cpu_ep_model`). MXNet cannot run float16 on a CPU, so the reference is the
float32 model in MXNet and the judge of float16 arithmetic is ``mxnet_amp.emulate_model``
(float32 runs with every low precision tensor rounded). ``ssd_digits`` is the SSD
benchmarks/trained_zoo.py trains on its digit box task (trained weights, where the
random-weight SSD is ill-conditioned), judged on its pre-NMS tensors. Per output, with ``err(x) = max|x - fp32| / max|fp32|``:

  * ``onnx_err``: the exported model in onnxruntime;
  * ``emulate_err``: our emulation of the same conversion;
  * the criterion ``onnx_err <= 1.5 * emulate_err + 0.005``;
  * ``onnx_vs_emulate``: ``max|onnx - emulate| / max|fp32|``;
  * ``fp32_onnx_err``: the float32 model exported the same way, in onnxruntime: what the
    export itself changes;
  * ``cpu_ep_model_err``: the model of what onnxruntime's CPU EP computes from a float16
    file (:func:`_cpu_ep_model`: float16 weights, float32 arithmetic: it drops the float16
    rounding between ops), and ``onnx_vs_cpu_ep_model``, the export's distance to it;
    ``matches_cpu_ep_model``: that distance <= 0.005 on each judged output, the check that
    the file computes what the conversion decided, on the arithmetic this runtime does.

In true low precision arithmetic (``--reference-python``, default ``$MXNET_AMP_ONNXREF_PYTHON``:
a python with onnx >= 1.23, tools/onnx_reference.py runs each file in its ReferenceEvaluator,
which rounds each op to float16 / bfloat16 and accumulates MatMul and Conv in float32):

  * ``reference_err``: the float16 export there, and ``within_reference``: it is <= 1.5 x
    ``emulate_err`` + 0.005 on each judged output (the acceptance criterion; the runtime the
    criterion means, where onnxruntime computes float32 between ops);
  * ``bfloat16``: the bfloat16 conversion's ``emulate_err``, ``reference_err`` and
    ``within_reference``, and what onnxruntime's CPU EP says of it (no bfloat16 kernels);
  * ``torch_err``: the float16 file on torch's CPU through onnx2torch, where installed;
  * ``environment.probes``: tools/onnx_reference.py's probe graph on each runtime (whether it
    rounds between ops, which accumulator MatMul and Conv use);
  * ``acceptance``: the row is one of the issue's (``ACCEPTANCE``; the random-weight SSD is
    measured, not judged: ill-conditioned).

Also recorded: conversion and export wall time, ONNX file sizes, ``Cast`` nodes, and any op
the exporter refuses (the typed error's node list). The environment (CPU, flags, load
average at start and end) goes with the results (benchmarks/results/onnx_export.json).

    python benchmarks/onnx_export.py --batch 1 --models resnet50_v1 mobilenetv2_1.0 densenet121 \
        bert_12_768_12                          # the acceptance rows, one input each
    python benchmarks/onnx_export.py --render-true JSON   # docs/onnx.md's true fp16/bf16 table

    python benchmarks/onnx_export.py            # the seven models (~15 min on 2 loaded cores)
    python benchmarks/onnx_export.py --quick    # resnet18_v1 at 64 px and a 2-layer BERT
    python benchmarks/onnx_export.py --models resnet50_v1 bert_12_768_12
    python benchmarks/onnx_export.py --render   # docs/benchmarks.md's table from the JSON
    python benchmarks/onnx_export.py --render-trained benchmarks/results/trained_zoo_onnx*.json
                                                # docs/onnx.md's trained zoo table

Needs the ``onnx`` extra and onnxruntime (installed ``--no-deps`` beside numpy 1.23.5:
docs/onnx.md); BERT needs the ``nlp`` extra.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import _common as C

FULL = ["resnet50_v1", "mobilenetv2_1.0", "inceptionv3", "densenet121",
        "ssd_512_mobilenet1.0_voc", "ssd_digits", "bert_12_768_12"]
# the acceptance rows; the random-weight SSD is measured but not judged: it is
# ill-conditioned (float16 weights alone move its class probabilities by 0.19; docs/onnx.md)
ACCEPTANCE = frozenset({"resnet50_v1", "mobilenetv2_1.0", "densenet121", "bert_12_768_12", "ssd_digits",
                        "ssd_digits_small"})
QUICK = ["resnet18_v1@64", "bert_2x64"]
BERT_QUICK = dict(num_layers=2, units=64, hidden_size=128, num_heads=4, max_length=32, embed_size=64)


def _detector(name: str):
    """A detector as the zoo sweep builds and judges it (tools/zoo_sweep: BatchNorm
    calibrated, graph BatchNorms too; judged on the dense tensors before box decoding and
    NMS, exposed as extra outputs, as a score ordering flip after NMS is no error)."""
    model = C.load_tool("zoo_sweep").sweep._Model(name, "calibrated")
    model.export()
    x = model.x.asnumpy() if hasattr(model.x, "asnumpy") else np.asarray(model.x)
    shape = "x".join(map(str, x.shape))
    return (model.probe(model.sym), model.args, model.auxs, {"data": x.astype("float32")},
            f"gluoncv {name} as the zoo sweep builds it (calibrated BN), {shape}, judged on "
            f"{len(model.checked)} dense tensors before NMS", list(model.checked))


def _trained_detector(canvases: int = 32, small: bool = False):
    """``ssd_digits``, the detector benchmarks/trained_zoo.py trains (from its cache; trained
    there first where it is missing), judged on its pre-NMS tensors over the first
    ``canvases`` test canvases: trained weights, where the random-weight SSD above is
    ill-conditioned (weight rounding alone moves its class probabilities by 0.19)."""
    import trained_zoo as tz   # beside this script; it puts tests/ on sys.path
    import zoo_detection as zd
    import zoo_trainers as zt
    recipe = next(r for r in tz.RECIPES if r.name == "ssd_digits")
    if small:   # ~20 s on one free core: mobilenet0.25, 2 copies x 6 epochs (hit rate lower)
        import dataclasses
        recipe = dataclasses.replace(recipe, name="ssd_digits_small", copies=2, epochs=6,
                                     kwargs={"size": 64, "base": "mobilenet0.25"})
    model = zt.train(recipe)
    entries = zd.pre_nms_entries(model.sym)
    heads = len(model.sym.list_outputs())
    x = np.ascontiguousarray(model.x_test[:canvases], dtype="float32")
    return (zd.probe(model.sym, entries), model.arg_params, model.aux_params, {"data": x},
            f"{recipe.name} trained (benchmarks/trained_zoo.py's recipe{', made smaller' if small else ''}; "
            f"fp32 train accuracy {model.train_accuracy:.2f}), {'x'.join(map(str, x.shape))}, judged on its "
            f"{len(entries)} pre-NMS tensors", list(range(heads, heads + len(entries))))


def _model(spec: str):
    """``(sym, args, auxs, inputs: dict name -> numpy, label, judged outputs or None)``."""
    import mxnet as mx
    if spec in ("ssd_digits", "ssd_digits_small"):
        return _trained_detector(small=spec == "ssd_digits_small")
    if spec.startswith("ssd"):
        return _detector(spec)
    if spec.startswith("bert"):
        import gluonnlp as nlp
        hparams = BERT_QUICK if spec == "bert_2x64" else {}
        seq, batch = (8, 2) if hparams else (128, 2)
        vocab = nlp.vocab.BERTVocab(nlp.data.count_tokens([f"w{i}" for i in range(8000)]))
        mx.random.seed(0)
        net, _ = nlp.model.get_model("bert_12_768_12", dataset_name=None, vocab=vocab,
                                     pretrained=False, use_decoder=False, use_classifier=False,
                                     hparam_allow_override=bool(hparams), **hparams)
        net.initialize(mx.init.Normal(0.02))
        net.hybridize()
        rng = np.random.default_rng(0)
        arrays = [rng.integers(0, len(vocab), (batch, seq)).astype("float32"),
                  np.zeros((batch, seq), "float32"), np.full((batch,), seq - 2, "float32")]
        net(*[mx.nd.array(a) for a in arrays])
        sym, args, auxs = C.block_checkpoint(net)
        names = [n for n in sym.list_inputs() if n not in args and n not in auxs]
        label = f"gluonnlp bert_12_768_12{' 2x64' if hparams else ''}, seq {seq}, batch {batch}"
        return sym, args, auxs, dict(zip(names, arrays)), label, None
    name, _, size = spec.partition("@")
    size = int(size) if size else C.zoo_input_size(name)
    sym, args, auxs = C.zoo_checkpoint(name, size, calibrate=True)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, size, size)).astype("float32")
    return sym, args, auxs, {"data": x}, f"gluoncv {name} (calibrated BN), {size}px, batch 2", None


def _mxnet_run(sym, args, auxs, inputs):
    import mxnet as mx
    feed = {k: mx.nd.array(v) for k, v in inputs.items()}
    ex = sym.bind(mx.cpu(), {**args, **feed}, aux_states=auxs, grad_req="null")
    return [o.astype("float32").asnumpy() for o in ex.forward(is_train=False)]


def _errors(outs, ref):
    """Per output ``max|out - ref| / max|ref|`` (float outputs)."""
    return [float(np.abs(o.astype("float32") - r).max() / max(float(np.abs(r).max()), 1e-30))
            for o, r in zip(outs, ref)]


def measure(spec: str, folder: str, reference: str | None = None, batch: int | None = None) -> dict:
    import mxnet_amp
    from mxnet_amp.errors import AMPError
    sym, args, auxs, inputs, label, judged = _model(spec)
    if batch:
        inputs = {k: v[:batch] for k, v in inputs.items()}
        label += f" (first {batch} of the batch)"
    row: dict = {"model": spec, "what": label}
    t0 = time.perf_counter()
    s16, a16, x16 = mxnet_amp.convert_model(sym, args, auxs, target_dtype="float16")
    row["convert_s"] = time.perf_counter() - t0
    path = os.path.join(folder, spec.replace("@", "_") + ".onnx")
    try:
        rec = mxnet_amp.export_onnx(s16, a16, x16, {k: v.shape for k, v in inputs.items()}, path)
    except AMPError as err:
        row["not_exported"] = [list(n) for n in getattr(err, "nodes", [])] or str(err)
        return row
    row.update(export_s=rec.seconds, onnx_bytes=rec.model_bytes, data_bytes=rec.data_bytes,
               cast_nodes=rec.cast_nodes, amp_casts=rec.amp_casts, opset=rec.opset,
               outputs=list(rec.symbol_outputs), file_outputs=list(rec.outputs),
               params_fp32_bytes=_nbytes(args, auxs))
    ref = _mxnet_run(sym, args, auxs, inputs)
    emu = _mxnet_run(*mxnet_amp.emulate_model(s16, a16, x16), inputs)
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    t0 = time.perf_counter()
    names = list(rec.symbol_outputs)   # MXNet's order (the file's is mx.onnx's)
    got = sess.run(names, inputs)
    row["ort_run_s"] = time.perf_counter() - t0
    row["onnx_err"], row["emulate_err"] = _errors(got, ref), _errors(emu, ref)
    row["onnx_vs_emulate"] = _distances(got, emu, ref)
    # what onnxruntime's CPU EP computes from this file: float16 weights, float32 arithmetic
    cpu = _mxnet_run(*_cpu_ep_model(s16, a16, x16), inputs)
    row["cpu_ep_model_err"], row["onnx_vs_cpu_ep_model"] = _errors(cpu, ref), _distances(got, cpu, ref)
    row["output_dtypes"] = [str(g.dtype) for g in got]
    # true float16 arithmetic: ReferenceEvaluator (onnx >= 1.23, its own venv) and torch
    row.update(_true_low(path, inputs, ref, reference, "reference", names))
    row.update(_torch(path, inputs, ref, [list(rec.outputs).index(n) for n in names]))
    # the float32 model through the same exporter: what the export itself changes
    path32 = os.path.join(folder, spec.replace("@", "_") + "_fp32.onnx")
    rec32 = mxnet_amp.export_onnx(sym, args, auxs, {k: v.shape for k, v in inputs.items()}, path32)
    got32 = ort.InferenceSession(path32, providers=["CPUExecutionProvider"]).run(list(rec32.symbol_outputs), inputs)
    row["fp32_onnx_err"] = _errors(got32, ref)
    os.unlink(path32)
    row["bfloat16"] = _bfloat16(sym, args, auxs, inputs, folder, spec, ref, reference)
    judged = range(len(got)) if judged is None else judged
    row["judged_outputs"] = list(judged)
    row["within"] = _within(row["onnx_err"], row["emulate_err"], judged)
    row["within_reference"] = _within(row.get("reference_err"), row["emulate_err"], judged)
    row["within_torch"] = _within(row.get("torch_err"), row["emulate_err"], judged)
    row["bfloat16"]["within_reference"] = _within(row["bfloat16"].get("reference_err"),
                                                  row["bfloat16"].get("emulate_err"), judged)
    row["matches_cpu_ep_model"] = all(row["onnx_vs_cpu_ep_model"][k] <= 0.005 for k in judged)
    row["acceptance"] = spec in ACCEPTANCE
    return row


def _within(errs, emulated, judged):
    """``errs <= 1.5 x emulated + 0.005`` on each judged output; None where not measured."""
    if errs is None or emulated is None:
        return None
    return all(errs[k] <= 1.5 * emulated[k] + 0.005 for k in judged)


def _true_low(path: str, inputs: dict, ref, python, key: str, names) -> dict:
    """``{key}_err`` (per output) and ``{key}_s`` of the file in ReferenceEvaluator under
    ``python`` (tools/onnx_reference.py; a subprocess in the onnx >= 1.23 venv); nothing
    where no such python is given."""
    if python is None:
        return {}
    t0 = time.perf_counter()
    try:
        got = C.load_tool("onnx_reference").reference_outputs(path, inputs, python, timeout=3 * 3600,
                                                              outputs=names)
    except Exception as err:  # noqa: BLE001  (recorded with the model)
        return {f"{key}_error": str(err)[-600:]}
    return {f"{key}_err": _errors(got, ref), f"{key}_s": time.perf_counter() - t0}


def _torch(path: str, inputs: dict, ref, order) -> dict:
    """The file on torch's CPU through onnx2torch (float16 ops in float16), where installed;
    ``order``: the file's output positions in MXNet's order."""
    try:
        import onnx
        import onnx2torch
        import torch
    except ImportError as err:
        return {"torch_error": f"not installed ({err})"}
    try:
        module = onnx2torch.convert(onnx.load(path)).eval()
        with torch.inference_mode():
            outs = module(*[torch.from_numpy(v) for v in inputs.values()])
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        return {"torch_err": _errors([outs[k].float().numpy() for k in order], ref), "torch": torch.__version__}
    except Exception as err:  # noqa: BLE001  (recorded: onnx2torch refuses some ops, bf16 casts)
        return {"torch_error": f"{type(err).__name__}: {str(err)[:300]}"}


def _cpu_ep_model(sym16, args16, auxs16):
    """The float32 model that computes what onnxruntime's CPU EP computes from a float16
    export: the converted graph without its casts, its float16 weights read as float32.

    The CPU EP has no float16 kernel for most ops (Conv, Relu, Gemm, ... on x86): it puts a
    ``Cast`` to float32 before each such node and one back after, then its
    ``RemoveDuplicateCastTransformer`` (onnxruntime/core/optimizer/insert_cast_transformer.cc)
    deletes every float32 -> float16 -> float32 pair, the model's own casts included, since
    it ranks both dtypes in one 'float' group and so sees no loss of precision
    (microsoft/onnxruntime#8787; it happens with every graph optimisation disabled too).
    Tensors between such nodes are then never rounded to float16: the arithmetic is float32
    on float16 weights. Measured on a Cast -> Conv -> Relu -> Conv -> Cast chain: the CPU EP
    equals this model to 1.8e-7, and is 4e-4 from rounding each tensor
    (tests/onnx/test_export.py). Nodes it has float16 kernels for (Flatten, Reshape, Concat,
    Transpose, ...) still read float16 inputs: one rounding each that this model leaves out,
    which the 0.005 of ``matches_cpu_ep_model`` covers."""
    checks = C.load_tool("zoo_sweep").checks
    return checks.strip_casts(sym16), checks._widened(args16), checks._widened(auxs16)


def _distances(outs, other, ref):
    """Per output ``max|out - other| / max|ref|``."""
    return [float(np.abs(o.astype("float32") - e).max() / max(float(np.abs(r).max()), 1e-30))
            for o, e, r in zip(outs, other, ref)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--models", nargs="+")
    ap.add_argument("--out")
    ap.add_argument("--render", action="store_true",
                    help="run nothing: the table of docs/benchmarks.md from the JSON (--out)")
    ap.add_argument("--append", action="store_true",
                    help="put the rows of --models into the JSON (--out) of an earlier run, replacing "
                         "rows of the same model; this run's machine, load and command go beside it")
    ap.add_argument("--render-trained", nargs="+", metavar="JSON",
                    help="run nothing: docs/onnx.md's table from trained_zoo.py results")
    ap.add_argument("--render-true", metavar="JSON",
                    help="run nothing: docs/onnx.md's true float16/bfloat16 table from a run's JSON")
    ap.add_argument("--reference-python", default=os.environ.get("MXNET_AMP_ONNXREF_PYTHON"),
                    help="a python with onnx>=1.23: each file also runs in its ReferenceEvaluator (true "
                         "float16 / bfloat16 arithmetic); default $MXNET_AMP_ONNXREF_PYTHON")
    ap.add_argument("--batch", type=int, help="the first BATCH items of each model's inputs only "
                    "(ReferenceEvaluator is numpy: minutes per image for resnet50 on 2 cores)")
    opts = ap.parse_args(argv)
    if opts.render_trained:
        C.write_between_markers(os.path.join(C._ROOT, "docs", "onnx.md"), "trained_zoo_onnx",
                                render_trained(opts.render_trained))
        return 0
    if opts.render_true:
        import json
        with open(opts.render_true) as f:
            C.write_between_markers(os.path.join(C._ROOT, "docs", "onnx.md"), "onnx_true_low_precision",
                                    render_true(json.load(f)))
        return 0
    if opts.render:
        import json
        with open(opts.out or C.default_out("onnx_export", False)) as f:
            C.write_between_markers(os.path.join(C._ROOT, "docs", "benchmarks.md"), "onnx_export",
                                    render(json.load(f)))
        return 0
    import onnxruntime
    models = opts.models or (QUICK if opts.quick else FULL)
    out = opts.out or C.default_out("onnx_export", opts.quick)
    env = C.environment()
    env["onnxruntime"] = onnxruntime.__version__
    import onnx
    env["onnx"] = onnx.__version__
    env["reference_python"] = opts.reference_python
    env["batch"] = opts.batch
    env["probes"] = _probes(opts.reference_python)
    print("probes", env["probes"], flush=True)
    base = None
    if opts.append:
        import json
        with open(out) as f:
            base = json.load(f)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for spec in models:
            t0 = time.perf_counter()
            try:
                row = measure(spec, folder, opts.reference_python, opts.batch)
            except Exception:  # noqa: BLE001  (recorded with the model; the others still run)
                row = {"model": spec, "error": C.format_exc()}
            row["wall_s"] = time.perf_counter() - t0
            rows.append(row)
            print(spec, {k: v for k, v in row.items() if k not in ("what",)}, flush=True)
            C.write_json(out, _payload(env, rows, False, base, models))
    env["loadavg_end"] = os.getloadavg()
    C.write_json(out, _payload(env, rows, True, base, models))
    C.print_table(["model", "emulate", "reference", "within", "onnxruntime", "onnx-cpu model", "bf16 emulate",
                   "bf16 reference", "bf16 within", "judged"],
                  [[r["model"], _worst(r.get("emulate_err")), _worst(r.get("reference_err")),
                    r.get("within_reference"), _worst(r.get("onnx_err")), _worst(r.get("onnx_vs_cpu_ep_model")),
                    _worst(r.get("bfloat16", {}).get("emulate_err")), _worst(r.get("bfloat16", {}).get("reference_err")),
                    r.get("bfloat16", {}).get("within_reference"), r.get("acceptance")]
                   for r in rows])
    judged = [r for r in rows if r.get("acceptance")]
    return 0 if all(r.get("within_reference") is not False and r.get("bfloat16", {}).get("within_reference")
                    is not False and r.get("matches_cpu_ep_model") for r in judged) else 1


def _probes(python) -> dict:
    """What arithmetic each runtime does, on tools/onnx_reference.py's probe graph."""
    tool = C.load_tool("onnx_reference")
    found: dict = {"onnxruntime_cpu_float16": tool.onnxruntime_probe("float16")}
    if python:
        for dtype in ("float16", "bfloat16"):
            found[f"reference_{dtype}"] = tool.reference_probe(python, dtype)
    return found


def _payload(env: dict, rows: list, complete: bool, base: dict | None, models: list) -> dict:
    """The JSON of a run; with ``base`` (``--append``), the earlier run's rows with this run's
    in place of those of the same model, its machine first and this run's under 'appended'."""
    import sys
    command = "python " + " ".join(sys.argv)
    if base is None:
        return {"command": command, "environment": env, "rows": rows, "complete": complete}
    mine = {r["model"]: r for r in rows}
    merged = [mine.pop(r["model"], r) for r in base["rows"]] + list(mine.values())
    return {**base, "rows": merged, "appended": base.get("appended", []) + [
        {"models": models, "environment": env, "command": command, "complete": complete}]}


def _bfloat16(sym, args, auxs, inputs, folder: str, spec: str, ref, reference) -> dict:
    """The bfloat16 conversion exported too: its error in ReferenceEvaluator (bfloat16
    arithmetic, onnx >= 1.23) beside the emulation's, and what onnxruntime's CPU EP says of
    it (it has no bfloat16 kernel for most ops)."""
    import re
    import mxnet_amp
    import onnxruntime as ort
    from mxnet_amp.errors import AMPError
    path = os.path.join(folder, spec.replace("@", "_") + "_bf16.onnx")
    s, a, x = mxnet_amp.convert_model(sym, args, auxs, target_dtype="bfloat16")
    try:
        rec = mxnet_amp.export_onnx(s, a, x, {k: v.shape for k, v in inputs.items()}, path)
    except AMPError as err:
        return {"exported": False, "why": str(err)[:500]}
    out = {"exported": True, "onnx_bytes": rec.model_bytes + rec.data_bytes, "cast_nodes": rec.cast_nodes,
           "widened_nodes": len(rec.widened), "export_s": rec.seconds,
           "emulate_err": _errors(_mxnet_run(*mxnet_amp.emulate_model(s, a, x), inputs), ref)}
    out.update(_true_low(path, inputs, ref, reference, "reference", list(rec.symbol_outputs)))
    try:
        ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, inputs)
        out["onnxruntime_cpu"] = "ran"
    except Exception as err:  # noqa: BLE001  (the finding: which kernel is missing)
        found = re.search(r"implementation for (\S+) node with name '([^']*)'", str(err))
        out["onnxruntime_cpu"] = (f"no bfloat16 kernel for {found.group(1)} (node {found.group(2)!r})"
                                  if found else f"{type(err).__name__}: {str(err)[:200]}")
    os.unlink(path)
    return out


def render(data: dict) -> str:
    """The markdown table of a run: one line per output judged."""
    env = data["environment"]
    lines = [f"Measured {env['utc']} on {env['cpu']} ({env['cpu_count']} cores, shared; load "
             f"average {env['loadavg'][0]:.1f} at the start, {env['loadavg_end'][0]:.1f} at the end), "
             f"MXNet {env['mxnet']}, onnx {env['onnx']}, onnxruntime {env['onnxruntime']} (CPU EP). "
             f"Command: `{data['command']}`. Errors: max |x − fp32| / max |fp32| per output; "
             "*within*: onnx ≤ 1.5 × emulate + 0.005 on each judged output. *CPU EP model*: "
             "the converted model with float16 weights and float32 arithmetic, which is what "
             "onnxruntime's CPU EP computes (it removes float32→float16→float32 cast pairs, "
             "the model's own included; docs/onnx.md); *matches*: onnx − CPU EP model ≤ 0.005 "
             "on each judged output."]
    lines += [f"Rows {', '.join(a['models'])}: rerun {a['environment']['utc']} (load average "
              f"{a['environment']['loadavg'][0]:.1f} at the start, "
              f"{a['environment'].get('loadavg_end', [float('nan')])[0]:.1f} at the end): `{a['command']}`."
              for a in data.get("appended", [])]
    lines += ["", "| model | output | onnx | emulate | onnx − emulate | CPU EP model | onnx − CPU EP model | "
             "fp32 ONNX | within | matches | convert s | export s | ONNX MiB | Cast nodes (from amp casts) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in data["rows"]:
        if "onnx_err" not in r:
            lines.append(f"| {r['model']} | {r.get('not_exported') or r.get('error', '')[-200:]} |"
                         + " |" * 12)
            continue
        judged = set(r["judged_outputs"])
        for k, name in enumerate(r["outputs"]):
            first = k == 0
            lines.append(
                f"| {r['model'] if first else ''} | {name}{'' if k in judged else ' (not judged)'} | "
                f"{r['onnx_err'][k]:.3g} | {r['emulate_err'][k]:.3g} | {r['onnx_vs_emulate'][k]:.3g} | "
                f"{_cell(r, 'cpu_ep_model_err', k)} | {_cell(r, 'onnx_vs_cpu_ep_model', k)} | "
                f"{r['fp32_onnx_err'][k]:.2g} | "
                + (f"{'yes' if r['within'] else '**no**'} | {_yes(r.get('matches_cpu_ep_model'))} | "
                   f"{r['convert_s']:.2f} | {r['export_s']:.2f} | "
                   f"{(r['onnx_bytes'] + r['data_bytes']) / 2 ** 20:.1f} | {r['cast_nodes']} ({r['amp_casts']}) |"
                   if first else " | | | | | |"))
    bf16 = [f"| {r['model']} | {'yes' if r['bfloat16'].get('exported') else 'no: ' + r['bfloat16'].get('why', '')} | "
            f"{r['bfloat16'].get('widened_nodes', '-')} | {r['bfloat16'].get('onnxruntime_cpu', '-')} |"
            for r in data["rows"] if "bfloat16" in r]
    if bf16:
        lines += ["", "bfloat16 conversions of the same models, exported (checker and shape inference "
                  "pass) and offered to onnxruntime's CPU EP, which has no bfloat16 kernel for them: "
                  "not run here (docs/onnx.md).", "",
                  "| model | exported | nodes computed in float32 between casts (ONNX has no bf16 form at opset 13) | "
                  "onnxruntime CPU EP |", "| --- | --- | --- | --- |", *bf16]
    return "\n".join(lines)


def render_true(data: dict) -> str:
    """docs/onnx.md's table: per model and judged output, the error against MXNet float32 of
    the emulation, of ReferenceEvaluator (true float16 / bfloat16 arithmetic) and of
    onnxruntime's CPU EP (float32 arithmetic on the file), and the criterion."""
    env = data["environment"]
    probes = env.get("probes", {})
    lines = [f"Measured {env['utc']} on {env['cpu']} ({env['cpu_count']} cores, shared; load average "
             f"{env['loadavg'][0]:.1f} at the start, {env.get('loadavg_end', [float('nan')])[0]:.1f} at the end), "
             f"MXNet {env['mxnet']}, onnx {env['onnx']} (export), onnxruntime {env['onnxruntime']} (CPU EP), "
             f"ReferenceEvaluator of onnx {probes.get('reference_float16', {}).get('onnx', '-')}. "
             f"Command: `{data['command']}`."]
    lines += [f"Rows {', '.join(a['models'])}: `{a['command']}` at {a['environment']['utc']} (load average "
              f"{a['environment']['loadavg'][0]:.1f})." for a in data.get("appended", [])]
    lines += ["", "Probe graph (tools/onnx_reference.py): what each runtime computes.", "",
              "| runtime | dtype | between ops | MatMul accumulator | Conv accumulator |", "| --- | --- | --- | --- | --- |"]
    for key, name in (("reference_float16", "ReferenceEvaluator"), ("reference_bfloat16", "ReferenceEvaluator"),
                      ("onnxruntime_cpu_float16", "onnxruntime CPU EP")):
        if key in probes:
            p = probes[key]
            lines.append(f"| {name} | {p['dtype']} | {p['between_ops']} | {p['matmul_accumulator']} | "
                         f"{p['conv_accumulator']} |")
    lines += ["", "Errors: max \|x − fp32\| / max \|fp32\| per judged output, MXNet float32 the reference; "
              "*within*: ReferenceEvaluator ≤ 1.5 × emulate + 0.005 on each judged output (float16 / bfloat16).", "",
              "| model | output | fp16 emulate | fp16 ReferenceEvaluator | fp16 onnxruntime | bf16 emulate | "
              "bf16 ReferenceEvaluator | within fp16 / bf16 | acceptance row |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in data["rows"]:
        if "onnx_err" not in r:
            lines.append(f"| {r['model']} | {(r.get('not_exported') or r.get('error', ''))!s:.200} |" + " |" * 7)
            continue
        bf = r.get("bfloat16", {})
        for k in r["judged_outputs"]:
            first = k == r["judged_outputs"][0]
            lines.append(
                f"| {r['model'] if first else ''} | {r['outputs'][k]} | {r['emulate_err'][k]:.3g} | "
                f"{_cell(r, 'reference_err', k)} | {r['onnx_err'][k]:.3g} | {_cell(bf, 'emulate_err', k)} | "
                f"{_cell(bf, 'reference_err', k)} | "
                + (f"{_yes(r.get('within_reference'))} / {_yes(bf.get('within_reference'))} | "
                   f"{'yes' if r.get('acceptance') else 'no'} |" if first else " | |"))
    lines += ["", "Inputs: " + "; ".join(f"{r['model']}: {r['what']}" for r in data["rows"] if "what" in r) + "."]
    return "\n".join(lines)


def render_trained(files) -> str:
    """The float16 rows of trained_zoo.py runs: emulated and ONNX (onnxruntime) side by side;
    each row with the run that measured it (an ``--append`` run's own time and load)."""
    import json
    lines = ["| model | fp32 acc | variant | emulated: acc / flips / error | onnx: acc / flips / error | "
             "onnx: flips rounding does not explain | run |", "| --- | --- | --- | --- | --- | --- | --- |"]
    notes: list = []
    for path in files:
        with open(path) as f:
            data = json.load(f)
        runs = {}
        for env, models in [(data["environment"], None)] + [(a["environment"], a["models"])
                                                            for a in data.get("appended", [])]:
            text = f"{env['utc']}, load {env['loadavg'][0]:.0f}"
            runs.update({m: text for m in (models if models is not None else
                                            [r["model"] for r in data["results"]])})
        for row in data["results"]:
            for variant, paths in row.get("float16", {}).items():
                if not isinstance(paths, dict) or "onnx" not in paths:
                    continue
                onnx_row = paths["onnx"]
                lines.append(f"| {row['model']} | {100 * row['fp32_accuracy']:.1f}% | {variant} | "
                             f"{_trained_cell(paths.get('emulated', {}))} | {_trained_cell(onnx_row)} | "
                             f"{onnx_row.get('unexplained_flips', '-')} | {runs[row['model']]} |")
            if "fp32_onnx" in row:   # a detector: what the exporter's NMS changes by itself
                notes.append(f"{row['model']}: its float32 model exported the same way: "
                             f"{_trained_cell(row['fp32_onnx'])} (accuracy / flips / error against "
                             "MXNet float32: MXNet's NMS converter suppresses across classes); its "
                             "onnx cells are judged against that export")
    return "\n".join(lines + (["", *notes] if notes else []))


def _trained_cell(r: dict) -> str:
    return (f"{100 * r['accuracy']:.1f}% / {r['flips']} / {r['rel_error']:.2g}"
            if "accuracy" in r else r.get("error", "").replace("|", "/")[:90])


def _cell(row: dict, key: str, k: int) -> str:
    """Output ``k``'s figure under ``key``, '-' for a row measured before it was recorded."""
    return f"{row[key][k]:.3g}" if key in row else "-"


def _yes(flag) -> str:
    return "-" if flag is None else "yes" if flag else "**no**"


def _nbytes(*dicts):
    from mxnet_amp.ir.dtypes import array_nbytes
    return sum(array_nbytes(v) for d in dicts for v in d.values())


def _worst(values):
    return max(values) if values else None


if __name__ == "__main__":
    raise SystemExit(main())
