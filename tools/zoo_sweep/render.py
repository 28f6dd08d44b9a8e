"""The sweep's report: summaries per dtype, markdown."""
from __future__ import annotations

import time
from typing import Sequence

from .common import AUTO_MAX_EXECUTIONS, STRUCTURE_TOL, TOLERANCE


def per_dtype(records: Sequence[dict], dtype: str) -> list[dict]:
    """One flat record per model for ``dtype``: the model's facts plus that dtype's record."""
    flat = []
    for r in records:
        common = {k: v for k, v in r.items() if not isinstance(v, dict) or k == "degenerate_outputs"}
        flat.append({**common, **r.get(dtype, {"status": "skipped", "reason": "not run in this dtype"})})
    return flat


def summarize(records: Sequence[dict], dtype: str, tol: float = TOLERANCE) -> dict:
    """For ``dtype``: counts by status, the pass rate over tested models (pass + fail),
    the non-finite models, error percentiles."""
    import numpy as np
    flat = per_dtype(records, dtype)
    counts: dict[str, int] = {}
    for r in flat:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    tested = counts.get("pass", 0) + counts.get("fail", 0)
    nonfinite = [r["model"] for r in flat if r.get("nonfinite_outputs")]
    errs = np.array([r["max_rel_err"] for r in flat
                     if r.get("max_rel_err") is not None and r["status"] in ("pass", "fail")])
    pct = ({q: float(np.percentile(errs, q)) for q in (50, 90, 100)} if errs.size else {})
    return {"dtype": dtype, "counts": counts, "tested": tested,
            "pass_rate": counts.get("pass", 0) / tested if tested else 0.0,
            "nonfinite_models": nonfinite, "err_percentiles": pct,
            "failures": [r["model"] for r in flat if r["status"] == "fail"],
            "scaled": _scaled_summary(flat, tol),
            **({"fused": fused_summary(flat)} if dtype == "bfloat16" else {})}


# issue 26: the native run on MXNet's default (fused) path is within this of the emulated error
FUSED_FACTOR, FUSED_SLACK = 1.5, 0.005


def fused_within(rec: dict) -> bool | None:
    """Whether a bfloat16 record's native fused error is within ``1.5 x emulated + 0.005``
    (None: no fused or no emulated figure)."""
    fused, em = rec.get("native_fused_max_rel_err"), fused_base(rec)
    if fused is None or em is None:
        return None
    return bool(fused <= FUSED_FACTOR * em + FUSED_SLACK) and not rec.get("native_fused_nonfinite_outputs")


def fused_base(rec: dict) -> float | None:
    """The emulated error a native fused run is judged against: that of the same converted
    graph (for a model judged before its NMS / top-k, the one converted with those tensors
    as outputs, ``probed_max_rel_err``)."""
    return rec.get("probed_max_rel_err", rec.get("max_rel_err"))


def fused_summary(flat: Sequence[dict]) -> dict:
    """How many models ran natively fused, how many are within the target, which are not. A
    model that MXNet fails to run there (``native_fused`` holds its error, or
    ``native_probed``: converted with its pre-NMS tensors as outputs) counts as judged and
    outside: that is what its user gets on the deploy path."""
    failed = [r["model"] for r in flat
              if any(str(r.get(k, "")).startswith("error") for k in ("native_fused", "native_probed"))]
    judged = [r for r in flat if fused_within(r) is not None]
    outside = [r["model"] for r in judged if not fused_within(r)] + failed
    n = len(judged) + len(failed)
    return {"ran": n, "within": n - len(outside), "rate": (n - len(outside)) / n if n else 0.0,
            "outside": outside, "failed": failed}


# the sensitivity-scaled criterion: an error within this many times the error of the fp32 model
# run on input and weights merely rounded to the dtype (``sensitivity_err``, the floor any
# deployment in that dtype starts from) passes, as does one within the tolerance
SCALED_FACTOR = 2.0
# ours is judged against mx.contrib.amp's model of the same net: at most this ratio of its error
CONTRIB_RATIO = 1.1
_JUDGED = ("pass", "fail", "inconclusive")   # built, converted, ran, not degenerate


