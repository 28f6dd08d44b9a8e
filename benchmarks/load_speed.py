"""Load speed of a saved bfloat16 checkpoint: the default save against the two fast loads.

A bfloat16 model saved unfused (``save_checkpoint`` / ``export`` defaults) and loaded the way
Gluon users load (``SymbolBlock.imports`` + a plain ``hybridize()``) runs MXNet's generic
bf16 kernel for ops that oneDNN only fuses into the convolution before them (relu6's
``clip`` in mobilenetv2: 35 nodes). The save warns (:class:`mxnet_amp.mx.fused.SlowLoadWarning`)
and names the two fast loads measured here, side by side in one process (interleaved rounds,
ratios per round against the float32 block loaded the same way):

* ``fp32``: the float32 checkpoint, ``imports`` + ``hybridize()``;
* ``fp32 backend=MKLDNN``: the same, ``hybridize(backend='MKLDNN', static_alloc=True,
  static_shape=True)`` (what the bf16 fast load is compared with too);
* ``bf16 default``: the default bf16 checkpoint, ``imports`` + ``hybridize()`` (the trap);
* ``bf16 backend=MKLDNN``: the same files, ``hybridize(backend='MKLDNN', static_alloc=True,
  static_shape=True)``;
* ``bf16 fused_for=cpu``: saved with ``fused_for='cpu'``, ``imports`` + ``hybridize()``.

Where bfloat16 does not run natively (``hardware.bf16_runs_natively()``) nothing is timed:
the result says so and goes beside the shipped one (``load_speed_not_native.json``).

    nice -n 10 python benchmarks/load_speed.py             # mobilenetv2_1.0, 224 px, bs 1 and 8
    python benchmarks/load_speed.py --quick                # 32 px, bs 1, 3 rounds (smoke test)
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common as C  # noqa: E402

LOADS = ("fp32", "fp32 backend=MKLDNN", "bf16 default", "bf16 backend=MKLDNN", "bf16 fused_for=cpu")


def _files(net, folder: str) -> dict:
    """The float32, the default bf16 and the fused bf16 checkpoints of ``net``, and what
    the default save said."""
    import mxnet_amp as amp
    net.export(os.path.join(folder, "fp32"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bf16 = amp.convert_block(net, target_dtype="bfloat16")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bf16.export(os.path.join(folder, "bf16"))
    bf16.export(os.path.join(folder, "bf16_fused"), fused_for="cpu")
    said = [str(w.message) for w in caught if w.category.__name__ == "SlowLoadWarning"]
    return {"fp32": "fp32", "fp32 backend=MKLDNN": "fp32", "bf16 default": "bf16", "bf16 backend=MKLDNN": "bf16",
            "bf16 fused_for=cpu": "bf16_fused", "said": said}


def _loaded(folder: str, name: str, load: str):
    import mxnet as mx
    block = mx.gluon.SymbolBlock.imports(os.path.join(folder, f"{name}-symbol.json"), ["data"],
                                         os.path.join(folder, f"{name}-0000.params"), ctx=mx.cpu())
    if load.endswith("backend=MKLDNN"):
        block.hybridize(backend="MKLDNN", static_alloc=True, static_shape=True)
    else:
        block.hybridize()
    return block


def measure(model: str, size: int, batch: int, rounds: int, folder: str, files: dict) -> dict:
    import mxnet as mx
    import numpy as np
    x = mx.nd.array(np.random.default_rng(0).uniform(-1, 1, (batch, 3, size, size)).astype("float32"))
    blocks = {load: _loaded(folder, files[load], load) for load in LOADS}

    def run(block):
        return lambda: block(x).wait_to_read()
    times = C.interleaved_times({k: run(b) for k, b in blocks.items()}, rounds, warmup=2)
    row = {"model": model, "batch": batch, "size": size, "rounds": rounds,
           "median_ms": {k: C.median(v) * 1e3 for k, v in times.items()},
           "speed_vs_fp32": {k: C.paired_ratio(times["fp32"], v) for k, v in times.items()}}
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="32 px, batch 1, 3 rounds")
    ap.add_argument("--model", default="mobilenetv2_1.0")
    ap.add_argument("--rounds", type=int, default=15, help="interleaved rounds per batch size")
    ap.add_argument("--out", default=None, help="result JSON (default benchmarks/results/...)")
    opts = ap.parse_args(argv)
    from mxnet_amp.mx.hardware import bf16_runs_natively, cpu_summary
    env = {**C.environment(), "cpu_summary": cpu_summary()}
    out = opts.out or C.default_out("load_speed", opts.quick)
    if not bf16_runs_natively():
        if opts.out is None:   # never over the shipped figures
            out = out.replace(".json", "_not_native.json")
        C.write_json(out, {"environment": env, "results": [], "note":
                           "not measurable: bfloat16 does not run natively on this CPU "
                           f"({cpu_summary()})"})
        print("bfloat16 does not run natively here: nothing timed; wrote", out)
        return 0
    size, batches, rounds = (32, (1,), 3) if opts.quick else (224, (1, 8), opts.rounds)
    results = []
    with tempfile.TemporaryDirectory() as folder:
        net = C.zoo_net(opts.model, size)
        files = _files(net, folder)
        for batch in batches:
            row = measure(opts.model, size, batch, rounds, folder, files)
            row["save_said"] = files["said"]
            results.append(row)
            print(opts.model, f"bs {batch}:", {k: f"{v:.1f} ms" for k, v in row["median_ms"].items()},
                  {k: f"x{v:.2f}" for k, v in row["speed_vs_fp32"].items()}, flush=True)
    C.write_json(out, {"environment": env, "results": results})
    print("wrote", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
