"""The automatic mode's emulation step per check: the model emulated from the conversion's
record (``emulation.emulate_conversion``: its graph and tensor dtypes, no type inference)
against the path it replaced (``emulate_model(conversion.symbol, ..., stored_dtypes=...)``:
symbol -> JSON -> graph, every dtype inferred again), interleaved in one process; the ratio
is the median of the per-round ratios record / re-derived (< 1: faster).

    python benchmarks/auto_check_speed.py           # synthetic 10k nodes and resnet18_v1
    python benchmarks/auto_check_speed.py --quick   # synthetic 1k nodes (seconds)
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common as C  # noqa: E402
from synthetic import synthetic_model  # noqa: E402


def measure(label: str, sym, arg_params, aux_params, repeats: int) -> dict:
    from mxnet_amp.convert import convert_model_full
    from mxnet_amp.emulation import emulate_conversion, emulate_model
    from mxnet_amp.options import make_options
    _, args, auxs, conversion = convert_model_full(sym, arg_params, aux_params, make_options("bfloat16"),
                                                   cast_params=False)
    stored = {**conversion.arg_dtypes, **conversion.aux_dtypes}
    times = C.interleaved_times({
        "record": lambda: emulate_conversion(conversion, args, auxs),
        "rederived": lambda: emulate_model(conversion.symbol, args, auxs, stored_dtypes=stored)},
        repeats)
    return {"case": label, "nodes": C.num_nodes(sym), "record_s": C.median(times["record"]),
            "rederived_s": C.median(times["rederived"]),
            "record/rederived": C.paired_ratio(times["record"], times["rederived"]), "rounds": repeats}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    cases = [("synthetic_1k", 1_000, 5)] if args.quick else [("synthetic_10k", 10_000, 7),
                                                              ("resnet18_v1", "zoo", 7)]
    results = []
    for label, how, repeats in cases:
        model = C.zoo_checkpoint(label) if how == "zoo" else synthetic_model(how)
        results.append(measure(label, *model[:3], repeats))
    C.print_table(list(results[0]), [list(r.values()) for r in results])
    C.write_json(args.out or C.default_out("auto_check_speed", args.quick),
                 {"environment": C.environment(), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