def scaled_pass(rec: dict, tol: float = TOLERANCE, contrib: bool = False) -> bool | None:
    """Whether a judged record passes the sensitivity-scaled criterion: no output non-finite
    where fp32 is finite, the cast-stripped graph reproduces fp32, and the error is <= ``tol``
    or <= :data:`SCALED_FACTOR` x ``sensitivity_err``. ``contrib``: judge mx.contrib.amp's
    model of the net instead (``None`` where it has no figure). The sweep computes
    ``sensitivity_err`` only where the error exceeds ``tol``: a contrib error above ``tol`` on
    a net ours converts within it has no floor recorded, and fails."""
    if contrib:
        err, nonfinite = rec.get("contrib_max_rel_err"), rec.get("contrib_nonfinite_outputs")
        if err is None:
            return None
    else:
        err, nonfinite = rec.get("max_rel_err"), rec.get("nonfinite_outputs")
        if err is None or (rec.get("structure_err") or 0.0) > STRUCTURE_TOL:
            return False
    if nonfinite:
        return False
    floor = rec.get("sensitivity_err")
    return err <= tol or (floor is not None and err <= SCALED_FACTOR * floor)


def worse_than_contrib(rec: dict) -> bool:
    """Ours errs more than :data:`CONTRIB_RATIO` x mx.contrib.amp's model of the same net (or is
    non-finite where contrib is not)."""
    c = rec.get("contrib_max_rel_err")
    if c is None or rec.get("max_rel_err") is None:
        return False
    if rec.get("nonfinite_outputs") and not rec.get("contrib_nonfinite_outputs"):
        return True
    return rec["max_rel_err"] > CONTRIB_RATIO * c


def _scaled_summary(flat: Sequence[dict], tol: float) -> dict:
    judged = [r for r in flat if r["status"] in _JUDGED]
    passed = [r for r in judged if scaled_pass(r, tol)]
    with_contrib = [r for r in judged if scaled_pass(r, tol, contrib=True) is not None]
    return {"judged": len(judged), "pass": len(passed),
            "pass_rate": len(passed) / len(judged) if judged else 0.0,
            "failures": [r["model"] for r in judged if not scaled_pass(r, tol)],
            "contrib_judged": len(with_contrib),
            "contrib_pass": sum(1 for r in with_contrib if scaled_pass(r, tol, contrib=True)),
            "worse_than_contrib": [r["model"] for r in with_contrib if worse_than_contrib(r)]}


_STATUS_ORDER = ["pass", "fail", "degenerate", "inconclusive", "not_buildable", "fp32_nonfinite",
                 "timeout", "skipped"]


def _fmt(value, spec: str = ".2g") -> str:
    return "" if value is None else format(value, spec)


