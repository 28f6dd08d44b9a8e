"""Conversion wall time: ``mxnet_amp.convert_model`` vs ``mx.contrib.amp.convert_model``.

Both converters run in this one process, interleaved (ours, contrib, contrib, ours, ...),
on the same symbol and params; each figure is the median of the runs and the ratio is the
median of the per-round ratios ours / contrib (< 1: ours is faster). Our time per node at
each synthetic size shows how the pass grows with graph size.

``ours`` and ``contrib`` run with their defaults (ours stores weights in low precision,
``cast_optional_params=True``; contrib's default is False); ``contrib_cop`` is contrib with
``cast_optional_params=True`` (the same work as ours), and on zoo models ``ours_fold`` is
ours with ``fold_batchnorm=True``.

    python benchmarks/conversion_speed.py            # full: resnet50_v1, ssd_512_resnet50_v1_voc,
                                                     # synthetic 1k / 10k / 100k nodes
    python benchmarks/conversion_speed.py --quick    # seconds: resnet18_v1, synthetic 300 / 1k
    python benchmarks/conversion_speed.py --profile  # also cProfile ours (resnet50_v1, synthetic_10k;
                                                     # --quick: synthetic_1k)
    python benchmarks/conversion_speed.py --base REV # also time mxnet_amp as of git revision REV
                                                     # (loaded beside this one) and check that
                                                     # both give the same symbol and params
    python benchmarks/conversion_speed.py --cases synthetic_100k   # only the cases named
    python benchmarks/conversion_speed.py --cases resnet50_v1 --target-dtype bfloat16 \
        --out benchmarks/results/conversion_speed_fold_native.json   # issue 42's fold target
    DNNL_MAX_CPU_ISA=AVX2 python benchmarks/conversion_speed.py ...  # the same as an AVX2 CPU

Each timing runs until MXNet's asynchronous work is done (``mx.nd.waitall()``), for every
converter. ``fold_target`` (zoo cases): the default conversion (``ours_fold``) against 1.25x
contrib's time plus 1 s per GB of weights folded.
"""
from __future__ import annotations

import argparse
import cProfile
import importlib
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time

import _common as C
import mxnet as mx
from synthetic import synthetic_model

# (label, how to build, repeats)
FULL = [("resnet50_v1", "zoo", 7), ("ssd_512_resnet50_v1_voc", "zoo", 7),
        ("synthetic_1k", 1_000, 7), ("synthetic_10k", 10_000, 5), ("synthetic_100k", 100_000, 3)]
QUICK = [("resnet18_v1", "zoo", 2), ("synthetic_300", 300, 2), ("synthetic_1k", 1_000, 2)]
PROFILED = {"resnet50_v1", "synthetic_10k"}
PROFILED_QUICK = {"synthetic_1k"}

# the stages of our conversion, by the function that does each, for the profile summary
STAGES = {
    "graph_from_symbol": "symbol -> tojson -> Graph (io.graph_from_symbol)",
    "insert_casts": "the cast-insertion pass (passes.insert_casts)",
    "_probe": "single-op MXNet type probes (optypes.OpTypes._probe)",
    "graph_to_symbol": "Graph -> JSON -> mx.sym.load_json (io.graph_to_symbol, all calls)",
    "infer_types": "MXNet partial type inference (registry.infer_types, all calls)",
    "array_dtype": "reading param dtypes (params.array_dtype, all calls)",
    "recast_params": "param casts (params.recast_params)",
    "check_param_shapes": "params' shapes checked against the symbol (shapes.check_param_shapes)",
}


def build(label: str, how) -> tuple:
    if how == "zoo":
        return C.zoo_checkpoint(label)
    return synthetic_model(how)


# variant -> (converter, keywords on top of target_dtype)
# (``ours`` keeps BatchNorms, the default before folding became it; ``ours_fold`` is the default)
VARIANTS = {"ours": ("ours", {"fold_batchnorm": False}), "contrib": ("contrib", {}),
            "contrib_cop": ("contrib", {"cast_optional_params": True}),
            "ours_fold": ("ours", {"fold_batchnorm": True})}


