"""Where bfloat16 inference time goes, op by op: MXNet's profiler on fp32 and converted models.

For one model and batch, each variant (fp32, contrib's default, contrib with
``cast_optional_params=True``, ours, ours with ``fold_batchnorm=True``) runs a few batches
through ``mx.mod.Module`` (oneDNN fusion) or a hybridized ``SymbolBlock`` (no fusion) under
``mx.profiler`` with aggregate statistics; the result lists the total time per operator
(``amp_cast`` among them), so a slow bf16 kernel or a costly cast shows up by name.
Needs a CPU that runs bfloat16 natively.

    python benchmarks/op_profile.py                       # resnet50_v1 bs8, both paths
    python benchmarks/op_profile.py --model bert --batch 8
    python benchmarks/op_profile.py --quick               # resnet18_v1 at 64x64, seconds
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

# one profiler entry per op, not per bulked segment of ops (set before mxnet is imported)
os.environ.setdefault("MXNET_EXEC_BULK_EXEC_INFERENCE", "0")
os.environ.setdefault("MXNET_EXEC_BULK_EXEC_TRAIN", "0")

import _common as C  # noqa: E402
import cpu_inference as CI  # noqa: E402


def profile_runner(run, batches: int) -> dict[str, dict]:
    """``{op: {'count', 'total_ms'}}`` over ``batches`` runs of ``run``."""
    import mxnet as mx
    run()  # warm-up outside the profile
    # MXNet may write the profile file after dumps() returns: a late file is no error
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as d:
        mx.profiler.set_config(profile_symbolic=True, profile_imperative=True,
                               aggregate_stats=True, filename=os.path.join(d, "p.json"))
        mx.profiler.set_state("run")
        for _ in range(batches):
            run()
        mx.nd.waitall()
        mx.profiler.set_state("stop")
        stats = json.loads(mx.profiler.dumps(reset=True, format="json"))
    ops: dict[str, dict] = {}
    for domain, entries in stats.get("Time", {}).items():
        if not isinstance(entries, dict) or not domain.startswith("operator"):
            continue  # API-call and engine-wait entries overlap the op times
        for name, v in entries.items():
            slot = ops.setdefault(name, {"count": 0, "total_ms": 0.0})
            slot["count"] += int(v.get("Count", 0))
            slot["total_ms"] += float(v.get("Total", 0.0))
    return dict(sorted(ops.items(), key=lambda kv: -kv[1]["total_ms"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50_v1", help="a zoo name, or 'bert' (BERT-base-style)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--batches", type=int, default=3, help="profiled batches per variant")
    ap.add_argument("--quick", action="store_true", help="resnet18_v1 at 64x64, one batch")
    ap.add_argument("--out", help="JSON path (default benchmarks/results/op_profile_<model>.json)")
    ap.add_argument("--amx", action="store_true",
                    help="mxnet_amp.mx.hardware.enable_amx() first: oneDNN may run bf16 on Intel AMX")
    ap.add_argument("--variants", nargs="+", default=None, metavar="V",
                    help="only these variants (fp32 contrib contrib_cop ours ours_fold)")
    ap.add_argument("--paths", nargs="+", default=None, metavar="P",
                    help="only these paths (default all: module gluon gluon_mkldnn)")
    opts = ap.parse_args(argv)
    from mxnet_amp.mx.hardware import bf16_runs_natively, enable_amx
    amx = enable_amx() if opts.amx else False   # before the first MXNet operation
    if not bf16_runs_natively():
        raise SystemExit("op_profile.py: bfloat16 does not run natively on this CPU; nothing to profile")
    if opts.quick:
        spec, opts.batch, opts.batches = ("zoo", "resnet18_v1", 64), 1, 1
    elif opts.model == "bert":
        spec = ("bert", CI.BERT_BASE)
    else:
        spec = ("zoo", opts.model, C.zoo_input_size(opts.model))
    sym, args, auxs, make_data = CI.build(spec)
    data = make_data(opts.batch)
    row: dict = {}
    converted = CI.convert_variants(sym, args, auxs, row)
    models = {"fp32": (sym, args, auxs), **{v: (r["sym"], r["args"], r["auxs"]) for v, r in converted.items()}}
    result = {"benchmark": "op_profile", "model": opts.model if not opts.quick else "resnet18_v1_64px",
              "batch": opts.batch, "batches": opts.batches, "amx_enabled": amx,
              "environment": C.environment(), "profiles": {}}
    paths = opts.paths or list(CI.RUNNERS)
    for path, make in ((p, CI.RUNNERS[p]) for p in paths):
        for variant, model in models.items():
            if opts.variants and variant not in opts.variants:
                continue
            ops = profile_runner(make(*model, data), opts.batches)
            result["profiles"][f"{variant}/{path}"] = ops
            top = ", ".join(f"{k} {v['total_ms'] / opts.batches:.1f}" for k, v in list(ops.items())[:6])
            total = sum(v["total_ms"] for v in ops.values()) / opts.batches
            print(f"{variant}/{path}: {total:.1f} ms/batch of op time; top ms/batch: {top}", flush=True)
    out = opts.out or C.default_out(f"op_profile_{result['model']}" + ("_amx" if amx else ""), opts.quick)
    C.write_json(out, result)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