def _run_line(records: Sequence[dict], dtypes: Sequence[str], command: str, wall_s: float) -> str:
    """When and how long the records' models ran (from their ``finished``, ``wall_s`` and
    ``load_avg``), how many of the records ran, and the command."""
    ran = [r for r in records if r.get(dtypes[0], {}).get("status") != "skipped"]
    finished = sorted(r["finished"] for r in ran if r.get("finished"))
    when = (f"models finished {finished[0][:16].replace('T', ' ')} to {finished[-1][:16].replace('T', ' ')} UTC"
            if finished else time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    worker = sum(r.get("wall_s") or 0 for r in ran)
    loads = sorted(r["load_avg"] for r in ran if r.get("load_avg") is not None)
    return (f"Run: {when}, " + (f"{wall_s / 60:.0f} min wall clock, " if wall_s else "")
            + f"{worker / 60:.0f} min of worker time (sum of per-model wall clock), {len(ran)} models run"
            + (f" of the {len(records)} listed" if len(ran) < len(records) else "") + f", `{command}`."
            + (f" Load average while it ran (1 min, at each model's end; 2 cores shared with other "
               f"work): median {loads[len(loads) // 2]:.1f}, max {loads[-1]:.1f}." if loads else ""))


def _not_run_lines(records: Sequence[dict], dtypes: Sequence[str]) -> list[str]:
    """The listed models that did not run (``skipped``), by name, with the reasons."""
    skipped = [r for r in records if r.get(dtypes[0], {}).get("status") == "skipped"]
    if not skipped:
        return []
    reasons = sorted({r[dtypes[0]].get("reason", "?") for r in skipped})
    return ["", f"**Not run: {len(skipped)} of the {len(records)} listed models** ({'; '.join(reasons)}): "
            + ", ".join(r["model"] for r in skipped) + "."]


def write_markdown(path: str, records: Sequence[dict], *, dtypes: Sequence[str], tol: float,
                   command: str, wall_s: float, timeout: float, bn: str,
                   preamble: Sequence[str] = ()) -> None:
    """Write the sweep report ``path`` (markdown): per dtype a summary, the failures with
    their causes, degenerate models; emulation fidelity; one row per model."""
    import mxnet as mx

    from mxnet_amp.mx.hardware import bf16_runs_natively
    from mxnet_amp.files.atomic import atomic_write
    lines = [
        f"# gluoncv model zoo sweep: {' and '.join(dtypes)} conversion",
        "",
        _run_line(records, dtypes, command, wall_s),
        *_not_run_lines(records, dtypes),
        f"MXNet {mx.__version__}, gluoncv {_gluoncv_version()}. Native bf16 on this CPU: "
        + ("yes (avx512_bf16)" if bf16_runs_natively() else "no (AVX2 only)")
        + ". MXNet runs no float16 on a CPU: float16 is judged through the emulation "
          "(`mxnet_amp.emulation`: every tensor the converted graph holds in low precision is "
          "rounded to that dtype, ops compute in fp32), and so is bfloat16, which also runs "
          "natively where the CPU can (recorded, with the emulation's fidelity).",
        *preamble,
        "",
        "Method (`tools/zoo_sweep/`, whose package docstring defines every check): each model "
        "is built offline, random He-normal weights, BatchNorm "
        + ("statistics calibrated layer by layer on a batch of 4 random inputs (one forward "
           "pass; each layer's mean and variance from the activations that reach it once the "
           "earlier layers are calibrated), so every BatchNorm output is normalised as in a "
           "trained net" if bn == "calibrated" else
           "at identity (mean 0, variance 1; calibrated only where fp32 is non-finite so)")
        + ", run in fp32 on a small input for its family, exported (`HybridBlock.export` + "
        "`mx.model.load_checkpoint`), converted with `mxnet_amp.convert_model(target_dtype=..., cast_optional_params=False)` "
        "and run emulated. *pass*: converts, runs, the converted graph with its casts stripped "
        f"reproduces fp32 to {STRUCTURE_TOL:g} (no op lost or changed), no output non-finite "
        f"where fp32 is finite, and `max|lp - fp32| / max|fp32|` <= **{tol}** for every checked "
        "output (the strict tolerance; no other way to pass). Outputs after top-k / NMS / "
        "comparisons / box decoding are only checked for finiteness; the dense tensors feeding "
        "those ops are compared instead. *degenerate*: every checked fp32 output vanished (all "
        "~0 or constant) or is saturated (>= 90% of values at its min or max), or the low "
        "precision output equals fp32 exactly: nothing measured, not counted as tested; a "
        "model with some degenerate outputs is judged on the others. *inconclusive*: rounding "
        "only input and weights already moves the outputs by >= 0.5 (chaotic random net). "
        "mx.contrib.amp's model of the same net, emulated the same way, is run beside ours. "
        "Where a model fails, `mxnet_amp.auto_convert_model` runs with the same criterion "
        "(`validate=`, emulated) and its executions are recorded.",
        "",
    ]
    for dtype in dtypes:
        lines += _dtype_section(records, dtype, tol, timeout)
    if "bfloat16" in dtypes:
        lines += _fused_section(per_dtype(records, "bfloat16"))
        lines += _fidelity_section(per_dtype(records, "bfloat16"))
    lines += _per_model_table(records, dtypes)
    text = "\n".join(lines) + "\n"

    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)
    atomic_write(path, write)


