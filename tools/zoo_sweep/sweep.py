"""One model through the sweep: prepared once, then converted, run and judged per dtype."""
from __future__ import annotations

import os
import tempfile
import time
import warnings
from typing import Any, Sequence

from mxnet_amp.emulation import round_numpy

from .checks import (_bind_forward, _copies, _named, _widened, _with_heads, checked_entries, compare,
                     degenerate, strip_casts)
from .common import AUTO_MAX_EXECUTIONS, DTYPES, STRUCTURE_TOL, TOLERANCE, _first_line
from .models import (_batchnorms_in, _calibrate_batchnorm_train_mode, _fp32_forward, calibrate_batchnorm,
                     calibrate_graph_batchnorm, family_of)


class _Model:
    """One zoo model prepared for the sweep: built, BatchNorm set, exported, its float32
    reference computed on the outputs the sweep checks (see :func:`checked_entries`)."""

    def __init__(self, name: str, bn: str):
        import mxnet as mx
        import numpy as np
        self.rec: dict[str, Any] = {"model": name, "family": family_of(name), "bn": bn}
        mx.random.seed(0)  # the same random weights and input on every run
        np.random.seed(0)
        t0 = time.time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            net, shape, self.x = _fp32_forward(name)
            calibrated = self._set_batchnorm(net, shape, bn)
        self.rec.update(input_shape=list(shape), calibrated_batchnorms=calibrated,
                        params_m=round(sum(int(p.data().size) for p in net.collect_params().values()
                                           if p._data is not None) / 1e6, 2))
        self.net = net
        self.rec["build_s"] = round(time.time() - t0, 2)

    def _set_batchnorm(self, net, shape, bn: str) -> int:
        if bn == "identity":
            return 0
        try:
            return calibrate_batchnorm(net, shape)
        except Exception as err:  # noqa: BLE001 - a net that only runs hybridized
            self.rec["bn_note"] = ("sequential calibration failed (" + _first_line(err)[:120]
                                   + "); train-mode batch statistics instead")
            return _calibrate_batchnorm_train_mode(net, shape)

    def export(self) -> None:
        """Export as a user with a checkpoint would, drop the net; the fp32 reference."""
        import mxnet as mx
        import numpy as np
        with tempfile.TemporaryDirectory(prefix="zoo_sweep_") as tmp:
            self.net.export(os.path.join(tmp, "m"))
            self.sym, self.args, self.auxs = mx.model.load_checkpoint(os.path.join(tmp, "m"), 0)
        self.data_names = [n for n in self.sym.list_arguments() if n not in self.args]
        if self.data_names != ["data"]:
            return
        self.rec["batchnorms_in_graph"] = sum(1 for n in self.sym.list_auxiliary_states()
                                              if n.endswith(("_running_var", "_moving_var")))
        if self.rec["bn"] == "calibrated":
            # BatchNorm ops no Gluon block holds (a detector's SymbolBlock backbone)
            try:
                self.auxs, n = calibrate_graph_batchnorm(self.sym, self.args, self.auxs,
                                                         tuple(self.rec["input_shape"]))
            except Exception as err:  # noqa: BLE001 - an op MXNet cannot run imperatively
                n = 0
                self.rec["bn_note"] = ("graph calibration failed (" + _first_line(err)[:120]
                                       + "); those BatchNorm layers stay at identity")
            self.rec["calibrated_batchnorms"] += n
            self.rec["calibrated_in_graph"] = n
        self.data = {"data": self.x}
        from mxnet_amp.mx.io import graph_from_symbol
        g32 = graph_from_symbol(self.sym)
        self.n_heads = len(g32.heads)
        dense, self.after, extra = checked_entries(g32)
        where = {i: key for key, i in _named(g32).items()}
        self.extra_names = [(*where[e.node], e.output) for e in extra]
        t1 = time.time()
        ref = _bind_forward(self.probe(self.sym), self.args, self.auxs, self.data)
        self.rec["fp32_run_s"] = round(time.time() - t1, 2)
        floats = [k for k, r in enumerate(ref) if np.issubdtype(r.dtype, np.floating)]
        checked = [k for k in dense + list(range(self.n_heads, self.n_heads + len(extra))) if k in floats]
        self.dense = [k for k in dense if k in floats]
        self.finite = all(np.isfinite(ref[k]).all() for k in floats)
        why = {k: degenerate(ref[k]) for k in checked}
        self.degenerate = {k: w for k, w in why.items() if w}
        self.checked = [k for k in checked if k not in self.degenerate]
        self.ref = ref

    def probe(self, sym):
        """``sym`` with the pre-boundary tensors as extra outputs."""
        return _with_heads(sym, self.extra_names) if self.extra_names else sym

    def errors(self, got) -> dict:
        """``compare`` on the checked outputs, non-finite outputs over all outputs."""
        cmp = compare([self.ref[k] for k in self.checked], [got[k] for k in self.checked])
        if "error" in cmp:
            return cmp
        post = compare([self.ref[k] for k in self.after], [got[k] for k in self.after])
        nonfinite = sorted({self.checked[k] for k in cmp["nonfinite_outputs"]}
                           | {self.after[k] for k in post.get("nonfinite_outputs", [])})
        return {**cmp, "nonfinite_outputs": nonfinite, "after_ordering_err": post.get("max_rel_err")}


