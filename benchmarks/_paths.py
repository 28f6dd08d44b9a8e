"""The per-path speed table of ``cpu_inference.py --per-path``: every way a user runs a model.

For each model, from the user's fp32 Gluon block (a gluoncv zoo net, or a BERT-base-shaped
encoder as a ``SymbolBlock``):

  * ``fp32_block``          the user's fp32 block, ``hybridize()`` as users call it
  * ``fp32_module``         its exported checkpoint in ``mx.mod.Module`` (MXNet fuses at bind)
  * ``ours_block``          ``convert_hybrid_block(net, 'bfloat16', fold_batchnorm=True)`` as
                            returned (the default backend: fused oneDNN kernels)
  * ``ours_block_unfolded`` the same with ``fold_batchnorm=False`` as returned (a BatchNorm
                            left after a bf16 conv keeps it on MXNet's generic kernels)
  * ``ours_module``         ``ours_block.export()`` loaded into ``mx.mod.Module`` (fused at bind)
  * ``ours_imports``        that checkpoint via ``SymbolBlock.imports`` + ``hybridize()``
  * ``ours_imports_mkldnn`` the same + ``hybridize(backend='MKLDNN', static_alloc=True,
                            static_shape=True)``
  * ``ours_imports_fused``  ``ours_block.export(fused_for='cpu')`` (the checkpoint written
                            already partitioned by oneDNN) via ``SymbolBlock.imports`` + a
                            plain ``hybridize()``
  * ``contrib_best``        ``mx.contrib.amp.convert_model(..., cast_optional_params=True)``
                            in ``mx.mod.Module`` (contrib's fastest path in cpu_inference.json)

With ``--tune [CACHE.json]`` each batch size also gets ``ours_block``, ``ours_module`` and
``ours_imports_fused`` converted with ``tune=`` at that batch's shape (``tuned_block``,
``tuned_module``, ``tuned_imports_fused``), and the tuning record (each kernel's fp32 / bf16
time, the nodes kept fp32, the whole model untuned and tuned) is kept with the results. Where
the tuned model is the untuned one (``tuned_same_graph``), the tuned paths are the ``ours_*``
rows and are not timed twice.

Each batch size is one timing phase: every runner called in interleaved rounds (order
rotating), one process; figures are medians, ratios medians of per-round ratios. The error of
each runner is its largest |out - ref| over the largest |ref|, ``ref`` the user's fp32 block on
the same batch.
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

import _common as C

BERT_BASE = dict(num_layers=12, units=768, heads=12, seq_len=128, vocab=8000)
BLOCK_PATHS = ("ours_block", "ours_block_unfolded", "ours_imports", "ours_imports_mkldnn",
               "ours_imports_fused")
MODULE_PATHS = ("ours_module", "contrib_best")

# (label, builder spec, {batch: (rounds, batches per round)})
FULL = [("resnet50_v1", ("zoo", "resnet50_v1", 224), {1: (4, 3), 8: (4, 1)}),
        ("mobilenetv2_1.0", ("zoo", "mobilenetv2_1.0", 224), {1: (4, 6), 8: (4, 2)}),
        ("mobilenetv3_large", ("zoo", "mobilenetv3_large", 224), {1: (4, 6), 8: (4, 2)}),
        ("densenet121", ("zoo", "densenet121", 224), {1: (4, 3), 8: (4, 1)}),
        ("inceptionv3", ("zoo", "inceptionv3", 299), {1: (4, 2), 8: (3, 1)}),
        ("bert_base_seq128", ("bert", BERT_BASE), {1: (3, 1), 8: (3, 1)})]
DECONV_HEAD = ("deconv_head_resnet18", ("deconv", "resnet18_v1", 224), {1: (4, 3), 8: (4, 1)})
QUICK = [("resnet18_v1_64px", ("zoo", "resnet18_v1", 64), {1: (2, 1), 2: (2, 1)}),
         ("bert_1x32_seq8", ("bert", dict(num_layers=1, units=32, heads=2, seq_len=8, vocab=100)),
          {2: (2, 1)})]


def user_block(spec):
    """``(the user's fp32 block, make_input(batch), what it is)``."""
    import mxnet as mx
    if spec[0] == "deconv":
        return _deconv_head_block(*spec[1:])
    if spec[0] == "zoo":
        _, name, size = spec
        net = C.zoo_net(name, size, calibrate=True)

        def images(batch):
            return mx.nd.array(np.random.default_rng(batch).uniform(-1, 1, (batch, 3, size, size)))
        return net, images, f"gluoncv {name} (random He init, calibrated BatchNorm), {size}px"
    cfg = spec[1]
    sym, args, auxs = C.bert_encoder(**cfg)
    net = C.imported_block(sym, args, auxs)
    net.hybridize()

    def tokens(batch):
        return mx.nd.array(np.random.default_rng(batch).integers(0, cfg["vocab"], (batch, cfg["seq_len"])))
    net(tokens(1))   # as a user's block that ran (export() needs a forward pass)
    what = (f"BERT-shaped encoder {cfg['num_layers']}x{cfg['units']}, {cfg['heads']} heads, seq "
            f"{cfg['seq_len']} (benchmarks/_common.bert_encoder; gluonnlp not used)")
    return net, tokens, what


def _deconv_head_block(backbone: str, size: int):
    """A text-detector-like net: a zoo backbone's features to stride 32, then two 2x2 /
    stride-2 Deconvolutions (each + relu) and a 1x1 conv score map (random init, BatchNorm
    statistics calibrated)."""
    import mxnet as mx
    from mxnet.gluon import nn
    base = C.zoo_net(backbone, size, calibrate=True)
    net = nn.HybridSequential(prefix="deconvhead_")
    with net.name_scope():
        net.add(base.features[:-1])   # up to the last stage (no global pool)
        for channels in (128, 64):
            net.add(nn.Conv2DTranspose(channels, 2, strides=2), nn.Activation("relu"))
        net.add(nn.Conv2D(1, 1))
    for p in net.collect_params().values():
        if p._data is None:   # the head (biases keep their zero init)
            p.initialize(default_init=mx.init.Xavier())
    net.hybridize()

    def images(batch):
        return mx.nd.array(np.random.default_rng(batch).uniform(-1, 1, (batch, 3, size, size)))
    net(images(1))
    return net, images, (f"gluoncv {backbone} features (random He init, calibrated BatchNorm) + two "
                         f"2x2/stride-2 Deconvolution(+relu) and a 1x1 score conv, {size}px")


def _block_run(block):
    def run(x):
        out = block(x)
        out = out[0] if isinstance(out, (list, tuple)) else out
        out.wait_to_read()
        return out
    return run


def _module_run(sym, args, auxs):
    """A function running a batch through ``mx.mod.Module`` (re-bound when the batch changes)."""
    import mxnet as mx
    state = {}

    def run(x):
        if state.get("shape") != x.shape:
            mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
            mod.bind(data_shapes=[("data", x.shape)], for_training=False, grad_req="null")
            mod.set_params(args, auxs, allow_missing=False, allow_extra=False)
            state.update(shape=x.shape, mod=mod)
        state["mod"].forward(mx.io.DataBatch([x]), is_train=False)
        out = state["mod"].get_outputs()[0]
        out.wait_to_read()
        return out
    return run


def runners(net, folder: str, fp32_ops=None) -> tuple[dict, dict]:
    """Every path's runner, and what was converted (conversion seconds); ``fp32_ops`` go to
    our conversions (a list decision measured on every path)."""
    import mxnet as mx
    from mxnet.contrib import amp as contrib

    import mxnet_amp
    info = {}
    sym, args, auxs = C.block_checkpoint(net)
    run = {"fp32_block": _block_run(net), "fp32_module": _module_run(sym, args, auxs)}
    t0 = time.perf_counter()
    ours = mxnet_amp.convert_hybrid_block(net, target_dtype="bfloat16", fold_batchnorm=True,
                                          fp32_ops=fp32_ops)
    info["ours_convert_s"] = time.perf_counter() - t0
    info["ours_block_backend"] = ours.default_backend
    unfolded = mxnet_amp.convert_hybrid_block(net, target_dtype="bfloat16", fold_batchnorm=False,
                                              fp32_ops=fp32_ops)
    info["ours_block_unfolded_backend"] = unfolded.default_backend
    run.update(ours_block=_block_run(ours), ours_block_unfolded=_block_run(unfolded))
    prefix = os.path.join(folder, "ours")
    sym_file, params_file = ours.export(prefix)
    run["ours_module"] = _module_run(*mx.model.load_checkpoint(prefix, 0))
    plain = mx.gluon.SymbolBlock.imports(sym_file, ["data"], params_file)
    plain.hybridize()
    fused = mx.gluon.SymbolBlock.imports(sym_file, ["data"], params_file)
    fused.hybridize(backend="MKLDNN", static_alloc=True, static_shape=True)
    run.update(ours_imports=_block_run(plain), ours_imports_mkldnn=_block_run(fused))
    fused_sym, fused_params = ours.export(prefix + "_fused", fused_for="cpu")
    fused_file = mx.gluon.SymbolBlock.imports(fused_sym, ["data"], fused_params)
    fused_file.hybridize()
    run["ours_imports_fused"] = _block_run(fused_file)
    csym, cargs, cauxs = contrib.convert_model(sym, dict(args), dict(auxs), target_dtype="bfloat16",
                                               cast_optional_params=True)
    run["contrib_best"] = _module_run(csym, cargs, cauxs)
    return run, info


def max_rel_err(out, ref: np.ndarray) -> float:
    got = out.astype("float32").asnumpy()
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def phase(run: dict, x, rounds: int, inner: int) -> dict:
    """One batch size: errors vs the fp32 block, then the interleaved timing."""
    row: dict = {"batch": int(x.shape[0]), "rounds": rounds, "batches_per_round": inner, "paths": {}}
    ref = run["fp32_block"](x).asnumpy()
    fns = {}
    for path, fn in run.items():
        try:
            out = fn(x)      # also the warm-up: a shape change re-plans / re-binds here
        except Exception as err:  # noqa: BLE001 - a path that does not run is a result
            row["paths"][path] = {"error": C.error_text(err)}
            continue
        row["paths"][path] = {"max_rel_err_vs_fp32_block": max_rel_err(out, ref)}
        fns[path] = (lambda fn=fn: fn(x))
    times = C.interleaved_times(fns, rounds, warmup=0, inner=inner)
    for path, ts in times.items():
        r = row["paths"][path]
        r.update(round_s=ts, ms_per_batch=1e3 * C.median(ts) / inner,
                 items_per_s=x.shape[0] * inner / C.median(ts))
        for base in ("fp32_block", "fp32_module"):
            if base in times and path != base:
                r[f"x_{base}"] = C.paired_ratio(times[base], ts)
    return row


def tuned_runners(net, folder: str, shape: tuple, cache: str, fp32_ops=None) -> tuple[dict, dict]:
    """The tuned paths at ``shape`` (``tune=cache``), and the tuning record: the conversion
    ``convert_hybrid_block(..., tune=)`` runs, its block hybridized as the converter does."""
    import mxnet as mx

    from mxnet_amp.convert import convert_model_full
    from mxnet_amp.gluon.adapter import converted_symbol_block
    from mxnet_amp.options import OpLists, make_options
    sym, args, auxs = C.block_checkpoint(net)
    t0 = time.perf_counter()
    s2, a2, x2, conv = convert_model_full(sym, args, auxs,
                                          make_options("bfloat16", OpLists(fp32_ops=fp32_ops), tune=cache),
                                          data_shapes={"data": shape})
    seconds = time.perf_counter() - t0
    info = {"tuned_convert_s": seconds,
            "tuning": conv.tuning.to_dict() if conv.tuning is not None else None}
    record = info["tuning"] or {}
    if record.get("untuned_model_ms") is None or not record.get("applied", True):
        # the tuned model is the untuned one (tune_policy found the two graphs equal, or the
        # whole-model check dropped the choices): its paths are the ours_* rows, not timed twice
        return {}, {**info, "tuned_same_graph": True}
    tuned = converted_symbol_block(net, ["data"], s2, a2, x2)
    tuned.default_backend = "MKLDNN"
    tuned.hybridize(backend="MKLDNN", static_alloc=True, static_shape=True)
    prefix = os.path.join(folder, f"tuned_bs{shape[0]}")
    tuned.export(prefix)
    fused_sym, fused_params = tuned.export(prefix + "_fused", fused_for="cpu")
    fused = mx.gluon.SymbolBlock.imports(fused_sym, ["data"], fused_params)
    fused.hybridize()
    run = {"tuned_block": _block_run(tuned),
           "tuned_module": _module_run(*mx.model.load_checkpoint(prefix, 0)),
           "tuned_imports_fused": _block_run(fused)}
    return run, {**info, "tuned_same_graph": False}


def run_case(label: str, spec, batches: dict, fp32_ops=None, tune: str | None = None) -> dict:
    net, make_input, what = user_block(spec)
    with tempfile.TemporaryDirectory() as folder:
        run, info = runners(net, folder, fp32_ops)
        case = {"case": label, "model": what, **info, "load_start": os.getloadavg(), "batches": []}
        for batch, (rounds, inner) in batches.items():
            x = make_input(batch)
            phase_run, tuned = dict(run), {}
            if tune:
                extra, tuned = tuned_runners(net, folder, tuple(x.shape), tune, fp32_ops)
                phase_run.update(extra)
            row = phase(phase_run, x, rounds, inner)
            row.update(tuned)
            case["batches"].append(row)
    case["load_end"] = os.getloadavg()
    return case


def targets(cases: list) -> dict:
    """The issue's targets on what was measured: ours_block >= 2x fp32_block and >= 1.8x
    fp32_module; no bf16 path slower than fp32 on its own kind of path (block paths against
    the fp32 block, module paths against the fp32 module)."""
    out = {}
    for c in cases:
        for b in c["batches"]:
            p, key = b["paths"], f"{c['case']} bs{b['batch']}"
            ours = p.get("ours_block", {})
            out[f"{key}: ours_block >= 2x fp32_block"] = ours.get("x_fp32_block", 0) >= 2
            out[f"{key}: ours_block >= 1.8x fp32_module"] = ours.get("x_fp32_module", 0) >= 1.8
            slower = [n for n in BLOCK_PATHS + TUNED_BLOCK_PATHS if p.get(n, {}).get("x_fp32_block", 1) < 1]
            slower += [n for n in MODULE_PATHS + ("tuned_module",) if p.get(n, {}).get("x_fp32_module", 1) < 1]
            out[f"{key}: paths slower than fp32"] = ", ".join(slower) or "none"
            if "tuned_block" in p or b.get("tuned_same_graph"):
                out.update(_tune_targets(key, b))
    return out


TUNED_BLOCK_PATHS = ("tuned_block", "tuned_imports_fused")
# each tuned path and its untuned counterpart
TUNED_VS = {"tuned_block": "ours_block", "tuned_module": "ours_module",
            "tuned_imports_fused": "ours_imports_fused"}


def _tune_targets(key: str, b: dict) -> dict:
    """Issue 34's targets on one row: no tuned path slower than fp32 on its kind of path, no
    kernel kept bf16 slower than fp32 as timed, each tuned path >= its untuned one."""
    p, out = b["paths"], {}
    base = {"tuned_block": "fp32_block", "tuned_imports_fused": "fp32_block", "tuned_module": "fp32_module"}
    # the same graph: the tuned paths are the untuned rows
    timed = {n: TUNED_VS[n] if b.get("tuned_same_graph") else n for n in base}
    out[f"{key}: tuned paths slower than fp32"] = ", ".join(
        timed[n] for n, ref in base.items() if p.get(timed[n], {}).get(f"x_{ref}", 1) < 1) or "none"
    tuning = b.get("tuning") or {}
    slow_kept = [k["kernel"] for k in tuning.get("kernels", [])
                 if k["kept"] != "float32" and k["low_ms"] > k["fp32_ms"]]
    if not tuning.get("applied", True):
        slow_kept = [k["kernel"] for k in tuning.get("kernels", []) if k["low_ms"] > k["fp32_ms"]]
    out[f"{key}: kernels kept bf16 slower than fp32 (as timed)"] = ", ".join(slow_kept) or "none"
    if b.get("tuned_same_graph"):
        out[f"{key}: tuned paths slower than untuned"] = "none (the tuned model is the untuned one)"
        return out
    worse = []
    for tuned, untuned in TUNED_VS.items():
        if tuned in p and untuned in p and "ms_per_batch" in p[tuned] and "ms_per_batch" in p[untuned]:
            # x untuned: the untuned path's time over the tuned one's (above 1: tuned faster)
            ratio = C.paired_ratio(p[untuned]["round_s"], p[tuned]["round_s"])
            p[tuned]["x_untuned"] = ratio
            if ratio < 1:
                worse.append(f"{tuned} {ratio:.2f}x")
    out[f"{key}: tuned paths slower than untuned"] = ", ".join(worse) or "none"
    return out


def print_case(case: dict) -> None:
    rows = []
    for b in case["batches"]:
        for path, r in b["paths"].items():
            rows.append([case["case"], b["batch"], path, r.get("ms_per_batch"), r.get("x_fp32_block"),
                         r.get("x_fp32_module"), r.get("max_rel_err_vs_fp32_block"), r.get("error", "")])
    C.print_table(["case", "bs", "path", "ms/batch", "x fp32 block", "x fp32 module", "err", "error"], rows)


def main(opts) -> int:
    from mxnet_amp.mx.hardware import bf16_runs_natively
    if not bf16_runs_natively():
        print("bf16 does not run natively here: the per-path table needs an avx512 CPU")
        return 0
    env = {**C.environment(), "loadavg_start": os.getloadavg()}
    name = "cpu_inference_paths" + ("_amx" if opts.amx else "")
    out = opts.out or C.default_out(name, opts.quick)
    listed = QUICK if opts.quick else FULL + [DECONV_HEAD]
    chosen = [c for c in listed if not opts.cases or c[0] in opts.cases]
    if opts.cases:   # in the order asked
        chosen.sort(key=lambda c: opts.cases.index(c[0]))
    cases, t0 = [], time.perf_counter()
    for label, spec, batches in chosen:
        cases.append(run_case(label, spec, batches, opts.ours_fp32_ops, opts.tune))
        print_case(cases[-1])
        C.write_json(out, {"benchmark": "cpu_inference_paths", "target_dtype": "bfloat16",
                           "ours_fp32_ops": opts.ours_fp32_ops, "amx_enabled": opts.amx,
                           "tune_cache": opts.tune,
                           "environment": {**env, "loadavg_end": os.getloadavg()},
                           "complete": len(cases) == len(chosen), "wall_s": time.perf_counter() - t0,
                           "targets": targets(cases), "results": cases})
    for k, v in targets(cases).items():
        print(f"target: {k}: {v}")
    print(f"wrote {out}")
    return 0