# a failure whose error is at most this many times the error of rounding only the input and
# weights is the random net's own sensitivity (the earlier sweeps' pass criterion)
SENSITIVITY_FACTOR = 4.0
# ... and one where mx.contrib.amp's model of the same net does this much better is ours
CONTRIB_BETTER = 0.5


def cause_of(rec: dict) -> str:
    """A failed record's cause, in a few words: ``'non-finite'``, ``'graph changed'``,
    ``'error'``, ``'sensitivity'`` (the error is within :data:`SENSITIVITY_FACTOR` times what
    rounding only input and weights gives, and mx.contrib.amp does no better), or
    ``'conversion'`` (above the tolerance otherwise: worth a look)."""
    if rec.get("nonfinite_outputs"):
        return "non-finite"
    if rec.get("structure_err") is not None and rec["structure_err"] > STRUCTURE_TOL:
        return "graph changed"
    if rec.get("max_rel_err") is None:
        return "error"
    sens, contrib = rec.get("sensitivity_err"), rec.get("contrib_max_rel_err")
    if contrib is not None and contrib < CONTRIB_BETTER * rec["max_rel_err"]:
        return "conversion"
    if sens is not None and rec["max_rel_err"] <= SENSITIVITY_FACTOR * sens:
        return "sensitivity"
    return "conversion"


def _dtype_section(records: Sequence[dict], dtype: str, tol: float, timeout: float) -> list[str]:
    """The report's section on ``dtype``: summary, families, failures, untested models."""
    flat = per_dtype(records, dtype)
    return ([f"## {dtype}", ""] + _scaled_lines(flat, dtype, tol) + [""]
            + _summary_lines(records, flat, dtype, tol, timeout) + [""]
            + _family_table(flat) + _failure_table(flat, dtype) + _untested_tables(flat, dtype) + [""])


def scaled_cause(rec: dict, tol: float = TOLERANCE) -> str:
    """Why a record fails the sensitivity-scaled criterion, in a sentence."""
    err, floor, c = rec.get("max_rel_err"), rec.get("sensitivity_err"), rec.get("contrib_max_rel_err")
    if rec.get("nonfinite_outputs"):
        return f"non-finite outputs {rec['nonfinite_outputs']} where fp32 is finite"
    if err is None or (rec.get("structure_err") or 0.0) > STRUCTURE_TOL:
        return f"{cause_of(rec)}: {rec.get('reason', '')}"
    times = f"{err / floor:.2g}x the rounding floor {floor:.3g}" if floor else "no rounding floor recorded"
    if c is None:
        return f"error {err:.3g} = {times}; mx.contrib.amp gives no figure to compare"
    if scaled_pass(rec, tol, contrib=True):
        return f"conversion: ours {err:.3g} ({times}), mx.contrib.amp {c:.3g} passes"
    if worse_than_contrib(rec):
        return f"ours {err:.3g} ({times}) above mx.contrib.amp's {c:.3g}, which fails too"
    return f"the random net: ours {err:.3g} ({times}), mx.contrib.amp {c:.3g} as far off"


