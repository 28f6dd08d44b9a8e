"""Does the error the automatic mode reports hold for the model it writes, run the way MXNet
users run it? (issue 32, item 6)

resnet50_v1 at 224 px, random weights with BatchNorm statistics calibrated layer by layer (as
benchmarks/deploy_fidelity.py builds it), bfloat16 with ``fold_batchnorm=False`` (the CLI's
``--no-fold-bn``), ``auto_convert_model`` with the default check; then the model it returned
is run through ``mx.mod.Module`` (MXNet's oneDNN subgraph fusion: each BatchNorm folded into
its bfloat16 convolution at bind), through ``Module`` with the fusion off
(``MXNET_SUBGRAPH_BACKEND=NONE``) and op by op (a ``CachedOp``, what the checks ran before
issue 32). Each figure is ``max|out - fp32| / max|fp32|`` of the output against the float32
model run op by op, as the report's ``relative_error``. Target: reported within 1.5x of
``Module``'s.

    python benchmarks/auto_deployed.py --out benchmarks/results/auto_deployed.json
    python benchmarks/auto_deployed.py --quick       # resnet18_v1 at 64 px
    python benchmarks/auto_deployed.py --render benchmarks/results/auto_deployed.json
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import _common as C  # noqa: E402
from _common import environment, write_json  # noqa: E402
from deploy_fidelity import rel_error, run_path  # noqa: E402

BATCH = 2


def run(model: str, size: int, max_executions: int) -> dict:
    import numpy as np

    import mxnet as mx
    from mxnet_amp.auto import auto_convert_model
    mx.random.seed(0)
    sym, args, auxs = C.zoo_checkpoint(model, image_size=size, calibrate=True)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (BATCH, 3, size, size)).astype("float32")
    inputs = {"data": x}
    ref = run_path("symbolblock", (sym, args, auxs), inputs, "/tmp", fp32=True)
    start = time.perf_counter()
    new_sym, new_args, new_auxs, report = auto_convert_model(
        sym, args, auxs, mx.nd.array(x), "bfloat16", fold_batchnorm=False, quiet=True,
        max_executions=max_executions)
    seconds = time.perf_counter() - start
    written = (new_sym, new_args, new_auxs)
    paths = {}
    for path in ("module", "module_nofuse", "symbolblock"):
        paths[path] = rel_error(run_path(path, written, inputs, "/tmp", fp32=False), ref)
    # before issue 32 the checks ran op by op: the plain conversion (nothing kept) validated
    # there; what that model gives through Module
    from mxnet_amp import convert_model
    plain = convert_model(sym, args, auxs, target_dtype="bfloat16", fold_batchnorm=False)
    before = {path: rel_error(run_path(path, plain, inputs, "/tmp", fp32=False), ref)
              for path in ("module", "symbolblock")}
    return {"before_plain_conversion": before, "model": model, "size": size, "batch": BATCH, "reported": report.relative_error,
            "validated": report.validated, "executions": report.executions,
            "kept_fp32": len(report.kept_fp32), "seconds": round(seconds, 1),
            "execution": report.execution, "notes": list(report.notes), "written": paths,
            "ratio_module_over_reported": paths["module"] / max(report.relative_error, 1e-30),
            "environment": environment()}


def markdown(r: dict) -> str:
    """The doc's table of one result."""
    env = r["environment"]
    w, b = r["written"], r["before_plain_conversion"]
    return "\n".join([
        "| | error auto reports | written model: Module (fused) | Module, fusion off | op by op (CachedOp) | executions | kept float32 |",
        "|---|---|---|---|---|---|---|",
        f"| before (checks op by op; plain conversion validated) | {b['symbolblock']:.3g} | "
        f"{b['module']:.3g} | - | {b['symbolblock']:.3g} | - | 0 |",
        f"| now (checks bound as Module) | {r['reported']:.3g} | {w['module']:.3g} | "
        f"{w['module_nofuse']:.3g} | {w['symbolblock']:.3g} | {r['executions']} | "
        f"{r['kept_fp32']} |",
        "",
        f"{r['model']} {r['size']} px, batch {r['batch']}, bfloat16 {r['execution']}, "
        f"validated {r['validated']}, {r['seconds']} s; Module / reported = "
        f"{r['ratio_module_over_reported']:.3f}. Measured {env.get('utc')} on {env.get('cpu')} "
        f"(avx512_bf16 {env.get('avx512_bf16')}, {env.get('cpu_count')} cores shared, load "
        f"average {[round(v, 2) for v in env.get('loadavg', [])]}): `{r.get('command', '')}`."])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50_v1")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--max-executions", type=int, default=40)
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="resnet18_v1 at 64 px (seconds)")
    ap.add_argument("--render", metavar="RESULT.json", default=None,
                    help="only write the table of this result into docs/emulation_and_auto.md")
    args = ap.parse_args(argv)
    if args.render:
        import json
        with open(args.render) as f:
            result = json.load(f)
        C.write_between_markers(os.path.join(os.path.dirname(HERE), "docs", "emulation_and_auto.md"),
                                "auto_deployed", markdown(result))
        return 0
    if args.quick:
        args.model, args.size = "resnet18_v1", 64
    result = run(args.model, args.size, args.max_executions)
    print(result)
    if args.out:
        write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
