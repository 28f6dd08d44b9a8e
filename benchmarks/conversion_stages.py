"""Where a conversion's wall time goes, stage by stage, before and after a change.

Each stage function of ``convert_model`` (and MXNet's own whole-graph calls) is wrapped
with a timer, for this ``mxnet_amp`` and, with ``--base REV``, for the one at git revision
``REV`` loaded beside it; both convert the same synthetic graph in interleaved rounds
(no profiler: these are plain wall times, medians over rounds). Stages nest (``graph_to_symbol``
holds a ``load_json``), so the column does not add up to the total.

    python benchmarks/conversion_stages.py --nodes 100000 --rounds 3 --base a450558
"""
from __future__ import annotations

import argparse
import collections
import functools
import importlib
import os
import shutil
import statistics
import tempfile
import time

import _common as C
from conversion_speed import load_base
from synthetic import synthetic_model

# the stage functions of a conversion, timed wherever a version's modules bind them (the
# modules that call them moved between versions: convert.py, then pipeline.py and passes/)
STAGES = ("graph_from_symbol", "check_params", "check_param_shapes", "insert_casts",
          "tag_param_dtypes", "graph_to_symbol", "infer_types", "recast_params")
MX_CALLS = ("tojson", "list_arguments", "list_auxiliary_states", "infer_shape_partial")


def _timed(owner, name: str, label: str, spent: dict) -> None:
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[label] += time.perf_counter() - t0
    setattr(owner, name, timed)


def _wrap_stages(pkg, spent: dict) -> list[str]:
    """Time each of ``STAGES`` in every module of ``pkg`` that binds it (the caller's
    module imports it by name); returns the stages no module of this version has."""
    import pkgutil
    modules = []
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if info.name.endswith("__main__"):   # runs the command line when imported
            continue
        try:
            modules.append(importlib.import_module(info.name))
        except ImportError:   # an optional extra (dask, onnx) not installed
            continue
    found = set()
    for module in modules:
        for name in STAGES:
            if callable(getattr(module, name, None)):
                _timed(module, name, name, spent)
                found.add(name)
    return [name for name in STAGES if name not in found]


def main(argv=None) -> int:
    import mxnet as mx
    import mxnet_amp
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--base", metavar="REV", help="also time mxnet_amp at git revision REV")
    ap.add_argument("--out", help="JSON path (default benchmarks/results/conversion_stages.json)")
    opts = ap.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="amp_base_") if opts.base else None
    versions = {"now": mxnet_amp}
    if opts.base:
        versions["base"] = load_base(opts.base, workdir)
    spent: dict = collections.defaultdict(float)
    missing = {v: _wrap_stages(pkg, spent) for v, pkg in versions.items()}
    for v, names in missing.items():
        if names:
            print(f"{v}: no module binds {', '.join(names)} (not timed)")
    for name in MX_CALLS:
        _timed(mx.sym.Symbol, name, "mx." + name, spent)
    _timed(mx.sym, "load_json", "mx.load_json", spent)
    load_start = os.getloadavg()
    sym, args, auxs = synthetic_model(opts.nodes)
    for pkg in versions.values():   # warm-up: op probes, lists, caches
        pkg.convert_model(sym, args, auxs)
    times: dict = {v: collections.defaultdict(list) for v in versions}
    names = list(versions)
    for r in range(opts.rounds):
        for v in names[r % len(names):] + names[:r % len(names)]:
            spent.clear()
            t0 = time.perf_counter()
            versions[v].convert_model(sym, args, auxs)
            times[v]["total"].append(time.perf_counter() - t0)
            for label, s in spent.items():
                times[v][label].append(s)
    medians = {v: {k: statistics.median(ts) for k, ts in t.items()} for v, t in times.items()}
    ref = "base" if "base" in medians else "now"
    rows = sorted(medians[ref], key=lambda k: -medians[ref][k])
    C.print_table(["stage"] + [f"{v} s" for v in versions],
                  [[k] + [medians[v].get(k) for v in versions] for k in rows])
    payload = {"benchmark": "conversion_stages", "nodes": C.num_nodes(sym), "rounds": opts.rounds,
               "environment": {**C.environment(), "loadavg_start": load_start,
                               "loadavg_end": os.getloadavg()},
               "median_s": medians, "times_s": {v: dict(t) for v, t in times.items()},
               "stages_not_found": missing}
    if opts.base:
        payload["base"] = opts.base
        payload["paired_ratio_now_over_base"] = C.paired_ratio(times["now"]["total"],
                                                               times["base"]["total"])
        print(f"now/base (median of per-round ratios): {payload['paired_ratio_now_over_base']:.3f}")
        shutil.rmtree(workdir, ignore_errors=True)
    out = opts.out or C.default_out("conversion_stages", False)
    C.write_json(out, payload)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