def _scaled_lines(flat: Sequence[dict], dtype: str, tol: float) -> list[str]:
    """The sensitivity-scaled criterion's summary, its failures and the nets where ours errs
    more than mx.contrib.amp."""
    s = _scaled_summary(flat, tol)
    by_model = {r["model"]: r for r in flat}
    lines = [f"**Sensitivity-scaled criterion: {s['pass']} of {s['judged']} = {100 * s['pass_rate']:.1f}% pass** "
             f"(error <= {tol} or <= {SCALED_FACTOR:g}x the error of the fp32 model on input and weights "
             f"merely rounded to {dtype}, no output non-finite where fp32 is finite; judged: pass, fail "
             f"and inconclusive records; target >= 99%). mx.contrib.amp's model of the same nets, same "
             f"criterion and floor: {s['contrib_pass']} of the {s['contrib_judged']} it converts and runs "
             f"(a contrib error above {tol} where ours is within it has no floor recorded and counts as a "
             f"fail). Ours above {CONTRIB_RATIO:g}x mx.contrib.amp's error: "
             f"**{len(s['worse_than_contrib'])}** of {s['contrib_judged']}.", ""]
    if s["failures"]:
        lines += [f"| {dtype}: fails the scaled criterion | ours err | rounding floor | contrib err | cause |",
                  "|---|---|---|---|---|"]
        lines += [f"| {m} | {_fmt(by_model[m].get('max_rel_err'), '.3g')} | "
                  f"{_fmt(by_model[m].get('sensitivity_err'), '.3g')} | {_contrib_cell(by_model[m], detail=False)} | "
                  f"{_cell(scaled_cause(by_model[m], tol))} |" for m in s["failures"]]
        lines.append("")
    if s["worse_than_contrib"]:
        lines += [f"| {dtype}: ours > {CONTRIB_RATIO:g}x contrib | ours err | contrib err | ratio | rounding floor | "
                  "passes scaled |", "|---|---|---|---|---|---|"]
        for m in s["worse_than_contrib"]:
            r = by_model[m]
            ratio = r["max_rel_err"] / r["contrib_max_rel_err"] if r["contrib_max_rel_err"] else float("inf")
            lines.append(f"| {m} | {r['max_rel_err']:.3g} | {r['contrib_max_rel_err']:.3g} | {ratio:.2g} | "
                         f"{_fmt(r.get('sensitivity_err'), '.3g')} | {'yes' if scaled_pass(r, tol) else 'no'} |")
    return lines


def _summary_lines(records: Sequence[dict], flat: Sequence[dict], dtype: str, tol: float,
                   timeout: float) -> list[str]:
    s = summarize(records, dtype, tol)
    c = s["counts"]
    pct = s["err_percentiles"]
    both = [r for r in flat if r["status"] in ("pass", "fail") and r.get("contrib_max_rel_err") is not None]
    contrib_within = sum(1 for r in both if r["contrib_max_rel_err"] <= tol
                         and not r.get("contrib_nonfinite_outputs"))
    contrib_nonfinite = [r["model"] for r in both if r.get("contrib_nonfinite_outputs")]
    converted = [r for r in flat if "contrib_amp" in r]
    causes: dict[str, int] = {}
    for r in flat:
        if r["status"] == "fail":
            causes[cause_of(r)] = causes.get(cause_of(r), 0) + 1
    return [
        f"- tested (built offline, converted, ran, not degenerate): **{s['tested']}**; "
        f"**within the strict tolerance {tol}: {c.get('pass', 0)} = {100 * s['pass_rate']:.1f}%** "
        f"(target >= 98%); fail {c.get('fail', 0)}",
        "- failures by cause: " + (", ".join(f"{k} {v}" for k, v in sorted(causes.items())) or "none")
        + f" (*sensitivity*: error <= {SENSITIVITY_FACTOR:g}x what rounding only input and weights "
        f"to {dtype} gives, and mx.contrib.amp no better than {1 / CONTRIB_BETTER:g}x ours: the random "
        "net's own sensitivity; *conversion*: anything else above the tolerance)",
        f"- within the tolerance or the random net's sensitivity: "
        f"{c.get('pass', 0) + causes.get('sensitivity', 0)} of {s['tested']}",
        f"- non-finite output where fp32 is finite: **{len(s['nonfinite_models'])}**"
        + (f" ({', '.join(s['nonfinite_models'])})" if s["nonfinite_models"] else ""),
        f"- error `max|{dtype} - fp32| / max|fp32|` over tested models: median "
        f"{pct.get(50, float('nan')):.2g}, 90th percentile {pct.get(90, float('nan')):.2g}, "
        f"max {pct.get(100, float('nan')):.2g}",
        f"- mx.contrib.amp's model of the same nets, emulated the same way: converts "
        f"{sum(1 for r in converted if r['contrib_amp'] == 'ok')} of {len(converted)}; of the "
        f"{len(both)} tested models it converts, {contrib_within} within the tolerance"
        + (f"; non-finite: {len(contrib_nonfinite)} ({', '.join(contrib_nonfinite)})" if contrib_nonfinite else
           "; non-finite: 0"),
        f"- degenerate (not counted): {c.get('degenerate', 0)}; models judged on their other outputs "
        f"because some outputs are degenerate: {len(_partly_degenerate(flat))}; inconclusive (chaotic): "
        f"{c.get('inconclusive', 0)}",
        f"- not built: {c.get('not_buildable', 0)}; fp32 itself non-finite: {c.get('fp32_nonfinite', 0)}; "
        f"over the per-model timeout ({timeout:g} s): {c.get('timeout', 0)}; not run: {c.get('skipped', 0)}",
    ]


