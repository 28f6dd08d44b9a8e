"""The automatic mode's emulation step per check: the model emulated from the conversion's
record (``emulation.emulate_conversion``: its graph and tensor dtypes, no type inference)
against the path it replaced (``emulate_model(conversion.symbol, ..., stored_dtypes=...)``:
symbol -> JSON -> graph, every dtype inferred again), interleaved in one process; the ratio
is the median of the per-round ratios record / re-derived (< 1: faster).

Then the check pass itself (issue 41, item 8): a float16 check on a CPU runs the
emulation, so its pass over the data is the emulated model's forward passes; here
resnet50_v1's float32 pass against its emulated float16 pass, both run as a worker process
of the automatic mode runs a pass over ``eval_data`` (a
:class:`~mxnet_amp.auto.workers.ModelBlob` unpickled and loaded once per pass, then each
batch), interleaved in one process: ``emulated`` with its roundings by the compiled kernels
(:mod:`mxnet_amp.kernels`; the result's ``kernels`` says whether they ran),
``emulated_casts`` by MXNet's casts (``MXNET_AMP_NO_KERNELS=1``, the same bits), and
``emulated_before`` the
emulation as it was before issue 41's item 8, for comparison in the same run: every low
precision tensor rounded by its own round trip (the pass's selecting-op rule off) and the
weights rounded in the graph at every batch.

    python benchmarks/auto_check_speed.py           # synthetic 10k nodes and resnet18_v1
    python benchmarks/auto_check_speed.py --quick   # synthetic 1k nodes (seconds)
    python benchmarks/auto_check_speed.py --check-pass [--batch 8 --batches 2]
"""
from __future__ import annotations

import argparse
import os
import pickle
import sys
from unittest import mock

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


def check_pass(name: str, batch: int, batches: int, repeats: int) -> dict:
    """Seconds per sample of ``name``'s float32 pass and of its emulated float16 pass (the
    check pass), side by side; ratios are medians of per-round ratios."""
    import mxnet as mx
    import numpy as np
    from mxnet_amp.auto.workers import ModelBlob, run_model
    from mxnet_amp.convert import convert_model_full
    from mxnet_amp.emulation import emulate_conversion
    from mxnet_amp.mx.hardware import environ_set
    from mxnet_amp.kernels.build import DISABLE_ENV, kernel_state
    from mxnet_amp.options import make_options
    from mxnet_amp.passes import emulate as emulate_pass
    sym, args, auxs = C.zoo_checkpoint(name)[:3]
    _, cargs, cauxs, conversion = convert_model_full(sym, args, auxs, make_options("float16"),
                                                     cast_params=False)
    esym, eargs, eauxs = emulate_conversion(conversion, cargs, cauxs)
    with mock.patch.object(emulate_pass, "_selects_values", lambda *a: False):
        osym, oargs, oauxs = emulate_conversion(conversion, cargs, cauxs)
    rng = np.random.default_rng(0)
    data = [{"data": rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)}
            for _ in range(batches)]

    def blob_pass(s, params, kernels=True):
        # what a worker process loads: the blob unpickled (pickled once, as the pool does);
        # kernels=False: the roundings by MXNet's casts (MXNET_AMP_NO_KERNELS=1)
        sent = pickle.dumps(ModelBlob(("pass", name), s, params, {"data": "float32"}))

        def run():
            with environ_set(DISABLE_ENV, None if kernels else "1"):
                blob = pickle.loads(sent)
                for inputs in data:
                    blob.run(inputs)
        return run

    sent_before = pickle.dumps(ModelBlob(("before", name), osym, {**oargs, **oauxs},
                                         {"data": "float32"}))

    def before():
        # unpickled as the others are, then run as ModelBlob ran it before (weights rounded
        # in the graph at every batch)
        blob = pickle.loads(sent_before)
        op = mx.nd.CachedOp(blob.sym)
        for inputs in data:
            run_model(op, blob.sym.list_inputs(),
                      {**blob.params, "data": mx.nd.array(inputs["data"])})
    state = kernel_state()
    times = C.interleaved_times({"float32": blob_pass(sym, {**args, **auxs}),
                                 "emulated": blob_pass(esym, {**eargs, **eauxs}),
                                 "emulated_casts": blob_pass(esym, {**eargs, **eauxs}, False),
                                 "emulated_before": before}, repeats)
    samples = batch * batches
    return {"case": f"{name} check pass", "batch": batch, "samples": samples,
            "kernels": state.describe(),
            "float32_s_per_sample": C.median(times["float32"]) / samples,
            "emulated_s_per_sample": C.median(times["emulated"]) / samples,
            "emulated/float32": C.paired_ratio(times["emulated"], times["float32"]),
            "emulated_casts/float32": C.paired_ratio(times["emulated_casts"], times["float32"]),
            "emulated_before/float32": C.paired_ratio(times["emulated_before"], times["float32"]),
            "rounds": repeats,
            # each round's ratios (the machine is shared: their spread shows the load's noise)
            "per_round": {k: [round(a / b, 3) for a, b in zip(times[k], times["float32"])]
                          for k in ("emulated", "emulated_casts", "emulated_before")}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--check-pass", action="store_true",
                    help="resnet50_v1's float32 pass against its emulated float16 check pass")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--batches", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    if args.check_pass:
        result = check_pass("resnet50_v1", args.batch, args.batches, args.repeats)
        C.print_table(list(result), [list(result.values())])
        C.write_json(args.out or C.default_out("auto_check_pass", False),
                     {"environment": C.environment(), "results": [result]})
        return 0
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
