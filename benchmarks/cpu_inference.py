"""CPU inference in bfloat16, measured natively: fp32, mx.contrib.amp and ours side by side.

Each model is converted to bfloat16 by
  * ``contrib``      — ``mx.contrib.amp.convert_model`` with its default (weights float32, cast
                       to bf16 in the graph at every run),
  * ``contrib_cop``  — the same with ``cast_optional_params=True`` (weights stored in bf16),
  * ``ours``         — ``mxnet_amp.convert_model``, weights stored in bf16, BatchNorms kept
                       (``fold_batchnorm=False``: the default until BatchNorm folding became it),
  * ``ours_fold``    — ours with ``fold_batchnorm=True``, the default now,
and every variant, fp32 included, runs through two paths: ``module`` (``mx.mod.Module``, where
MXNet 1.9.1 applies its oneDNN subgraph fusion, conv+BN+relu among it) and ``gluon`` (a
hybridized ``SymbolBlock``, no fusion). All variants of a case run in one process, interleaved
round by round (the order rotating), and each figure is a median; a ratio is the median of
the per-round ratios. The environment (CPU model and flags, MXNet version, ``MXNET_*``
variables, load average at the start and the end) is recorded with the results.

bfloat16 Convolution / FullyConnected need an AVX-512 CPU in MXNet 1.9.1 (oneDNN); where
``mxnet_amp.hardware.bf16_runs_natively()`` is False nothing low precision is timed: the
file says so and records what can be measured (conversion time, checkpoint bytes, casts).

    python benchmarks/cpu_inference.py           # resnet50_v1 bs1/bs8, mobilenetv2_1.0 bs8,
                                                 # mobilenetv3_large/small bs8 (hard-swish),
                                                 # a BERT-base-style encoder bs8 (minutes)
    python benchmarks/cpu_inference.py --quick   # seconds: resnet18_v1 at 64x64, a tiny encoder

``--per-path`` measures instead every way a user runs a model (benchmarks/_paths.py): the
user's fp32 Gluon block, fp32 Module, the bf16 block ``convert_hybrid_block`` returns, its
checkpoint in Module and via ``SymbolBlock.imports``, and contrib's best, at batch 1 and 8,
each with its error against the fp32 block (results/cpu_inference_paths.json):

    python benchmarks/cpu_inference.py --per-path                       # ~15 min, 2 idle cores
    python benchmarks/cpu_inference.py --per-path --cases mobilenetv2_1.0 bert_base_seq128
    python benchmarks/cpu_inference.py --per-path --quick               # seconds
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

import _common as C

NOT_MEASURABLE = "not measurable on this CPU (no avx512: oneDNN has no bf16 conv/FC kernels here)"

# variant -> (converter, conversion keywords on top of target_dtype='bfloat16')
VARIANTS = {
    "contrib": ("contrib", {}),
    "contrib_cop": ("contrib", {"cast_optional_params": True}),
    "ours": ("ours", {"fold_batchnorm": False}),
    "ours_fold": ("ours", {"fold_batchnorm": True}),
}
PATHS = ("module", "gluon")
BERT_BASE = dict(num_layers=12, units=768, heads=12, seq_len=128, vocab=8000)

# (label, builder, batch, rounds, batches per round)
FULL = [("resnet50_v1_bs1", ("zoo", "resnet50_v1", 224), 1, 7, 4),
        ("resnet50_v1_bs8", ("zoo", "resnet50_v1", 224), 8, 7, 1),
        ("mobilenetv2_1.0_bs8", ("zoo", "mobilenetv2_1.0", 224), 8, 7, 2),
        ("mobilenetv3_large_bs8", ("zoo", "mobilenetv3_large", 224), 8, 7, 2),
        ("mobilenetv3_small_bs8", ("zoo", "mobilenetv3_small", 224), 8, 7, 2),
        ("bert_base_12x768_seq128_bs8", ("bert", BERT_BASE), 8, 5, 1)]
QUICK = [("resnet18_v1_64px_bs1", ("zoo", "resnet18_v1", 64), 1, 2, 1),
         ("bert_encoder_1x32_seq8_bs2", ("bert", dict(num_layers=1, units=32, heads=2, seq_len=8, vocab=100)), 2, 2, 1)]


def build(spec):
    """``(sym, args, auxs, data_array_maker)`` for a model spec."""
    import mxnet as mx
    kind = spec[0]
    if kind == "zoo":
        _, name, size = spec
        # calibrated BatchNorm statistics: activations stay O(1) as in a trained net, and
        # folding has real statistics to fold
        sym, args, auxs = C.zoo_checkpoint(name, size, calibrate=True)

        def data(batch):
            return mx.nd.array(np.random.default_rng(1).uniform(-1, 1, (batch, 3, size, size)))
        return sym, args, auxs, data
    _, cfg = spec
    sym, args, auxs = C.bert_encoder(**cfg)
    vocab, seq = cfg.get("vocab", 8000), cfg["seq_len"]

    def tokens(batch):
        return mx.nd.array(np.random.default_rng(1).integers(0, vocab, (batch, seq)))
    return sym, args, auxs, tokens


def _finish(outs):
    for out in outs:
        out.wait_to_read()
    return outs


def module_runner(sym, args, auxs, data):
    """A forward-only ``mx.mod.Module`` (oneDNN subgraph fusion applies); returns a function
    running one batch to completion."""
    import mxnet as mx
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", data.shape)], for_training=False, grad_req="null")
    mod.set_params(args, auxs, allow_missing=False, allow_extra=False)
    batch = mx.io.DataBatch([data])

    def run():
        mod.forward(batch, is_train=False)
        return _finish(mod.get_outputs())
    return run


def gluon_runner(sym, args, auxs, data, backend: str | None = None):
    """A hybridized ``SymbolBlock`` holding the params in their own dtypes (no fusion unless
    ``backend`` names a subgraph backend, e.g. ``'MKLDNN'``)."""
    net = C.imported_block(sym, args, auxs)
    net.hybridize(static_alloc=True, static_shape=True, **({"backend": backend} if backend else {}))

    def run():
        out = net(data)
        return _finish(list(out) if isinstance(out, (list, tuple)) else [out])
    return run


RUNNERS = {"module": module_runner, "gluon": gluon_runner,
           "gluon_mkldnn": lambda *a: gluon_runner(*a, backend="MKLDNN")}


def max_rel_diff(outs, ref) -> float:
    """Largest |out - ref| over the largest |ref|, across the float outputs (fp32 reference)."""
    worst = 0.0
    for o, r in zip(outs, ref):
        a, b = o.astype("float32").asnumpy(), r.asnumpy()
        if b.size and np.issubdtype(b.dtype, np.floating):
            worst = max(worst, float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)))
    return worst


def convert_variants(sym, args, auxs, row: dict) -> dict:
    """Convert with each variant; records conversion time, casts and param bytes in ``row``."""
    converted = {}
    for variant, (which, kw) in VARIANTS.items():
        t0 = time.perf_counter()
        res = C.try_convert(which, sym, args, auxs, target_dtype="bfloat16", **kw)
        seconds = time.perf_counter() - t0
        if not res["ok"]:
            row[variant] = {"ok": False, "error": res["error"]}
            continue
        nbytes = C.param_bytes(res["args"], res["auxs"])
        row[variant] = {"ok": True, "convert_s": seconds, "casts": C.cast_counts(res["sym"]),
                        "nodes": C.num_nodes(res["sym"]),
                        "param_bytes": nbytes["total"], "low_precision_param_bytes": nbytes["low_precision"]}
        converted[variant] = res
    return converted


def run_case(label, spec, batch, rounds, per_round, native: bool, paths=PATHS) -> dict:
    sym, args, auxs, make_data = build(spec)
    data = make_data(batch)
    row: dict = {"case": label, "batch": batch, "rounds": rounds, "batches_per_round": per_round,
                 "nodes": C.num_nodes(sym), "fp32_param_bytes": C.param_bytes(args, auxs)["total"]}
    converted = convert_variants(sym, args, auxs, row)
    models = {"fp32": (sym, args, auxs)}
    if native:
        models.update({v: (r["sym"], r["args"], r["auxs"]) for v, r in converted.items()})
    del converted, args, auxs
    runners, ref = {}, {}
    for variant in list(models):
        model = models.pop(variant)  # each runner holds its own copy of the params
        for path in paths:
            key = f"{variant}/{path}"
            try:
                runners[key] = RUNNERS[path](*model, data)
                outs = runners[key]()
            except Exception as err:  # noqa: BLE001 - a model that does not run is a result
                runners.pop(key, None)
                row.setdefault(variant, {})[f"{path}_run_error"] = C.error_text(err)
                continue
            if variant == "fp32":
                ref[path] = [o.copy() for o in outs]
            elif path in ref:
                row[variant][f"{path}_max_rel_diff_vs_fp32"] = max_rel_diff(outs, ref[path])
        del model
    times = C.interleaved_times(runners, rounds, warmup=0, inner=per_round)
    row["fp32"] = {}
    for key, ts in times.items():
        variant, path = key.split("/")
        row[variant][path] = {"round_s": ts, "items_per_s": batch * per_round / C.median(ts)}
        if variant != "fp32":
            row[variant][path]["speedup_over_fp32"] = C.paired_ratio(times[f"fp32/{path}"], ts)
    for variant in VARIANTS:
        if variant in row and row[variant].get("ok") and not native:
            row[variant]["items_per_s"] = NOT_MEASURABLE
    for path in paths:
        for variant in ("ours", "ours_fold"):
            for base in ("contrib", "contrib_cop"):
                a, b = f"{base}/{path}", f"{variant}/{path}"
                if a in times and b in times:
                    row[variant][path][f"over_{base}"] = C.paired_ratio(times[a], times[b])
    return row


def targets(rows, paths=PATHS) -> dict:
    """The issue's targets, checked on what was measured (None where not measured)."""
    out = {}
    r50 = next((r for r in rows if r["case"] == "resnet50_v1_bs8"), None)
    for path in paths:
        if r50 and path in r50["ours"]:
            out[f"ours >= 2x fp32 on resnet50_v1 bs8 ({path})"] = r50["ours"][path]["speedup_over_fp32"] >= 2
    for base in ("contrib", "contrib_cop"):
        ratios = [r[v][p][f"over_{base}"] for r in rows for v in ("ours",) for p in paths
                  if p in r.get(v, {}) and f"over_{base}" in r[v][p]]
        if ratios:
            out[f"ours >= 1.1x {base} on every case and path"] = min(ratios) >= 1.1
            out[f"worst ours/{base}"] = min(ratios)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny models, seconds (the smoke test)")
    ap.add_argument("--out", help="JSON path (default benchmarks/results/cpu_inference.json)")
    ap.add_argument("--cases", nargs="+", help="only these case labels")
    ap.add_argument("--paths", nargs="+", default=list(PATHS), choices=sorted(RUNNERS),
                    help="how models run (default: module gluon; gluon_mkldnn = SymbolBlock "
                    "hybridized with backend='MKLDNN', oneDNN fusion in Gluon)")
    ap.add_argument("--per-path", action="store_true",
                    help="the per-path table instead (benchmarks/_paths.py): user's fp32 block, "
                    "fp32 Module, our bf16 block, its checkpoint in Module / SymbolBlock.imports, "
                    "contrib's best")
    ap.add_argument("--ours-fp32-ops", nargs="+", metavar="OP",
                    help="with --per-path: fp32_ops for our conversions (measure a list choice "
                    "on every path, e.g. clip)")
    ap.add_argument("--amx", action="store_true",
                    help="mxnet_amp.mx.hardware.enable_amx() first: oneDNN may run bf16 on Intel AMX")
    ap.add_argument("--tune", nargs="?", const="benchmarks/results/tune_cache.json", default=None,
                    metavar="CACHE.json",
                    help="with --per-path: also our conversions with tune= (timings cached in "
                    "CACHE.json, default benchmarks/results/tune_cache.json), per batch size")
    opts = ap.parse_args(argv)
    if opts.amx:   # before the first MXNet operation of the process
        from mxnet_amp.mx.hardware import enable_amx
        opts.amx = enable_amx()
    if opts.per_path:
        import _paths
        return _paths.main(opts)
    from mxnet_amp.mx.hardware import bf16_runs_natively
    native = bf16_runs_natively()
    if not native:
        print("note: bf16 throughput is " + NOT_MEASURABLE + "; timing fp32, conversion and bytes only")
    env = C.environment()
    load_start = os.getloadavg()
    rows = []
    t0 = time.perf_counter()
    out = opts.out or C.default_out("cpu_inference", opts.quick)
    cases = [c for c in (QUICK if opts.quick else FULL) if not opts.cases or c[0] in opts.cases]
    for case in cases:
        rows.append(run_case(*case, native=native, paths=opts.paths))
        _print(rows[-1:], opts.paths)
        # written after every case: a run killed later (out of memory, say) keeps these
        _write(out, opts, native, env, load_start, t0, rows, complete=len(rows) == len(cases))
    print()
    _print(rows, opts.paths)
    for k, v in (targets(rows, opts.paths) if native else {}).items():
        print(f"target: {k}: {v}")
    print(f"wrote {out}")
    return 0