def _partly_degenerate(flat: Sequence[dict]) -> list[dict]:
    return [r for r in flat if r["status"] in ("pass", "fail") and r.get("degenerate_outputs")]


def _family_table(flat: Sequence[dict]) -> list[str]:
    lines = ["| family | models | pass | fail | degenerate / inconclusive | not buildable / fp32 non-finite | "
             "timeout / not run | worst err | worst contrib err |",
             "|---|---|---|---|---|---|---|---|---|"]
    fams: dict[str, list[dict]] = {}
    for r in flat:
        fams.setdefault(r.get("family", "?"), []).append(r)
    for fam in sorted(fams):
        rs = fams[fam]
        n = lambda *st: sum(r["status"] in st for r in rs)  # noqa: E731
        errs = [r["max_rel_err"] for r in rs if r["status"] in ("pass", "fail")
                and r.get("max_rel_err") is not None]
        cerrs = [r["contrib_max_rel_err"] for r in rs if r["status"] in ("pass", "fail")
                 and r.get("contrib_max_rel_err") is not None]
        lines.append(f"| {fam} | {len(rs)} | {n('pass')} | {n('fail')} | {n('degenerate', 'inconclusive')} | "
                     f"{n('not_buildable', 'fp32_nonfinite')} | {n('timeout', 'skipped')} | "
                     f"{_fmt(max(errs) if errs else None)} | {_fmt(max(cerrs) if cerrs else None)} |")
    return lines


def _failure_table(flat: Sequence[dict], dtype: str) -> list[str]:
    fails = [r for r in flat if r["status"] == "fail"]
    lines = ["", f"### {dtype}: failures, with their cause", ""]
    if not fails:
        return lines + ["None."]
    lines += ["| model | cause | detail | rounding only input + weights | mx.contrib.amp's error | "
              "auto_convert_model (same criterion) |",
              "|---|---|---|---|---|---|"]
    for r in fails:
        lines.append(f"| {r['model']} | {cause_of(r)} | {_cell(r.get('reason', ''))} | "
                     f"{_fmt(r.get('sensitivity_err'), '.3g')} | {_contrib_cell(r)} | "
                     f"{_cell(_auto_cell(r, dtype))} |")
    return lines


def _auto_cell(r: dict, dtype: str) -> str:
    """What auto mode did on a failed record, or why it did not run."""
    if "auto_executions" not in r:
        return r.get("auto", "not run (--auto-dtypes)")
    spent = r["auto_executions"] >= AUTO_MAX_EXECUTIONS
    return (f"{'fixed' if r['auto_validated'] else 'not fixed'}: {r['auto_executions']} executions"
            f"{' (the budget: undecided nodes stay fp32)' if spent else ''}, "
            f"{r['auto_kept_count']} nodes kept in fp32 ({', '.join(r['auto_kept_fp32'][:4])}"
            f"{', ...' if r['auto_kept_count'] > 4 else ''}), {r['auto_low_precision_nodes']}/"
            f"{r.get('op_nodes', '?')} in {dtype}")