def sweep_one(name: str, dtypes: Sequence[str] = DTYPES, tol: float = TOLERANCE,
              native: bool | None = None, bn: str = "calibrated",
              auto_dtypes: Sequence[str] | None = None) -> dict[str, Any]:
    """Build one zoo model, convert it to each of ``dtypes``, run and judge it; a JSON-able
    record: the model's facts, and under each dtype name that dtype's record (``status``,
    errors, mx.contrib.amp's error, native runs, auto mode where it failed).

    ``bn``: ``'calibrated'`` (:func:`calibrate_batchnorm`, the default) or ``'identity'``
    (random-init BatchNorm statistics: mean 0, variance 1; a model that is then non-finite
    in float32 is calibrated after all, ``bn_calibrated_because``). ``native``: also run
    bfloat16 natively (default: where this CPU can). ``auto_dtypes``: where one of these
    dtypes (default: all) fails, run :func:`mxnet_amp.auto_convert_model` with the sweep's
    criterion and record what it keeps."""
    from mxnet_amp.mx.hardware import bf16_runs_natively
    t0 = time.time()
    try:
        model = _Model(name, bn)
    except Exception as err:  # noqa: BLE001 - recorded as not buildable
        return _for_all(dtypes, {"model": name, "family": family_of(name), "bn": bn,
                                 "build_s": round(time.time() - t0, 2)},
                        status="not_buildable", reason=_first_line(err))
    rec = model.rec
    try:  # the Gluon adapter path, conversion only (no run)
        from mxnet_amp.gluon.adapter import convert_hybrid_block
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for dtype in dtypes:
                convert_hybrid_block(model.net, target_dtype=dtype)
        rec["gluon_adapter"] = "ok"
    except Exception as err:  # noqa: BLE001
        rec["gluon_adapter"] = "error: " + _first_line(err)[:200]
    try:
        model.export()
    except Exception as err:  # noqa: BLE001
        return _for_all(dtypes, rec, status="not_buildable", reason="export / fp32 run failed: " + _first_line(err))
    del model.net
    if model.data_names != ["data"]:
        return _for_all(dtypes, rec, status="not_buildable",
                        reason=f"takes inputs {model.data_names}, the sweep feeds one image")
    if not model.finite:
        if bn == "identity" and _batchnorms_in(model.sym):
            # with BatchNorm at identity, box decoding exponentiates huge activations:
            # normalised as in a trained model, the same random net stays finite
            del model
            rec = sweep_one(name, dtypes, tol, native, "calibrated", auto_dtypes)
            rec["bn_calibrated_because"] = "fp32 non-finite with BatchNorm at identity"
            return rec
        return _for_all(dtypes, rec, status="fp32_nonfinite",
                        reason="the random-init fp32 model itself gives non-finite outputs; nothing to compare")
    rec["degenerate_outputs"] = {str(k): w for k, w in model.degenerate.items()}
    rec["checked_outputs"] = len(model.checked)
    rec["pre_ordering_tensors"] = [f"{n}{f'#{o}' if o else ''}:{k}" for n, o, k in model.extra_names]
    native = bf16_runs_natively() if native is None else native
    for dtype in dtypes:
        t1 = time.time()
        rec[dtype] = _sweep_dtype(model, dtype, tol, native and dtype == "bfloat16",
                                  auto_dtypes is None or dtype in auto_dtypes)
        rec[dtype]["dtype_s"] = round(time.time() - t1, 2)
    rec["total_s"] = round(time.time() - t0, 2)
    return rec


