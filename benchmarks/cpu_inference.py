"""CPU inference in bfloat16: fp32 vs ``mx.contrib.amp``-converted vs ours.

For each model both converters turn the fp32 checkpoint into a bfloat16 model (with
``cast_optional_params=True``, so weights feeding only bf16 ops are stored in bf16); the cast
counts and low precision param bytes of both are recorded. Throughput is measured in one
process, the variants interleaved round by round (fp32, contrib, ours, rotating), and the
ratios are medians of the per-round ratios.

bfloat16 Convolution / FullyConnected need an AVX-512 CPU in MXNet 1.9.1 (oneDNN);
where ``mxnet_amp.hardware.bf16_runs_natively()`` is False the bf16 throughput is recorded
as not measurable rather than a number, and only fp32 is timed.

    python benchmarks/cpu_inference.py           # resnet50_v1 bs1/bs8, mobilenetv2_1.0,
                                                 # a BERT-style encoder, ssd_512_mobilenet1.0_voc
    python benchmarks/cpu_inference.py --quick   # seconds: resnet18_v1 at 64x64, a tiny encoder
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import _common as C

NOT_MEASURABLE = "not measurable on this CPU (no avx512: oneDNN has no bf16 conv/FC kernels here)"

# (label, builder, batch, rounds, batches per round)
FULL = [("resnet50_v1_bs1", ("zoo", "resnet50_v1", 224), 1, 5, 10),
        ("resnet50_v1_bs8", ("zoo", "resnet50_v1", 224), 8, 5, 3),
        ("mobilenetv2_1.0_bs1", ("zoo", "mobilenetv2_1.0", 224), 1, 5, 10),
        ("bert_encoder_4x256_seq128_bs8", ("bert", dict(num_layers=4, units=256, heads=4, seq_len=128)), 8, 5, 3),
        ("ssd_512_mobilenet1.0_voc_bs1", ("zoo", "ssd_512_mobilenet1.0_voc", 512), 1, 5, 3)]
QUICK = [("resnet18_v1_64px_bs1", ("zoo", "resnet18_v1", 64), 1, 1, 1),
         ("bert_encoder_1x32_seq8_bs2", ("bert", dict(num_layers=1, units=32, heads=2, seq_len=8, vocab=100)), 2, 1, 1)]


def build(spec):
    """``(sym, args, auxs, data_array_maker)`` for a model spec."""
    import mxnet as mx
    kind = spec[0]
    if kind == "zoo":
        _, name, size = spec
        sym, args, auxs = C.zoo_checkpoint(name, size)

        def data(batch):
            return mx.nd.array(np.random.default_rng(1).uniform(-1, 1, (batch, 3, size, size)))
        return sym, args, auxs, data
    _, cfg = spec
    sym, args, auxs = C.bert_encoder(**cfg)
    vocab, seq = cfg.get("vocab", 8000), cfg["seq_len"]

    def tokens(batch):
        return mx.nd.array(np.random.default_rng(1).integers(0, vocab, (batch, seq)))
    return sym, args, auxs, tokens


def bind(sym, args, auxs, data):
    """A forward-only executor; returns a function running one batch to completion."""
    import mxnet as mx
    exe = sym.bind(mx.cpu(), args={**args, "data": data}, aux_states=dict(auxs), grad_req="null")

    def run():
        outs = exe.forward(is_train=False)
        for out in outs:
            out.wait_to_read()
        return outs
    return run


def max_rel_diff(outs, ref) -> float:
    """Largest |out - ref| over the largest |ref|, across the float outputs (fp32 reference)."""
    worst = 0.0
    for o, r in zip(outs, ref):
        a, b = o.astype("float32").asnumpy(), r.asnumpy()
        if b.size and np.issubdtype(b.dtype, np.floating):
            worst = max(worst, float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)))
    return worst


def measure(variants: dict, batch: int, rounds: int, per_round: int) -> dict:
    def repeat(run):
        def go():
            for _ in range(per_round):
                run()
        return go
    times = C.interleaved_times({k: repeat(v) for k, v in variants.items()}, rounds, warmup=1)
    out = {k: {"round_s": ts, "items_per_s": batch * per_round / C.median(ts)} for k, ts in times.items()}
    return out, times


def run_case(label, spec, batch, rounds, per_round, native: bool) -> dict:
    sym, args, auxs, make_data = build(spec)
    data = make_data(batch)
    row: dict = {"case": label, "batch": batch, "rounds": rounds, "batches_per_round": per_round,
                 "nodes": C.num_nodes(sym), "fp32_param_bytes": C.param_bytes(args, auxs)["total"]}
    kw = {"target_dtype": "bfloat16", "cast_optional_params": True}
    converted = {}
    for w in C.CONVERTERS:
        res = C.try_convert(w, sym, args, auxs, **kw)
        if res["ok"]:
            row[w] = {"ok": True, "casts": C.cast_counts(res["sym"]),
                      "low_precision_param_bytes": C.param_bytes(res["args"], res["auxs"])["low_precision"]}
            converted[w] = res
        else:
            row[w] = {"ok": False, "error": res["error"]}
    variants = {"fp32": bind(sym, args, auxs, data)}
    if native:
        ref = [o.copy() for o in variants["fp32"]()]
        for w, res in converted.items():
            try:
                run = bind(res["sym"], res["args"], res["auxs"], data)
                # a sanity check that the bf16 model computes the same function
                row[w]["max_rel_diff_vs_fp32"] = max_rel_diff(run(), ref)
                variants[w] = run
            except Exception as err:  # noqa: BLE001 - a model that does not run is a result
                row[w]["run_error"] = C.error_text(err)
    measured, times = measure(variants, batch, rounds, per_round)
    row["fp32"] = measured["fp32"]
    for w in C.CONVERTERS:
        if w in measured:
            row[w].update(measured[w])
            row[w]["speedup_over_fp32"] = C.paired_ratio(times["fp32"], times[w])
        else:
            row[w]["items_per_s"] = NOT_MEASURABLE if not native else None
    if "ours" in times and "contrib" in times:
        row["ours_over_contrib_throughput"] = C.paired_ratio(times["contrib"], times["ours"])
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny models, seconds (the smoke test)")
    ap.add_argument("--out", help="JSON path (default benchmarks/results/cpu_inference.json)")
    opts = ap.parse_args(argv)
    from mxnet_amp.hardware import bf16_runs_natively
    native = bf16_runs_natively()
    if not native:
        print("note: bf16 throughput is " + NOT_MEASURABLE + "; timing fp32 and counting casts only")
    rows = []
    t0 = time.perf_counter()
    for case in (QUICK if opts.quick else FULL):
        rows.append(run_case(*case, native=native))
        _print(rows[-1:])
    print()
    _print(rows)
    out = opts.out or C.default_out("cpu_inference", opts.quick)
    C.write_json(out, {"benchmark": "cpu_inference", "target_dtype": "bfloat16",
                       "cast_optional_params": True, "bf16_runs_natively": native,
                       "environment": C.environment(), "wall_s": time.perf_counter() - t0,
                       "results": rows})
    print(f"wrote {out}")
    return 0


def _print(rows) -> None:
    def casts(r):
        return (r["casts"]["amp_cast"] + r["casts"]["amp_multicast"]) if r["ok"] else "FAILED"

    def speed(r):
        v = r.get("items_per_s")
        return "n/a (no avx512)" if v == NOT_MEASURABLE else v
    C.print_table(["case", "fp32 items/s", "contrib items/s", "ours items/s", "ours/contrib", "ours/fp32",
                   "contrib casts", "ours casts"],
                  [[r["case"], r["fp32"]["items_per_s"], speed(r["contrib"]), speed(r["ours"]),
                    r.get("ours_over_contrib_throughput"), r["ours"].get("speedup_over_fp32"),
                    casts(r["contrib"]), casts(r["ours"])] for r in rows])


if __name__ == "__main__":
    raise SystemExit(main())