def _untested_tables(flat: Sequence[dict], dtype: str) -> list[str]:
    lines = []
    odd = [r for r in flat if r["status"] in ("degenerate", "inconclusive", "not_buildable",
                                              "fp32_nonfinite", "timeout")]
    if odd:
        lines += ["", f"### {dtype}: not tested (degenerate, inconclusive, not built, timeout)", "",
                  "| model | status | reason |", "|---|---|---|"]
        lines += [f"| {r['model']} | {r['status']} | {_cell(r.get('reason', ''))} |" for r in odd]
    partial = _partly_degenerate(flat)
    if partial:
        lines += ["", f"### {dtype}: degenerate outputs left out of the comparison", "",
                  "| model | outputs left out (index: why) | judged on |", "|---|---|---|"]
        lines += [f"| {r['model']} | {_cell('; '.join(f'{k}: {w}' for k, w in r['degenerate_outputs'].items()))} | "
                  f"{r.get('checked_outputs', '?')} other outputs |" for r in partial]
    return lines


def _fused_section(flat: Sequence[dict]) -> list[str]:
    """Native bfloat16 on MXNet's default (fused) path against the emulation, per model."""
    summary = fused_summary(flat)
    if not summary["ran"]:
        return []
    errors = sorted(summary["failed"])
    lines = ["## Deploy path: native bfloat16 with oneDNN fusion against the emulation", "",
             f"**{summary['within']} of {summary['ran']} models ({summary['rate']:.1%}) within "
             f"{FUSED_FACTOR} x the emulated error + {FUSED_SLACK}** (issue 26), on MXNet's default "
             "oneDNN subgraph backend (what `Module.bind` gives), our default conversion."
             + (f" MXNet fails to run on that path (counted outside): {', '.join(errors)}." if errors else ""), ""]
    outside = [r for r in flat if fused_within(r) is False]
    if outside:
        lines += ["| model | emulated err | native fused err | ratio | native unfused err |", "|---|---|---|---|---|"]
        for r in sorted(outside, key=lambda r: -r["native_fused_max_rel_err"] / max(fused_base(r), 1e-12)):
            lines.append(f"| {r['model']} | {fused_base(r):.3g} | {r['native_fused_max_rel_err']:.3g} | "
                         f"{r['native_fused_max_rel_err'] / max(fused_base(r), 1e-12):.2g} | "
                         f"{_fmt(r.get('native_max_rel_err'), '.3g')} |")
    return lines + [""]


def _fidelity_section(flat: Sequence[dict]) -> list[str]:
    """The emulation against native bfloat16 (unfused), per model."""
    import numpy as np
    ran = [r for r in flat if r.get("native_vs_emulated") is not None]
    if not ran:
        return []
    near = np.array([r["native_vs_emulated"] for r in ran])
    trunc = np.array([r["native_vs_emulated_mxnet_cpu"] for r in ran])
    ratio = np.array([r["native_max_rel_err"] / max(r["max_rel_err"], 1e-12) for r in ran])
    failed = sorted({r["model"] for r in flat if str(r.get("native", "")).startswith("error")})
    lines = [
        "## Emulation fidelity: emulated against native bfloat16 (unfused)", "",
        f"{len(ran)} models ran natively (`MXNET_SUBGRAPH_BACKEND=NONE`)"
        + (f"; MXNet errors natively: {', '.join(failed)}" if failed else "") + ". "
        "`max|native - emulated| / max|fp32|` over the dense outputs: with the default "
        "`rounding='nearest'` median "
        f"{np.median(near):.2g}, max {near.max():.2g}; with `rounding='mxnet-cpu'` (ops outside "
        "oneDNN truncate to bfloat16, as MXNet 1.9.1's CPU kernels do) median "
        f"{np.median(trunc):.2g}, max {trunc.max():.2g}. Native error / emulated error: median "
        f"{np.median(ratio):.2g}, max {ratio.max():.2g}. The native error with oneDNN fusion "
        "(what a user gets by default) is in the per-model table.", "",
        "Worst ten by native/emulated error ratio:", "",
        "| model | emulated err | native err | ratio | emulated (mxnet-cpu) err | native - emulated | native - emulated (mxnet-cpu) |",
        "|---|---|---|---|---|---|---|",
    ]
    order = np.argsort(-ratio)[:10]
    for i in order:
        r = ran[i]
        lines.append(f"| {r['model']} | {r['max_rel_err']:.3g} | {r['native_max_rel_err']:.3g} | "
                     f"{ratio[i]:.2g} | {_fmt(r.get('emulated_mxnet_cpu_max_rel_err'), '.3g')} | "
                     f"{r['native_vs_emulated']:.3g} | {r['native_vs_emulated_mxnet_cpu']:.3g} |")
    return lines + [""]