def _for_all(dtypes: Sequence[str], rec: dict, **per_dtype) -> dict:
    """``rec`` with the same per-dtype record under every dtype (a model that never got
    as far as a conversion)."""
    return {**rec, **{d: dict(per_dtype) for d in dtypes}}


def _sweep_dtype(model: _Model, dtype: str, tol: float, native: bool, auto: bool) -> dict:
    """Convert ``model`` to ``dtype``, run it emulated (and natively), judge it."""
    import mxnet_amp
    from mxnet_amp.convert import convert_model_full
    from mxnet_amp.options import make_options
    from mxnet_amp.emulation import emulate_model
    rec: dict[str, Any] = {}
    sym, args, auxs, data = model.sym, model.args, model.auxs, model.data
    t = time.time()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # weights stay float32 (cast in the graph): the structure check below runs the
            # cast-stripped graph on them and must reproduce fp32 exactly; the low precision
            # numerics are the same as with weights stored converted
            csym, cargs, cauxs, conv = convert_model_full(
                sym, args, auxs, make_options(dtype, cast_optional_params=False))
        rec["warnings"] = sorted({str(w.message)[:200] for w in caught})
    except mxnet_amp.AMPError as err:
        return {**rec, "status": "fail", "reason": "convert: " + _first_line(err)}
    except Exception as err:  # noqa: BLE001 - an untyped error is a bug worth reporting
        return {**rec, "status": "fail", "reason": "convert (untyped error): " + _first_line(err)}
    rec.update(convert_s=round(time.time() - t, 2), casts=conv.result.casts,
               multicasts=conv.result.multicasts, fallbacks=len(conv.result.fallbacks),
               low_precision_nodes=sum(1 for d in conv.result.node_dtypes.values() if d == dtype),
               op_nodes=len(conv.result.node_dtypes))
    t = time.time()
    try:
        esym, eargs, eauxs = emulate_model(csym, cargs, cauxs)
        got = _bind_forward(model.probe(esym), eargs, eauxs, data)
    except Exception as err:  # noqa: BLE001
        return {**rec, "status": "fail", "reason": "emulated run: " + _first_line(err)}
    rec["emulated_run_s"] = round(time.time() - t, 2)
    try:
        wide = _bind_forward(model.probe(strip_casts(csym)), _widened(cargs), _widened(cauxs), data)
        if conv.folded_batchnorms:
            # the cast pass is checked against the graph it converted, folded: folding is
            # exact only to float32 roundoff, which a deep random net amplifies (the fold
            # itself is checked in tests/passes/test_fold_batchnorm.py; its drift recorded here)
            from mxnet_amp.mx.io import graph_to_symbol
            folded = _bind_forward(model.probe(graph_to_symbol(conv.original)), cargs, cauxs, data)
            rec["fold_fp32_err"] = model.errors(folded)["max_rel_err"]
            rec["structure_err"] = _scaled_diff(model, wide, folded, model.checked)
        else:
            rec["structure_err"] = model.errors(wide)["max_rel_err"]
    except Exception as err:  # noqa: BLE001
        return {**rec, "status": "fail", "reason": "converted graph without its casts: " + _first_line(err)}
    cmp = model.errors(got)
    if "error" in cmp:
        return {**rec, "status": "fail", "reason": cmp["error"]}
    rec.update(max_rel_err=cmp["max_rel_err"], nonfinite_outputs=cmp["nonfinite_outputs"],
               after_ordering_err=cmp["after_ordering_err"])
    _contrib(model, dtype, rec)
    if native and model.extra_names:
        _native_probed(model, dtype, rec)
    elif native and model.dense:
        _native_runs(model, (csym, cargs, cauxs), got, rec, model.dense)
    return _judge(model, dtype, tol, auto, rec)


