"""One op at a time: MXNet 1.9.1's bfloat16 CPU kernel against its float32 kernel.

The bfloat16 list (lists/bfloat16.toml) keeps in float32 the elementwise ops whose bfloat16
kernel is MXNet's generic one (it truncates, and it is slow) and lets the oneDNN ones run in
bfloat16; this measures what that rests on. Each op runs on one tensor (plus a second one,
or a per-channel one for the broadcast forms) in float32 and in bfloat16, interleaved round
by round; a figure is the median of the rounds, the ratio the median of per-round ratios.
Each row also gives the op's category in the shipped bfloat16 list. An op that cannot run
in bfloat16 here (oneDNN's kernels need an AVX-512 CPU) is recorded with its error.

    python benchmarks/bf16_kernels.py            # 8x96x28x28, seconds to a minute
    python benchmarks/bf16_kernels.py --quick    # 2x4x8x8, seconds
"""
from __future__ import annotations

import argparse
import os

import numpy as np

import _common as C

# label -> (op name in the lists, call on (x, y, per-channel b, weights w))
OPS = {
    "_plus_scalar": ("_plus_scalar", lambda mx, x, y, b, w: x + 3.0),
    "_mul_scalar": ("_mul_scalar", lambda mx, x, y, b, w: x * 1.37),
    "_div_scalar": ("_div_scalar", lambda mx, x, y, b, w: x / 6.0),
    "_rminus_scalar": ("_rminus_scalar", lambda mx, x, y, b, w: 1.0 - x),
    "_maximum_scalar": ("_maximum_scalar", lambda mx, x, y, b, w: mx.nd.maximum(x, 0.5)),
    "elemwise_mul": ("elemwise_mul", lambda mx, x, y, b, w: mx.nd.elemwise_mul(x, y)),
    "elemwise_sub": ("elemwise_sub", lambda mx, x, y, b, w: mx.nd.elemwise_sub(x, y)),
    "elemwise_div": ("elemwise_div", lambda mx, x, y, b, w: mx.nd.elemwise_div(x, y)),
    "broadcast_add": ("broadcast_add", lambda mx, x, y, b, w: mx.nd.broadcast_add(x, b)),
    "broadcast_mul": ("broadcast_mul", lambda mx, x, y, b, w: mx.nd.broadcast_mul(x, b)),
    "broadcast_greater": ("broadcast_greater", lambda mx, x, y, b, w: mx.nd.broadcast_greater(x, y)),
    "clip": ("clip", lambda mx, x, y, b, w: mx.nd.clip(x, 0, 6)),
    "relu (op)": ("relu", lambda mx, x, y, b, w: mx.nd.relu(x)),
    "sigmoid (op)": ("sigmoid", lambda mx, x, y, b, w: mx.nd.sigmoid(x)),
    "mean over H, W": ("mean", lambda mx, x, y, b, w: mx.nd.mean(x, axis=(2, 3), keepdims=True)),
    "elemwise_add": ("elemwise_add", lambda mx, x, y, b, w: mx.nd.elemwise_add(x, y)),
    "Activation(relu)": ("Activation", lambda mx, x, y, b, w: mx.nd.Activation(x, act_type="relu")),
    "LeakyReLU(gelu)": ("LeakyReLU", lambda mx, x, y, b, w: mx.nd.LeakyReLU(x, act_type="gelu")),
    "Concat": ("Concat", lambda mx, x, y, b, w: mx.nd.Concat(x, y, dim=1)),
    "reshape": ("Reshape", lambda mx, x, y, b, w: mx.nd.reshape(x, shape=(0, -1))),
    # the matrix ops (oneDNN kernels) that set a model's bf16 ceiling on this CPU
    "Convolution 3x3": ("Convolution", lambda mx, x, y, b, w: mx.nd.Convolution(
        x, w["3x3"], kernel=(3, 3), pad=(1, 1), num_filter=96, no_bias=True)),
    "Convolution 3x3 depthwise": ("Convolution", lambda mx, x, y, b, w: mx.nd.Convolution(
        x, w["dw"], kernel=(3, 3), pad=(1, 1), num_filter=x.shape[1], num_group=x.shape[1],
        no_bias=True)),
    # 72 channels, not a multiple of 16: oneDNN's reference gemm kernel in bf16 (the
    # [[slow_kernel]] rule of lists/bfloat16.toml); its own input, 72 of x's channels
    "Convolution 3x3 depthwise, 72 ch": ("Convolution", lambda mx, x, y, b, w: mx.nd.Convolution(
        w["x72"], w["dw72"], kernel=(3, 3), pad=(1, 1), num_filter=w["x72"].shape[1],
        num_group=w["x72"].shape[1], no_bias=True)),
    "Convolution 1x1": ("Convolution", lambda mx, x, y, b, w: mx.nd.Convolution(
        x, w["1x1"], kernel=(1, 1), num_filter=96, no_bias=True)),
    "FullyConnected": ("FullyConnected", lambda mx, x, y, b, w: mx.nd.FullyConnected(
        x, w["fc"], num_hidden=96, no_bias=True)),
    "batch_dot": ("batch_dot", lambda mx, x, y, b, w: mx.nd.batch_dot(
        x.reshape((-1, x.shape[-2], x.shape[-1])), y.reshape((-1, y.shape[-2], y.shape[-1])))),
}
# the attributes the category column is decided for (the list may decide by shape)
ATTRS = {"Convolution 3x3 depthwise": {"num_group": "96", "num_filter": "96"},
         "Convolution 3x3 depthwise, 72 ch": {"num_group": "72", "num_filter": "72"}}