def _per_model_table(records: Sequence[dict], dtypes: Sequence[str]) -> list[str]:
    head = "| model | family | input | BatchNorm layers calibrated / in graph | time (s) |"
    rule = "|---|---|---|---|---|"
    for d in dtypes:
        short = {"float16": "fp16", "bfloat16": "bf16"}.get(d, d)
        head += f" {short} status | {short} err | {short} contrib err | {short} lp ops |"
        rule += "---|---|---|---|"
    if "bfloat16" in dtypes:
        head += " bf16 native (unfused / fused) |"
        rule += "---|"
    lines = ["## Per model", "", head, rule]
    for r in sorted(records, key=lambda r: (r.get("family", ""), r["model"])):
        if r.get(dtypes[0], {}).get("status") == "skipped":
            continue
        shape = "x".join(map(str, r["input_shape"])) if "input_shape" in r else ""
        bns = (f"{r['calibrated_batchnorms']}/{r['batchnorms_in_graph']}" if "batchnorms_in_graph" in r
               else r.get("calibrated_batchnorms", ""))
        row = f"| {r['model']} | {r.get('family', '')} | {shape} | {bns} | {r.get('wall_s', '')} |"
        for d in dtypes:
            x = r.get(d, {})
            lp = f"{x['low_precision_nodes']}/{x['op_nodes']}" if "op_nodes" in x else ""
            contrib = _contrib_cell(x, ".2e", detail=False)
            row += f" {x.get('status', '')} | {_fmt(x.get('max_rel_err'), '.2e')} | {contrib} | {lp} |"
        if "bfloat16" in dtypes:
            x = r.get("bfloat16", {})
            row += f" {_native_cell(x)} |"
        lines.append(row)
    return lines


def _contrib_cell(rec: dict, spec: str = ".3g", detail: bool = True) -> str:
    """mx.contrib.amp's error on a model, or why there is none."""
    if str(rec.get("contrib_amp", "")).startswith("error"):
        return "cannot convert" + (f" ({_cell(rec['contrib_amp'][7:])[:100]})" if detail else "")
    if rec.get("contrib_max_rel_err") is None and "contrib_emulated" in rec:
        return "its model does not run" + (f" ({_cell(rec['contrib_emulated'][7:])[:100]})" if detail else "")
    return _fmt(rec.get("contrib_max_rel_err"), spec) + (" (non-finite)" if rec.get("contrib_nonfinite_outputs") else "")


def _native_cell(rec: dict) -> str:
    cells = []
    for key in ("native", "native_fused"):
        err = rec.get(f"{key}_max_rel_err")
        cells.append(f"{err:.2e}" if err is not None else ("error" if key in rec else ""))
    return " / ".join(cells) if any(cells) else ""


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")[:240]


def _gluoncv_version() -> str:
    try:
        import gluoncv
        return gluoncv.__version__
    except Exception:  # noqa: BLE001
        return "?"