def _write(out, opts, native, env, load_start, t0, rows, complete: bool) -> None:
    C.write_json(out, {"benchmark": "cpu_inference", "target_dtype": "bfloat16",
                       "variants": {k: {"converter": w, **kw} for k, (w, kw) in VARIANTS.items()},
                       "paths": list(opts.paths), "bf16_runs_natively": native, "complete": complete,
                       "environment": {**env, "loadavg_start": load_start, "loadavg_end": os.getloadavg()},
                       "wall_s": time.perf_counter() - t0,
                       "targets": targets(rows, opts.paths) if native else {}, "results": rows})


def _print(rows, paths=PATHS) -> None:
    table = []
    for r in rows:
        for path in paths:
            def ips(v):
                x = r.get(v, {})
                if not x.get("ok", v == "fp32"):
                    return "FAILED"
                got = x.get(path, {}).get("items_per_s")
                return got if got is not None else x.get(f"{path}_run_error", "n/a")
            table.append([r["case"], path] + [ips(v) for v in ("fp32", *VARIANTS)]
                         + [r["ours"].get(path, {}).get("speedup_over_fp32"),
                            r["ours"].get(path, {}).get("over_contrib"),
                            r["ours"].get(path, {}).get("over_contrib_cop"),
                            r["ours_fold"].get(path, {}).get("over_contrib_cop")])
    C.print_table(["case", "path", "fp32 it/s", *(f"{v} it/s" for v in VARIANTS), "ours/fp32",
                   "ours/contrib", "ours/contrib_cop", "fold/contrib_cop"], table)


if __name__ == "__main__":
    raise SystemExit(main())
