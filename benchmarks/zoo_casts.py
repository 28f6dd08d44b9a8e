"""Cast counts and low precision param bytes, ours vs ``mx.contrib.amp``, across gluoncv.

Every model is built with random weights (``pretrained=False``), converted by both to
float16 and bfloat16, with ``cast_optional_params`` False and True. For each conversion the
``amp_cast`` / ``amp_multicast`` node counts and the bytes of params stored in low
precision are recorded; a converter that raises is recorded with its error. A model that
cannot be built here is listed as such (no converter ran on it).

    python benchmarks/zoo_casts.py           # the subset below
    python benchmarks/zoo_casts.py --quick   # seconds: two small nets at 64x64
"""
from __future__ import annotations

import argparse
import time

import _common as C

FULL = ["resnet18_v1", "resnet50_v1", "resnet50_v2", "resnet50_v1b", "resnext50_32x4d",
        "se_resnext50_32x4d", "mobilenet1.0", "mobilenetv2_1.0",
        "mobilenetv3_large", "squeezenet1.0", "densenet121", "inceptionv3", "googlenet",
        "darknet53", "ssd_512_mobilenet1.0_voc", "ssd_512_resnet50_v1_voc",
        "yolo3_mobilenet1.0_voc", "yolo3_darknet53_voc", "center_net_resnet18_v1b_voc",
        "faster_rcnn_resnet50_v1b_voc", "simple_pose_resnet18_v1b"]
QUICK = [("resnet18_v1", 64), ("mobilenet0.25", 64)]
SETTINGS = [(dt, opt) for dt in ("float16", "bfloat16") for opt in (False, True)]


def convert_all(sym, args, auxs) -> dict:
    out = {}
    for dtype, optional in SETTINGS:
        key = f"{dtype}{'_cast_optional_params' if optional else ''}"
        out[key] = {}
        for w in C.CONVERTERS:
            res = C.try_convert(w, sym, args, auxs, target_dtype=dtype, cast_optional_params=optional)
            if res["ok"]:
                out[key][w] = {"ok": True, **C.cast_counts(res["sym"]),
                               "low_precision_param_bytes": C.param_bytes(res["args"], res["auxs"])["low_precision"]}
            else:
                out[key][w] = {"ok": False, "error": res["error"]}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two tiny nets, seconds (the smoke test)")
    ap.add_argument("--models", nargs="*", help="zoo names to run instead of the default subset")
    ap.add_argument("--out", help="JSON path (default benchmarks/results/zoo_casts.json)")
    opts = ap.parse_args(argv)
    models = QUICK if opts.quick else [(m, None) for m in (opts.models or FULL)]
    rows = []
    t0 = time.perf_counter()
    for name, size in models:
        try:
            sym, args, auxs = C.zoo_checkpoint(name, size)
        except Exception as err:  # noqa: BLE001 - recorded, the sweep goes on
            rows.append({"model": name, "built": False, "error": C.error_text(err)})
            print(f"{name}: could not build here: {rows[-1]['error']}")
            continue
        rows.append({"model": name, "built": True, "nodes": C.num_nodes(sym),
                     "fp32_param_bytes": C.param_bytes(args, auxs)["total"],
                     "conversions": convert_all(sym, args, auxs)})
        _print(rows[-1:])
    summary = summarise(rows)
    print()
    _print(rows)
    print("\nsummary:", summary)
    out = opts.out or C.default_out("zoo_casts", opts.quick)
    C.write_json(out, {"benchmark": "zoo_casts", "environment": C.environment(),
                       "wall_s": time.perf_counter() - t0, "summary": summary, "results": rows})
    print(f"wrote {out}")
    return 0


def summarise(rows) -> dict:
    """Per setting: on how many models each converter failed, and where both worked, how many
    models ours has fewer / equal / more cast nodes (amp_cast + amp_multicast)."""
    summary = {}
    for dtype, optional in SETTINGS:
        key = f"{dtype}{'_cast_optional_params' if optional else ''}"
        s = {"models": 0, "ours_failed": [], "contrib_failed": [], "fewer": 0, "equal": 0, "more": 0,
             "ours_casts_total": 0, "contrib_casts_total": 0,
             "ours_lp_bytes_total": 0, "contrib_lp_bytes_total": 0}
        for r in rows:
            if not r.get("built"):
                continue
            s["models"] += 1
            conv = r["conversions"][key]
            o, c = conv["ours"], conv["contrib"]
            if not o["ok"]:
                s["ours_failed"].append(r["model"])
            if not c["ok"]:
                s["contrib_failed"].append(r["model"])
            if o["ok"] and c["ok"]:
                no, nc = o["amp_cast"] + o["amp_multicast"], c["amp_cast"] + c["amp_multicast"]
                s["fewer" if no < nc else "equal" if no == nc else "more"] += 1
                s["ours_casts_total"] += no
                s["contrib_casts_total"] += nc
                s["ours_lp_bytes_total"] += o["low_precision_param_bytes"]
                s["contrib_lp_bytes_total"] += c["low_precision_param_bytes"]
        summary[key] = s
    return summary


def _print(rows) -> None:
    table = []
    for r in rows:
        if not r.get("built"):
            table.append([r["model"], "not built", "", "", "", "", ""])
            continue
        for key, conv in r["conversions"].items():
            cells = []
            for w in ("contrib", "ours"):
                x = conv[w]
                cells.append(f"{x['amp_cast']}+{x['amp_multicast']}m" if x["ok"] else "FAILED")
            lp = [conv[w]["low_precision_param_bytes"] / 2**20 if conv[w]["ok"] else None
                  for w in ("contrib", "ours")]
            err = conv["contrib"].get("error", "")[:50] or conv["ours"].get("error", "")[:50]
            table.append([r["model"], key, *cells, *lp, err])
    C.print_table(["model", "setting", "contrib casts", "ours casts", "contrib lp MiB",
                   "ours lp MiB", "error"], table)


if __name__ == "__main__":
    raise SystemExit(main())
