"""gluonnlp BERT-base inference on a CPU: float32, ours in bfloat16, mx.contrib.amp in bfloat16.

The model is gluonnlp 0.10's own ``bert_12_768_12`` (``pretrained=False``, random weights,
no pooler-less shortcuts: ``use_pooler`` default, no decoder or classifier; inputs
``(tokens, segments, valid_length)``), hybridized and run once, as a user has it. Both
converters get that block (``convert_hybrid_block``, bfloat16, defaults; contrib with
``ctx=mx.cpu()``). The three run interleaved round by round in one process (order
rotating); each figure is a median and each ratio the median of the per-round ratios. The
environment (CPU flags, load average at start and end) is recorded with the results.

Native bfloat16 needs ``mxnet_amp.hardware.bf16_runs_natively()``; elsewhere nothing low
precision is timed and the file says so. Needs the ``nlp`` extra (gluonnlp).

    python benchmarks/nlp_inference.py            # BERT-base, seq 128, batch 8 (minutes)
    python benchmarks/nlp_inference.py --quick    # 2 layers of width 64, seq 8, batch 2
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import _common as C

FULL = dict(label="bert_12_768_12_seq128_bs8", hparams={}, seq=128, batch=8, rounds=5)
QUICK = dict(label="bert_2x64_seq8_bs2", seq=8, batch=2, rounds=2,
             hparams=dict(num_layers=2, units=64, hidden_size=128, num_heads=4, max_length=32,
                          embed_size=64))
VOCAB = 8000


def _bert(cfg):
    """gluonnlp's BERT block, run once hybridized, and its inputs."""
    import gluonnlp as nlp
    import mxnet as mx
    vocab = nlp.vocab.BERTVocab(nlp.data.count_tokens([f"w{i}" for i in range(VOCAB)]))
    mx.random.seed(0)
    net, _ = nlp.model.get_model("bert_12_768_12", dataset_name=None, vocab=vocab,
                                 pretrained=False, use_decoder=False, use_classifier=False,
                                 hparam_allow_override=bool(cfg["hparams"]), **cfg["hparams"])
    net.initialize(mx.init.Normal(0.02))
    net.hybridize()
    rng = np.random.default_rng(0)
    inputs = (mx.nd.array(rng.integers(0, len(vocab), (cfg["batch"], cfg["seq"]))),
              mx.nd.zeros((cfg["batch"], cfg["seq"])), mx.nd.full((cfg["batch"],), cfg["seq"]))
    net(*inputs)
    return net, inputs


def _convert(which: str, net):
    """``(block or None, seconds, error text or None)``."""
    import mxnet as mx
    import mxnet_amp
    from mxnet.contrib import amp as contrib
    t0 = time.perf_counter()
    try:
        if which == "ours":
            block = mxnet_amp.convert_hybrid_block(net, "bfloat16")
        else:
            block = contrib.convert_hybrid_block(net, "bfloat16", ctx=mx.cpu())
    except Exception as err:  # noqa: BLE001  (recorded: contrib fails on BERT in bfloat16)
        return None, time.perf_counter() - t0, C.error_text(err)
    return block, time.perf_counter() - t0, None


def _runner(block, inputs):
    def run():
        out = block(*inputs)
        out = out if isinstance(out, (list, tuple)) else [out]
        for o in out:
            o.wait_to_read()
        return out
    return run


def measure(cfg) -> dict:
    from mxnet_amp.mx.hardware import bf16_runs_natively
    net, inputs = _bert(cfg)
    ref = [o.asnumpy() for o in _runner(net, inputs)()]
    row = {"model": cfg["label"], "batch": cfg["batch"], "seq_len": cfg["seq"]}
    fns = {"fp32": _runner(net, inputs)}
    for which in ("ours", "contrib"):
        block, seconds, error = _convert(which, net)
        row[f"{which}_convert_s"] = seconds
        row[f"{which}_error"] = error
        if block is None or not bf16_runs_natively():
            continue
        try:
            out = _runner(block, inputs)()
        except Exception as err:  # noqa: BLE001  (a converted model that does not run)
            row[f"{which}_error"] = C.error_text(err)
            continue
        row[f"{which}_max_rel_error"] = max(
            float(np.abs(o.astype("float32").asnumpy() - r).max() / np.abs(r).max())
            for o, r in zip(out, ref))
        fns[which] = _runner(block, inputs)
    if not bf16_runs_natively():
        row["note"] = "not measurable on this CPU (no avx512: oneDNN has no bf16 matmul kernels here)"
    times = C.interleaved_times(fns, cfg["rounds"])
    for name, ts in times.items():
        row[f"{name}_ms"] = 1000 * C.median(ts)
        row[f"{name}_seq_per_s"] = cfg["batch"] / C.median(ts)
        if name != "fp32":
            row[f"{name}_speedup_vs_fp32"] = C.paired_ratio(times["fp32"], ts)
    if "ours" in times and "contrib" in times:
        row["ours_speedup_vs_contrib"] = C.paired_ratio(times["contrib"], times["ours"])
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 2-layer BERT, seconds")
    parser.add_argument("--out", help="JSON file (default benchmarks/results/nlp_inference.json)")
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    env = C.environment()
    row = measure(cfg)
    end = C.environment()["loadavg"]
    C.write_json(args.out or C.default_out("nlp_inference", args.quick),
                 {"environment": env, "loadavg_end": end, "results": [row]})
    keys = [k for k in row if k.endswith(("_ms", "_speedup_vs_fp32", "_vs_contrib", "_rel_error"))]
    C.print_table(["model", *keys], [[row["model"], *[row[k] for k in keys]]])
    for which in ("ours", "contrib"):
        if row.get(f"{which}_error"):
            print(f"{which}: {row[f'{which}_error']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