def load_base(rev: str, workdir: str):
    """``mxnet_amp`` as of git revision ``rev``, imported as ``mxnet_amp_base`` from a copy
    under ``workdir`` (with its lists), so both versions run in this one process."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    archive = subprocess.run(["git", "-C", root, "archive", rev, "mxnet_amp", "lists"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", workdir], input=archive, check=True)
    shutil.move(os.path.join(workdir, "mxnet_amp"), os.path.join(workdir, "mxnet_amp_base"))
    sys.path.insert(0, workdir)
    return importlib.import_module("mxnet_amp_base")


def same_output(a: dict, b: dict) -> bool:
    """Whether two conversions gave the same symbol JSON (casts kept) and the same params
    (names, dtypes, shapes and bytes)."""
    if a["sym"].tojson(remove_amp_cast=False) != b["sym"].tojson(remove_amp_cast=False):
        return False
    for pa, pb in ((a["args"], b["args"]), (a["auxs"], b["auxs"])):
        if pa.keys() != pb.keys():
            return False
        for k, va in pa.items():
            vb = pb[k]
            if (va.dtype != vb.dtype or va.shape != vb.shape
                    or va.asnumpy().tobytes() != vb.asnumpy().tobytes()):
                return False
    return True


def time_case(sym, args, auxs, repeats: int, target_dtype: str, fold: bool = False,
              base=None) -> dict:
    converters = dict(C.CONVERTERS)
    variants = {k: (w, {"target_dtype": target_dtype, **kw}) for k, (w, kw) in VARIANTS.items()
                if fold or k != "ours_fold"}
    if base is not None:
        # the base revision under the same keywords as ours (and as ours_fold, on zoo cases)
        converters["base"] = base.convert_model
        variants["base"] = ("base", dict(variants["ours"][1]))
        if "ours_fold" in variants:
            variants["base_fold"] = ("base", dict(variants["ours_fold"][1]))
    outcome = {k: _try(converters[w], sym, args, auxs, **kw) for k, (w, kw) in variants.items()}
    row: dict = {"nodes": C.num_nodes(sym), "repeats": repeats}
    for w, res in outcome.items():
        row[w] = ({"ok": True, "casts": C.cast_counts(res["sym"])} if res["ok"]
                  else {"ok": False, "error": res["error"]})
    if base is not None and outcome["ours"]["ok"] and outcome["base"]["ok"]:
        row["same_output_as_base"] = same_output(outcome["ours"], outcome["base"])
    if "base_fold" in outcome and outcome["ours_fold"]["ok"] and outcome["base_fold"]["ok"]:
        row["same_output_as_base_fold"] = same_output(outcome["ours_fold"], outcome["base_fold"])
    working = {k: (lambda w=w, kw=kw: converters[w](sym, args, auxs, **kw))
               for k, (w, kw) in variants.items() if outcome[k]["ok"]}
    del outcome
    cpu: dict[str, list[float]] = {w: [] for w in working}

    def timed(w):
        def run():
            t0 = time.process_time()
            working[w]()
            # MXNet casts asynchronously: a conversion is timed until its arrays are
            # written, not left to the next call's first wait (issue 42's 17 ms "copies")
            mx.nd.waitall()
            cpu[w].append(time.process_time() - t0)
        return run
    # the first call of each converter above was the warm-up
    wall = C.interleaved_times({w: timed(w) for w in working}, repeats, warmup=0)
    for w, ts in wall.items():
        row[w].update({"wall_s": ts, "median_s": C.median(ts), "median_cpu_s": C.median(cpu[w]),
                       "per_node_us": 1e6 * C.median(ts) / row["nodes"]})
    if "ours" in wall and "contrib" in wall:
        row["ratio_ours_over_contrib"] = C.paired_ratio(wall["ours"], wall["contrib"])
        row["cpu_ratio_ours_over_contrib"] = C.median(cpu["ours"]) / C.median(cpu["contrib"])
    if "ours_fold" in wall and "contrib" in wall:
        # the target of issue 42: 1.25x contrib's time (contrib folds nothing) plus 1 s per
        # GB of weights folded
        gb = folded_gb(sym, args, auxs)
        target = 1.25 * C.median(wall["contrib"]) + gb
        # the same test on CPU seconds (every thread of this process): on a shared machine
        # the wall time is mostly waiting for a core (loadavg in the environment)
        target_cpu = 1.25 * C.median(cpu["contrib"]) + gb
        row["fold_target"] = {"folded_gb": gb, "target_s": target,
                              "ours_fold_s": C.median(wall["ours_fold"]),
                              "within": C.median(wall["ours_fold"]) <= target,
                              "target_cpu_s": target_cpu, "ours_fold_cpu_s": C.median(cpu["ours_fold"]),
                              "within_cpu": C.median(cpu["ours_fold"]) <= target_cpu}
    for other, ref in (("ours", "contrib_cop"), ("ours_fold", "contrib"), ("ours", "base"),
                       ("base", "contrib"), ("ours_fold", "base_fold")):
        if other in wall and ref in wall:
            row[f"ratio_{other}_over_{ref}"] = C.paired_ratio(wall[other], wall[ref])
    return row


def folded_gb(sym, args, auxs) -> float:
    """GB of the weights BatchNorm folding rewrites (the producers' weights and biases)."""
    from mxnet_amp.ir.dtypes import array_nbytes
    from mxnet_amp.mx.io import graph_from_symbol
    from mxnet_amp.pipeline import fold_model
    model = fold_model(graph_from_symbol(sym), args, auxs)
    old = {**args, **auxs}
    return sum(array_nbytes(v) for k, v in {**model.arg_params, **model.aux_params}.items()
               if old.get(k) is not v) / 1e9


def _try(convert, sym, args, auxs, **kw) -> dict:
    """:func:`_common.try_convert` for any converter function."""
    try:
        s, a, x = convert(sym, args, auxs, **kw)
    except Exception as err:  # noqa: BLE001 - a failure is a result
        return {"ok": False, "error": C.error_text(err)}
    return {"ok": True, "sym": s, "args": a, "auxs": x}


def profile_ours(sym, args, auxs, target_dtype: str) -> dict:
    """Where our conversion spends its time: cumulative share of each stage, and the
    functions with the most own time."""
    prof = cProfile.Profile()
    prof.enable()
    C.convert_ours(sym, args, auxs, target_dtype=target_dtype)
    prof.disable()
    stats = pstats.Stats(prof)
    total = max(v[3] for v in stats.stats.values())  # the outermost cumulative time
    stages = {}
    for (path, line, func), (cc, nc, tt, ct, _) in stats.stats.items():
        if func in STAGES and "mxnet_amp" in path:
            stages[func] = {"what": STAGES[func], "calls": nc, "cum_s": ct,
                            "percent": 100 * ct / total}
    own = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:15]
    top = [{"function": f"{p.split('site-packages/')[-1].split('/work/main/')[-1]}:{ln}({fn})",
            "calls": v[1], "own_s": v[2], "own_percent": 100 * v[2] / total} for (p, ln, fn), v in own]
    return {"total_s": total, "stages": stages, "top_own_time": top,
            "note": "cProfile inflates pure-Python time more than C time; shares are indicative"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny cases, seconds (the smoke test)")
    ap.add_argument("--profile", action="store_true",
                    help="cProfile ours on resnet50_v1 and synthetic_10k (--quick: synthetic_1k)")
    ap.add_argument("--target-dtype", default="float16", choices=("float16", "bfloat16"))
    ap.add_argument("--out", help="JSON path (default benchmarks/results/conversion_speed.json)")
    ap.add_argument("--base", metavar="REV",
                    help="also time mxnet_amp at git revision REV, loaded beside this one, and "
                         "check that it gives the same symbol and params (same_output_as_base)")
    ap.add_argument("--cases", nargs="+", metavar="CASE", help="run only these cases")
    ap.add_argument("--repeats", type=int, help="timed rounds of every case (default: per case)")
    opts = ap.parse_args(argv)
    cases = QUICK if opts.quick else FULL
    if opts.repeats:
        cases = [(label, how, opts.repeats) for label, how, _ in cases]
    if opts.cases:
        unknown = set(opts.cases) - {c[0] for c in cases}
        if unknown:
            ap.error(f"unknown cases {sorted(unknown)}; choose from {[c[0] for c in cases]}")
        cases = [c for c in cases if c[0] in opts.cases]
    workdir = tempfile.mkdtemp(prefix="amp_base_") if opts.base else None
    base = load_base(opts.base, workdir) if opts.base else None
    load_start = os.getloadavg()   # the machine is shared: say how busy it was
    results = []
    profiles = []
    profiled = PROFILED_QUICK if opts.quick else PROFILED
    for label, how, repeats in cases:
        sym, args, auxs = build(label, how)
        row = {"case": label, "target_dtype": opts.target_dtype,
               **time_case(sym, args, auxs, repeats, opts.target_dtype, fold=how == "zoo",
                           base=base)}
        results.append(row)
        _print([row])
        if opts.profile and label in profiled:
            profiles.append({"case": label, **profile_ours(sym, args, auxs, opts.target_dtype)})
        del sym, args, auxs
    synth = [r for r in results if r["case"].startswith("synthetic") and r["ours"].get("ok")]
    growth = None
    if len(synth) >= 2:
        a, b = synth[0], synth[-1]
        growth = {"from": a["case"], "to": b["case"],
                  "node_ratio": b["nodes"] / a["nodes"],
                  "time_ratio": b["ours"]["median_s"] / a["ours"]["median_s"],
                  "per_node_us": {r["case"]: r["ours"]["per_node_us"] for r in synth}}
    env = {**C.environment(), "loadavg_start": load_start, "loadavg_end": os.getloadavg()}
    payload = {"benchmark": "conversion_speed", "environment": env,
               "results": results, "ours_growth": growth}
    if base is not None:
        payload["base"] = opts.base
        shutil.rmtree(workdir, ignore_errors=True)
    if opts.profile:
        payload["profiles"] = profiles
    print()
    _print(results)
    if growth:
        print(f"\nours: {growth['node_ratio']:.0f}x the nodes took {growth['time_ratio']:.1f}x the time")
    out = opts.out or C.default_out("conversion_speed", opts.quick)
    C.write_json(out, payload)
    print(f"wrote {out}")
    return 0


def _print(rows) -> None:
    table = []
    has_base = any("base" in r for r in rows)
    for r in rows:
        o, c = r["ours"], r["contrib"]
        line = [r["case"], r["nodes"], r["repeats"],
                o.get("median_s") if o["ok"] else "FAILED",
                c.get("median_s") if c["ok"] else "FAILED: " + c["error"][:60],
                r.get("ratio_ours_over_contrib"), r.get("ratio_ours_over_contrib_cop"),
                r.get("ratio_ours_fold_over_contrib"), o.get("per_node_us"),
                o["casts"]["amp_cast"] + o["casts"]["amp_multicast"] if o["ok"] else None,
                c["casts"]["amp_cast"] + c["casts"]["amp_multicast"] if c["ok"] else None]
        if has_base:
            b = r.get("base", {})
            line += [b.get("median_s"), r.get("ratio_ours_over_base"), r.get("same_output_as_base")]
        table.append(line)
    C.print_table(["case", "nodes", "runs", "ours s", "contrib s", "ours/contrib",
                   "ours/contrib_cop", "ours_fold/contrib", "ours us/node", "ours casts",
                   "contrib casts"] + (["base s", "ours/base", "same output"] if has_base else []),
                  table)


if __name__ == "__main__":
    raise SystemExit(main())
