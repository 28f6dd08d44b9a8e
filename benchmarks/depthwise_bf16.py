"""Depthwise convolutions in bfloat16 on the CPU: which to keep float32 (the bfloat16 list's
``[[slow_kernel]]`` rule rests on this).

Two parts, each run through ``mx.mod.Module`` (oneDNN fusion on), interleaved round by round:

* **layers**: one 3x3 depthwise convolution (batch 8, 28x28) per channel count, float32
  against our bfloat16 conversion of it with the rule off (the casts in and out included:
  a node kept float32 in a bfloat16 model pays them too);
* **models**: zoo nets with depthwise convolutions, batch 8, 224x224: float32, our default
  (the rule on), the rule off (``Convolution`` moved to the target list, which drops the
  rule for it) and every depthwise convolution float32 (``excluded_sym_names``), each with
  its error against float32 on the same batch.

Needs a CPU that runs bfloat16 natively; ``--amx`` calls ``mxnet_amp.mx.hardware.enable_amx()``
first (oneDNN 2.4.4 has no AMX depthwise kernel, so the layers differ little; the dense
convolutions around them do).

    python benchmarks/depthwise_bf16.py --amx      # ~2 min on 2 cores
    python benchmarks/depthwise_bf16.py --quick    # seconds
"""
from __future__ import annotations

import argparse
import os

import numpy as np

import _common as C

CHANNELS = (16, 24, 32, 40, 64, 72, 96, 120, 144, 184, 200, 240)
MODELS = ("mobilenetv3_large", "mobilenetv3_small", "mobilenetv2_1.0", "mobilenet1.0")
RULE_OFF = {"target_dtype_ops": ["Convolution"], "overrides": "move"}


def _module(sym, args, auxs, shape):
    import mxnet as mx
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", shape)], for_training=False)
    mod.set_params(args, auxs, allow_missing=False, allow_extra=True)
    return mod


def _runner(mod, x):
    import mxnet as mx
    batch = mx.io.DataBatch([x])

    def run():
        mod.forward(batch, is_train=False)
        return mod.get_outputs()[0].astype("float32").asnumpy()
    return run


def _timed(fns: dict, rounds: int) -> dict:
    """Median ms per variant, its ratio to float32, and its error against float32's output."""
    outs = {k: f() for k, f in fns.items()}
    times = C.interleaved_times(fns, rounds, warmup=1)
    ref = outs["fp32"]
    scale = float(np.abs(ref).max()) or 1.0
    return {k: {"ms": 1e3 * C.median(times[k]),
                "fp32_over_this": C.paired_ratio(times["fp32"], times[k]),
                "max_rel_err": float(np.abs(outs[k] - ref).max()) / scale} for k in fns}


def layer_row(channels: int, size: int, rounds: int) -> dict:
    import mxnet as mx
    import mxnet_amp as amp
    shape = (8, channels, size, size)
    y = mx.sym.Convolution(mx.sym.var("data"), mx.sym.var("weight"), kernel=(3, 3), pad=(1, 1),
                           num_filter=channels, num_group=channels, no_bias=True)
    args = {"weight": mx.nd.random.normal(0, 0.3, shape=(channels, 1, 3, 3))}
    bf16 = amp.convert_model(y, args, {}, target_dtype="bfloat16", **RULE_OFF)
    x = mx.nd.random.normal(shape=shape)
    fns = {"fp32": _runner(_module(y, args, {}, shape), x),
           "bf16": _runner(_module(*bf16, shape), x)}
    return {"channels": channels, "shape": list(shape),
            # the [[slow_kernel]] rule keeps this node float32, else the target list runs it in bf16
            "default_category": "fp32" if amp.load_policy("bfloat16").slow_kernel(
                "Convolution", {"num_group": str(channels), "num_filter": str(channels)}) else "target",
            **_timed(fns, rounds)}


def model_row(name: str, size: int, batch: int, rounds: int) -> dict:
    import mxnet as mx
    import mxnet_amp as amp
    sym, args, auxs = C.zoo_checkpoint(name, size)
    depthwise = [n["name"] for n in C.symbol_nodes(sym) if n["op"] == "Convolution"
                 and n.get("attrs", {}).get("num_group", "1") not in ("1", None)
                 and n["attrs"]["num_group"] == n["attrs"].get("num_filter")]
    policy = amp.load_policy("bfloat16")
    slow = [n for n in C.symbol_nodes(sym) if n["name"] in depthwise
            and policy.slow_kernel("Convolution", n["attrs"]) is not None]
    shape = (batch, 3, size, size)
    x = mx.nd.random.uniform(shape=shape)
    variants = {"fp32": (sym, args, auxs),
                "ours": amp.convert_model(sym, args, auxs, target_dtype="bfloat16"),
                "rule_off": amp.convert_model(sym, args, auxs, target_dtype="bfloat16", **RULE_OFF),
                "depthwise_fp32": amp.convert_model(sym, args, auxs, target_dtype="bfloat16",
                                                    excluded_sym_names=depthwise)}
    fns = {k: _runner(_module(*v, shape), x) for k, v in variants.items()}
    return {"model": name, "batch": batch, "size": size, "depthwise": len(depthwise),
            "kept_fp32_by_rule": len(slow),
            "kept_channels": sorted({int(n["attrs"]["num_group"]) for n in slow}),
            **_timed(fns, rounds)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two layers and one small model, seconds")
    ap.add_argument("--amx", action="store_true", help="mxnet_amp.mx.hardware.enable_amx() first")
    ap.add_argument("--out", help="JSON path (default benchmarks/results/depthwise_bf16[_amx].json)")
    opts = ap.parse_args(argv)
    amx = False
    if opts.amx:
        from mxnet_amp.mx.hardware import enable_amx
        amx = enable_amx()
    from mxnet_amp.mx.hardware import bf16_runs_natively
    out = opts.out or C.default_out("depthwise_bf16" + ("_amx" if amx else ""), opts.quick)
    env = C.environment()
    if not bf16_runs_natively():
        C.write_json(out, {"benchmark": "depthwise_bf16", "skipped": "bfloat16 does not run "
                           "natively on this CPU", "environment": env})
        print(f"bfloat16 does not run natively here; wrote {out}")
        return 0
    channels, models = ((24, 32), ("mobilenetv3_small",)) if opts.quick else (CHANNELS, MODELS)
    size, layer_rounds, model_rounds = (64, 3, 3) if opts.quick else (224, 15, 10)
    layers = [layer_row(c, 28, layer_rounds) for c in channels]
    C.print_table(["channels", "default", "fp32 ms", "bf16 ms (rule off)", "fp32 / bf16"],
                  [[r["channels"], r["default_category"], r["fp32"]["ms"], r["bf16"]["ms"],
                    r["bf16"]["fp32_over_this"]] for r in layers])
    rows = [model_row(m, size, 8, model_rounds) for m in models]
    C.print_table(["model", "rule keeps", "variant", "ms", "fp32 / this", "error"],
                  [[r["model"], f'{r["kept_fp32_by_rule"]}/{r["depthwise"]}', k, r[k]["ms"],
                    r[k]["fp32_over_this"], r[k]["max_rel_err"]]
                   for r in rows for k in ("fp32", "ours", "rule_off", "depthwise_fp32")])
    C.write_json(out, {"benchmark": "depthwise_bf16", "amx_enabled": amx, "layers": layers,
                       "models": rows, "environment": {**env, "loadavg_end": os.getloadavg()}})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