def _judge(model: _Model, dtype: str, tol: float, auto: bool, rec: dict) -> dict:
    """``rec`` (a converted model's measurements) with its status and reason: the structure
    check, degenerate outputs, the strict tolerance; a failure's sensitivity, and auto mode
    on it where asked."""
    err = rec["max_rel_err"]
    if rec["structure_err"] > STRUCTURE_TOL:
        rec.update(status="fail", reason=f"the converted graph without its casts differs from fp32 by "
                   f"{rec['structure_err']:.3g} (> {STRUCTURE_TOL}): the pass changed the computation")
        return rec
    if not model.checked:
        rec.update(status="degenerate", reason="every checked fp32 output is degenerate: "
                   + "; ".join(sorted(set(model.degenerate.values()))))
        return rec
    if not rec["nonfinite_outputs"] and err <= tol:
        if err == 0.0 and rec["low_precision_nodes"] > 0:
            rec.update(status="degenerate", reason="saturated: outputs identical to fp32 although "
                       "it computes in low precision")
        else:
            rec["status"] = "pass"
        return rec
    if rec["nonfinite_outputs"]:
        rec["reason"] = f"non-finite outputs {rec['nonfinite_outputs']} where fp32 is finite"
    else:
        sens = _sensitivity(model, dtype, rec)
        if sens is not None and sens >= 0.5:
            rec.update(status="inconclusive", reason=f"rounding only input and weights already changes "
                       f"the outputs by {sens:.2g}: a chaotic random-init model, nothing measured")
            return rec
        rec["reason"] = (f"max rel error {err:.3g} > tolerance {tol}; rounding only input and weights "
                         f"to {dtype} gives {'?' if sens is None else f'{sens:.3g}'}")
    rec["status"] = "fail"
    if auto:
        _auto(model, dtype, tol, rec)
    return rec


def _contrib(model: _Model, dtype: str, rec: dict) -> None:
    """mx.contrib.amp's conversion of the same model, emulated the same way: its error."""
    from mxnet_amp.emulation import emulate_model
    try:
        from mxnet.contrib import amp as contrib_amp
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # on copies: contrib casts some params in the dicts it is given (measured: the
            # weights of deformable convolutions, to float16), which the next dtype would see
            converted = contrib_amp.convert_model(model.sym, _copies(model.args), _copies(model.auxs),
                                                  target_dtype=dtype)
        rec["contrib_amp"] = "ok"
    except Exception as err:  # noqa: BLE001
        rec["contrib_amp"] = "error: " + _first_line(err)[:160]
        return
    try:
        esym, eargs, eauxs = emulate_model(*converted)
        pgot = _bind_forward(model.probe(esym), eargs, eauxs, model.data)
        pcmp = model.errors(pgot)
        rec["contrib_max_rel_err"] = pcmp.get("max_rel_err")
        rec["contrib_nonfinite_outputs"] = pcmp.get("nonfinite_outputs")
    except Exception as err:  # noqa: BLE001 - recorded, not the pass criterion
        rec["contrib_emulated"] = "error: " + _first_line(err)


def _native_probed(model: _Model, dtype: str, rec: dict) -> None:
    """Native runs of a model judged on the tensors before its NMS / top-k: the model is
    converted again with those tensors as outputs, as a user's dense outputs would be (so
    the fusion barriers cover them too: MXNet's fusion miswires a fused tensor that is
    also read elsewhere), emulated (``probed_max_rel_err``, the figure the native runs are
    judged against) and run natively with MXNet's default fusion (the deploy path; the
    unfused run and the emulation's fidelity are left to the models with dense outputs:
    each run of a detector costs minutes)."""
    from mxnet_amp.convert import convert_model_full
    from mxnet_amp.emulation import emulate_model
    from mxnet_amp.options import make_options
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            csym, cargs, cauxs, _ = convert_model_full(
                model.probe(model.sym), model.args, model.auxs, make_options(dtype, cast_optional_params=False))
        got = _bind_forward(*emulate_model(csym, cargs, cauxs), model.data)
    except Exception as err:  # noqa: BLE001
        rec["native_probed"] = "error: " + _first_line(err)
        return
    rec["probed_max_rel_err"] = model.errors(got).get("max_rel_err")
    _native_runs(model, (csym, cargs, cauxs), got, rec, model.checked, fused_only=True)