def inputs(shape, dtype: str):
    """``(x, y, b, w)``: two tensors of ``shape``, a per-channel one and a dict of weights
    (96 output channels / units over ``shape``'s channels, and a 72-channel depthwise one with
    its own input ``x72``: at most 72 of ``x``'s channels), in ``dtype``."""
    import mxnet as mx
    from mxnet_amp.mx.params import cast_array
    rng = np.random.default_rng(0)
    c = shape[1]
    arrays = [rng.uniform(-4, 4, s) for s in (shape, shape, shape[:2] + (1,) * (len(shape) - 2))]
    weights = {"3x3": (96, c, 3, 3), "dw": (c, 1, 3, 3), "1x1": (96, c, 1, 1),
               "fc": (96, int(np.prod(shape[1:])))}
    nd = [mx.nd.array(a, dtype="float32") for a in arrays]
    w = {k: mx.nd.array(rng.normal(0, 0.05, s), dtype="float32") for k, s in weights.items()}
    c72 = min(c, 72)
    w["x72"] = nd[0][:, :c72].copy()
    w["dw72"] = mx.nd.array(rng.normal(0, 0.05, (c72, 1, 3, 3)), dtype="float32")
    if dtype != "float32":
        nd, w = [cast_array(a, dtype) for a in nd], {k: cast_array(a, dtype) for k, a in w.items()}
    return [*nd, w]


def measure(label: str, shape, rounds: int, inner: int, policy) -> dict:
    import mxnet as mx
    op, call = OPS[label]
    attrs = ATTRS.get(label, {})
    # a node of a [[slow_kernel]] shape is kept float32 by that rule, whatever its op's category
    category = "fp32" if policy.slow_kernel(op, attrs) else policy.decide(op, attrs).value
    row = {"op": label, "list_op": op, "bfloat16_category": category}
    fns = {}
    for dtype in ("float32", "bfloat16"):
        args = inputs(shape, dtype)

        def run(args=args):
            call(mx, *args).wait_to_read()
        try:
            run()
        except Exception as err:  # noqa: BLE001 - an op that cannot run is a result
            row[f"{dtype}_error"] = C.error_text(err)
            continue
        fns[dtype] = run
    if len(fns) < 2:
        return row
    times = C.interleaved_times(fns, rounds, warmup=1, inner=inner)
    row.update({f"{d}_ms": 1e3 * C.median(ts) / inner for d, ts in times.items()})
    row["bf16_over_fp32"] = C.paired_ratio(times["bfloat16"], times["float32"])
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a tiny tensor, seconds (the smoke test)")
    ap.add_argument("--out", help="JSON path (default benchmarks/results/bf16_kernels.json)")
    ap.add_argument("--amx", action="store_true",
                    help="mxnet_amp.mx.hardware.enable_amx() first: oneDNN may run bf16 on Intel AMX")
    opts = ap.parse_args(argv)
    amx = False
    if opts.amx:   # before the first MXNet operation of the process
        from mxnet_amp.mx.hardware import enable_amx
        amx = enable_amx()
    from mxnet_amp import load_policy
    from mxnet_amp.mx.hardware import bf16_runs_natively
    shape, rounds, inner = ((2, 4, 8, 8), 2, 2) if opts.quick else ((8, 96, 28, 28), 7, 10)
    policy = load_policy("bfloat16")
    load_start = os.getloadavg()
    rows = [measure(label, shape, rounds, inner, policy) for label in OPS]
    C.print_table(["op", "bf16 list", "fp32 ms", "bf16 ms", "bf16 / fp32", "error"],
                  [[r["op"], r["bfloat16_category"], r.get("float32_ms"), r.get("bfloat16_ms"),
                    r.get("bf16_over_fp32"), r.get("bfloat16_error", r.get("float32_error", ""))]
                   for r in rows])
    out = opts.out or C.default_out("bf16_kernels" + ("_amx" if amx else ""), opts.quick)
    C.write_json(out, {"benchmark": "bf16_kernels", "shape": list(shape), "rounds": rounds,
                       "calls_per_round": inner, "bf16_runs_natively": bf16_runs_natively(),
                       "amx_enabled": amx,
                       "environment": {**C.environment(), "loadavg_start": load_start,
                                       "loadavg_end": os.getloadavg()},
                       "results": rows})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
