"""Do two trees of mxnet-amp write the same bytes? Checkpoints, reports and ONNX files.

A refactoring that claims "behaviour unchanged" is checked here: the same float32
checkpoints (gluoncv zoo nets with random weights, written once) are converted by each tree
(float16 and bfloat16, BatchNorm folding on and off) through the command line (checkpoint,
JSON and HTML report, ONNX file) and through the Python API (``convert_model`` then
``save_checkpoint``), and every file written is compared byte for byte.

    git worktree add --detach /tmp/base REV
    python tools/byte_identity.py --base /tmp/base --head . --work /tmp/bytes
    DNNL_MAX_CPU_ISA=AVX2 python tools/byte_identity.py ...   # as an AVX2-only CPU converts

Exit status 0 when every file is the same (a JSON report may differ in the seconds its ONNX
export took, nothing else); the files that differ are listed (for JSON, the first keys whose
values differ).
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys

MODELS = ("resnet18_v1", "mobilenetv2_0.5", "squeezenet1.0")
# JSON report keys that hold a wall time: the only bytes allowed to differ
TIMINGS = frozenset({"$.extra.onnx.seconds"})
SIZE = 224
# (name, dtype, extra CLI flags)
RUNS = [(f"{dt}_{'fold' if fold else 'nofold'}", dt, [] if fold else ["--no-fold-bn"])
        for dt in ("float16", "bfloat16") for fold in (True, False)]

_INPUTS = """
import sys, mxnet as mx
sys.path.insert(0, {bench!r})
import _common as C
for name in {models!r}:
    sym, args, auxs = C.zoo_checkpoint(name)
    mx.model.save_checkpoint({work!r} + '/in/' + name, 0, sym, args, auxs)
"""

_API = """
import mxnet as mx, mxnet_amp as amp
sym, args, auxs = mx.model.load_checkpoint({prefix!r}, 0)
s, a, x = amp.convert_model(sym, args, auxs, target_dtype={dtype!r}, fold_batchnorm={fold!r})
amp.save_checkpoint({out!r}, 0, s, a, x)
"""


def _run(cmd: list[str], tree: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed in {tree}: {' '.join(cmd)}\n{proc.stderr[-3000:]}")


def make_inputs(head: str, work: str) -> None:
    """The float32 checkpoints both trees convert (written once, by ``head``'s helpers)."""
    os.makedirs(os.path.join(work, "in"), exist_ok=True)
    if all(os.path.exists(os.path.join(work, "in", f"{m}-0000.params")) for m in MODELS):
        return
    code = _INPUTS.format(bench=os.path.abspath(os.path.join(head, "benchmarks")),
                          models=MODELS, work=os.path.abspath(work))
    _run([sys.executable, "-c", code], head)


def convert_all(tree: str, out: str, work: str) -> None:
    """Every model and run of the module doc, written under ``out``."""
    os.makedirs(out, exist_ok=True)
    for model in MODELS:
        prefix = os.path.abspath(os.path.join(work, "in", model))
        for run, dtype, flags in RUNS:
            dst = os.path.abspath(os.path.join(out, f"{model}_{run}"))
            _run([sys.executable, "-m", "mxnet_amp", "convert", prefix, "--target-dtype", dtype,
                  "--out", dst, "--report", dst + ".json", "--html", dst + ".html", "-q",
                  "--onnx", dst + ".onnx", "--input-shape", f"data:1x3x{SIZE}x{SIZE}", *flags], tree)
            code = _API.format(prefix=prefix, dtype=dtype, fold=not flags, out=dst + "_api")
            _run([sys.executable, "-c", code], tree)


def _json_diff(a: str, b: str) -> list[str]:
    def walk(x, y, path):
        if type(x) is not type(y):
            return [path]
        if isinstance(x, dict):
            return [p for k in sorted(set(x) | set(y))
                    for p in (walk(x[k], y[k], f"{path}.{k}") if k in x and k in y else [f"{path}.{k}"])]
        if isinstance(x, list) and len(x) == len(y):
            return [p for i, (u, v) in enumerate(zip(x, y)) for p in walk(u, v, f"{path}[{i}]")]
        return [] if x == y else [path]
    with open(a) as fa, open(b) as fb:
        return walk(json.load(fa), json.load(fb), "$")[:8]


def compare(base_out: str, head_out: str) -> tuple[int, list[str]]:
    """``(files compared, what differs)``."""
    names = sorted(set(os.listdir(base_out)) | set(os.listdir(head_out)))
    differ = []
    for name in names:
        a, b = os.path.join(base_out, name), os.path.join(head_out, name)
        if not (os.path.exists(a) and os.path.exists(b)):
            differ.append(f"{name}: only in {'head' if os.path.exists(b) else 'base'}")
        elif not filecmp.cmp(a, b, shallow=False):
            keys = _json_diff(a, b) if name.endswith(".json") else []
            if keys and set(keys) <= TIMINGS:
                continue   # the same but for how long the export took
            differ.append(f"{name}" + (f": {keys}" if keys else ""))
    return len(names), differ


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the tree before (a git worktree)")
    ap.add_argument("--head", default=".", help="the tree after (default: here)")
    ap.add_argument("--work", required=True, help="a folder for the inputs and outputs")
    opts = ap.parse_args(argv)
    make_inputs(opts.head, opts.work)
    outs = {}
    for side, tree in (("base", opts.base), ("head", opts.head)):
        # both trees write to the same paths (reports name the files they wrote)
        outs[side] = os.path.join(opts.work, side)
        shutil.rmtree(outs[side], ignore_errors=True)
        convert_all(tree, os.path.join(opts.work, "out"), opts.work)
        os.rename(os.path.join(opts.work, "out"), outs[side])
    count, differ = compare(outs["base"], outs["head"])
    print(f"{count} files compared, {len(differ)} differ"
          + (f" (DNNL_MAX_CPU_ISA={os.environ['DNNL_MAX_CPU_ISA']})" if "DNNL_MAX_CPU_ISA" in os.environ else ""))
    for line in differ:
        print("  " + line)
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