def _native_runs(model: _Model, converted, emulated_out, rec: dict, entries: Sequence[int],
                 fused_only: bool = False) -> None:
    """bfloat16 run natively: unfused (``MXNET_SUBGRAPH_BACKEND=NONE``, the numerics the
    emulation models) and with oneDNN fusion (what a user gets); and the emulation's
    fidelity: unfused native against emulated, ``rounding='nearest'`` and ``'mxnet-cpu'``,
    on the outputs ``entries``; ``fused_only``: the fused run alone.
    On copies of the params: the fp32 runs had oneDNN reorder the shared arrays in place,
    and MXNet 1.9.1 then fails bf16 grouped convolutions reading them."""
    from mxnet_amp.emulation import emulate_model
    csym, cargs, cauxs = converted
    dense = list(entries)
    runs = (("native", "NONE"), ("native_fused", None))
    for key, backend in runs[1:] if fused_only else runs:
        try:
            nout = _bind_forward(csym, _copies(cargs), _copies(cauxs), model.data, backend)
        except Exception as err:  # noqa: BLE001
            rec[key] = "error: " + _first_line(err)
            continue
        ncmp = compare([model.ref[k] for k in dense], [nout[k] for k in dense])
        rec[f"{key}_max_rel_err"] = ncmp.get("max_rel_err")
        rec[f"{key}_nonfinite_outputs"] = ncmp.get("nonfinite_outputs")
        if key != "native":
            continue
        try:
            tsym, targs, tauxs = emulate_model(csym, cargs, cauxs, rounding="mxnet-cpu")
            trunc = _bind_forward(tsym, targs, tauxs, model.data)
        except Exception as err:  # noqa: BLE001
            rec["emulated_mxnet_cpu"] = "error: " + _first_line(err)
            continue
        rec["emulated_mxnet_cpu_max_rel_err"] = compare([model.ref[k] for k in dense],
                                                        [trunc[k] for k in dense]).get("max_rel_err")
        rec["native_vs_emulated"] = _scaled_diff(model, nout, emulated_out, dense)
        rec["native_vs_emulated_mxnet_cpu"] = _scaled_diff(model, nout, trunc, dense)


def _scaled_diff(model: _Model, a, b, entries: Sequence[int]) -> float:
    """``max |a - b| / max |fp32|`` over the outputs ``entries`` (finite elements)."""
    import numpy as np
    worst = 0.0
    for k in entries:
        r = np.asarray(model.ref[k], np.float64)
        fin = np.isfinite(r) & np.isfinite(a[k]) & np.isfinite(b[k])
        scale = float(np.abs(r[fin]).max()) if fin.any() else 0.0
        if scale > 0:
            worst = max(worst, float(np.abs(np.asarray(a[k], np.float64)[fin] - b[k][fin]).max()) / scale)
    return worst


def _sensitivity(model: _Model, dtype: str, rec: dict) -> float | None:
    """How far fp32 compute on the input and weights merely rounded to ``dtype`` moves the
    outputs: the perturbation any deployment in that dtype starts from."""
    import mxnet as mx
    try:
        rargs = {k: mx.nd.array(round_numpy(v.asnumpy(), dtype)) for k, v in model.args.items()}
        rdata = {"data": mx.nd.array(round_numpy(model.x.asnumpy(), dtype))}
        pref = _bind_forward(model.probe(model.sym), rargs, model.auxs, rdata)
        rec["sensitivity_err"] = model.errors(pref)["max_rel_err"]
    except Exception as err:  # noqa: BLE001
        rec["sensitivity"] = "error: " + _first_line(err)
    return rec.get("sensitivity_err")


def _auto(model: _Model, dtype: str, tol: float, rec: dict) -> None:
    """``auto_convert_model`` on the failing model with the sweep's own criterion (every
    checked tensor, the tensors before NMS / top-k included, within ``tol`` relative to its
    scale, nothing non-finite where fp32 is finite), emulated: how many executions it
    takes, what it keeps in float32. It converts the model with those tensors as extra
    outputs: auto mode judges outputs, and a detector's final ones are only checked for
    finiteness."""
    import numpy as np

    from mxnet_amp.auto import auto_convert_model
    checked = model.checked

    def validate(ref, out) -> bool:
        cmp = compare([ref[k] for k in checked], [out[k] for k in checked])
        finite = all(np.isfinite(o[np.isfinite(r)]).all() for r, o in zip(ref, out)
                     if np.issubdtype(np.asarray(r).dtype, np.floating))
        return "error" not in cmp and finite and cmp["max_rel_err"] <= tol
    t = time.time()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, _, _, report = auto_convert_model(model.probe(model.sym), _copies(model.args),
                                                 _copies(model.auxs), model.data,
                                                 target_dtype=dtype, validate=validate,
                                                 execution="emulated", quiet=True,
                                                 max_executions=AUTO_MAX_EXECUTIONS)
        rec.update(auto_executions=report.executions, auto_validated=bool(report.validated),
                   auto_kept_fp32=[k.name for k in report.kept_fp32][:20],
                   auto_kept_count=len(report.kept_fp32),
                   auto_low_precision_nodes=report.low_precision_nodes, auto_s=round(time.time() - t, 1))
    except Exception as err:  # noqa: BLE001
        rec["auto"] = "error: " + _first_line(err)
