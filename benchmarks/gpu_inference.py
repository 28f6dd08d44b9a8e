"""GPU inference: fp32 vs float16 vs bfloat16 models converted by ours and by ``mx.contrib.amp``.

Needs a CUDA build of MXNet (``mxnet-cu112``) and a visible GPU; anywhere else it refuses at
once with exit code 2 and writes nothing. See benchmarks/README.md for installing
``mxnet-cu112`` and the CUDA 11 runtime libraries it links against from PyPI. Never needed
by CI.

Each model is converted by both converters to float16 and bfloat16 (``cast_optional_params
=True``); every variant is bound on ``mx.gpu(0)`` and timed in interleaved rounds (the
order rotates each round). Reported per variant: throughput (items/s, median over rounds),
latency per batch (median and 90th percentile over all timed batches) and the speedup over
fp32 (median of per-round ratios). A variant that fails to convert or to run is recorded
with its error (MXNet 1.9.1 has few bfloat16 GPU kernels).

    python benchmarks/gpu_inference.py           # resnet50_v1 bs1/bs32, mobilenetv2_1.0 bs32,
                                                 # BERT-style encoder bs32
    python benchmarks/gpu_inference.py --quick   # resnet18_v1 at 64x64, a tiny encoder
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

REFUSAL_EXIT = 2

FULL = [("resnet50_v1_bs1", ("zoo", "resnet50_v1", 224), 1, 5, 20),
        ("resnet50_v1_bs32", ("zoo", "resnet50_v1", 224), 32, 5, 10),
        ("mobilenetv2_1.0_bs32", ("zoo", "mobilenetv2_1.0", 224), 32, 5, 10),
        ("bert_encoder_12x768_seq128_bs32", ("bert", dict(num_layers=12, units=768, heads=12, seq_len=128,
                                                          vocab=30522)), 32, 5, 10)]
QUICK = [("resnet18_v1_64px_bs2", ("zoo", "resnet18_v1", 64), 2, 1, 2),
         ("bert_encoder_1x32_seq8_bs2", ("bert", dict(num_layers=1, units=32, heads=2, seq_len=8, vocab=100)), 2, 1, 2)]


def gpu_problem() -> str | None:
    """Why this machine cannot run the benchmark, or None when it can."""
    try:
        import mxnet as mx
    except ImportError as err:
        return f"mxnet is not importable ({err})"
    try:
        cuda = mx.runtime.Features().is_enabled("CUDA")
    except Exception:  # noqa: BLE001 - very old builds lack runtime features
        cuda = False
    if not cuda:
        return (f"this MXNet ({mx.__version__}, {mx.__file__}) is a CPU-only build; install "
                "mxnet-cu112 and the CUDA 11 runtime libraries (benchmarks/README.md)")
    try:
        count = mx.context.num_gpus()
    except mx.base.MXNetError as err:
        from mxnet_amp.errors import error_text
        return f"MXNet cannot query the GPUs: {error_text(err)}"
    if count == 0:
        return "MXNet is a CUDA build but sees no GPU (no device, or no driver)"
    return None


def refuse(reason: str) -> int:
    print(f"gpu_inference: refusing to run: {reason}", file=sys.stderr)
    return REFUSAL_EXIT


def run_case(label, spec, batch, rounds, per_round) -> dict:
    import mxnet as mx

    import _common as C
    from cpu_inference import build
    ctx = mx.gpu(0)
    sym, args, auxs, make_data = build(spec)
    data = make_data(batch).as_in_context(ctx)
    row: dict = {"case": label, "batch": batch, "rounds": rounds, "batches_per_round": per_round,
                 "variants": {}}
    models = {"fp32": {"ok": True, "sym": sym, "args": args, "auxs": auxs}}
    for dtype in ("float16", "bfloat16"):
        for w in C.CONVERTERS:
            models[f"{dtype}_{w}"] = C.try_convert(w, sym, args, auxs, target_dtype=dtype,
                                                   cast_optional_params=True)
    runs = {}
    latencies: dict[str, list[float]] = {}
    for key, m in models.items():
        entry: dict = {"ok": m["ok"]}
        row["variants"][key] = entry
        if not m["ok"]:
            entry["error"] = "conversion failed: " + m["error"]
            continue
        entry["casts"] = C.cast_counts(m["sym"])
        try:
            exe = m["sym"].bind(ctx, args={**{k: v.as_in_context(ctx) for k, v in m["args"].items()},
                                           "data": data},
                                aux_states={k: v.as_in_context(ctx) for k, v in m["auxs"].items()},
                                grad_req="null")
            exe.forward(is_train=False)
            mx.nd.waitall()
        except Exception as err:  # noqa: BLE001 - recorded
            entry.update(ok=False, error="run failed: " + C.error_text(err))
            continue
        latencies[key] = []

        def one_round(exe=exe, key=key):
            for _ in range(per_round):
                t0 = time.perf_counter()
                for out in exe.forward(is_train=False):
                    out.wait_to_read()
                latencies[key].append(time.perf_counter() - t0)
        runs[key] = one_round
    times = C.interleaved_times(runs, rounds, warmup=1)
    for key, ts in times.items():
        lat = np.array(latencies[key][per_round:])  # drop the warm-up round
        row["variants"][key].update({
            "items_per_s": batch * per_round / C.median(ts),
            "latency_ms_median": 1e3 * float(np.median(lat)),
            "latency_ms_p90": 1e3 * float(np.percentile(lat, 90)),
            "speedup_over_fp32": C.paired_ratio(times["fp32"], ts) if "fp32" in times else None})
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny models, seconds")
    ap.add_argument("--out", help="JSON path (default benchmarks/results/gpu_inference.json)")
    opts = ap.parse_args(argv)
    problem = gpu_problem()
    if problem:
        return refuse(problem)
    import mxnet as mx

    import _common as C
    rows = []
    for case in (QUICK if opts.quick else FULL):
        rows.append(run_case(*case))
        _print(rows[-1:])
    print()
    _print(rows)
    out = opts.out or C.default_out("gpu_inference", opts.quick)
    C.write_json(out, {"benchmark": "gpu_inference", "cast_optional_params": True,
                       "gpu_count": mx.context.num_gpus(), "environment": C.environment(),
                       "results": rows})
    print(f"wrote {out}")
    return 0


def _print(rows) -> None:
    import _common as C
    table = []
    for r in rows:
        for key, v in r["variants"].items():
            table.append([r["case"], key, v.get("items_per_s"), v.get("latency_ms_median"),
                          v.get("latency_ms_p90"), v.get("speedup_over_fp32"),
                          (v["casts"]["amp_cast"] + v["casts"]["amp_multicast"]) if "casts" in v else None,
                          v.get("error", "")[:70]])
    C.print_table(["case", "variant", "items/s", "latency ms", "p90 ms", "x fp32", "casts", "error"], table)


if __name__ == "__main__":
    raise SystemExit(main())
