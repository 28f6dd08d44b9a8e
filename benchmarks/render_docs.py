"""Render the tables of docs/benchmarks.md from benchmarks/results/*.json.

The numbers in the docs are never typed by hand: this script writes them between the
``<!-- results:start -->`` and ``<!-- results:end -->`` markers of docs/benchmarks.md (the
prose around them is left alone). Result files that do not exist yet are listed as not run.

    python benchmarks/render_docs.py            # rewrite the section in docs/benchmarks.md
    python benchmarks/render_docs.py --print    # print it instead
"""
from __future__ import annotations

import argparse
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
DOC = os.path.join(os.path.dirname(HERE), "docs", "benchmarks.md")
START, END = "<!-- results:start -->", "<!-- results:end -->"


def _load(name: str):
    path = os.path.join(RESULTS, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _f(x, digits=3) -> str:
    if x is None:
        return "–"
    if isinstance(x, str):
        return x
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:.{digits}g}"


def _table(headers, rows) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return out


def _env(data) -> str:
    e = data["environment"]
    return (f"Measured {e['utc']} on {e['cpu']} ({e['cpu_count']} cores, avx512f={e['avx512f']}, "
            f"bf16 runs natively={e['bf16_runs_natively']}), MXNet {e['mxnet']}, Python {e['python']}. "
            f"Command: `{data['command']}`")


def _casts(c) -> str:
    return f"{c['amp_cast']} + {c['amp_multicast']}m"


def conversion_speed(data) -> list[str]:
    rows = []
    for r in data["results"]:
        o, c = r["ours"], r["contrib"]
        rows.append([r["case"], _f(r["nodes"]), r["repeats"],
                     _f(o.get("median_s")) if o["ok"] else "failed: " + o["error"],
                     _f(c.get("median_s")) if c["ok"] else "failed: " + c["error"],
                     _f(r.get("ratio_ours_over_contrib")), _f(r.get("cpu_ratio_ours_over_contrib")),
                     _f(r.get("ratio_ours_over_contrib_cop")), _f(r.get("ratio_ours_fold_over_contrib")),
                     _f(o.get("per_node_us")), _f(c.get("per_node_us")),
                     _casts(o["casts"]) if o["ok"] else "–", _casts(c["casts"]) if c["ok"] else "–"])
        if data.get("base"):
            b = r.get("base", {})
            rows[-1] += [_f(b.get("median_s")) if b.get("ok") else "failed",
                         _f(r.get("ratio_ours_over_base")), _f(r.get("ratio_base_over_contrib")),
                         {True: "yes", False: "**no**"}.get(r.get("same_output_as_base"), "–")]
    lines = [_env(data) + _load_env(data["environment"]), "",
             "`ours` and `contrib` with their defaults (ours stores weights in low "
             "precision, contrib does not); `contrib_cop` = contrib with `cast_optional_params=True`; "
             "`ours_fold` = ours with `fold_batchnorm=True` (zoo models)."
             + (f" `base` = mxnet_amp as of `{data['base']}` loaded beside this one in the same "
                "process (before/after); same output = identical symbol JSON and params "
                "(names, dtypes, bytes)." if data.get("base") else ""), ""]
    base_cols = ["base s (median)", "ours/base wall", "base/contrib wall",
                 "same output as base"] if data.get("base") else []
    lines += _table(["case", "nodes", "runs", "ours s (median)", "contrib s (median)",
                     "ours/contrib wall (median of per-round ratios)", "ours/contrib CPU time",
                     "ours/contrib_cop wall", "ours_fold/contrib wall",
                     "ours µs/node", "contrib µs/node", "ours casts", "contrib casts"] + base_cols, rows)
    g = data.get("ours_growth")
    if g:
        per = ", ".join(f"{k}: {v:.1f} µs" for k, v in g["per_node_us"].items())
        lines += ["", f"Growth of ours: {g['node_ratio']:.0f}x the nodes ({g['from']} → {g['to']}) took "
                  f"{g['time_ratio']:.1f}x the time; per node: {per}."]
    for prof in data.get("profiles", []):
        lines += ["", f"cProfile of ours on {prof['case']} (total {prof['total_s']:.2f} s under the "
                  "profiler; cumulative share of each stage, stages nest):", ""]
        stages = sorted(prof["stages"].items(), key=lambda kv: -kv[1]["percent"])
        lines += _table(["stage", "what", "calls", "cumulative s", "% of total"],
                        [[k, v["what"], v["calls"], _f(v["cum_s"]), f"{v['percent']:.1f}"] for k, v in stages])
        lines += ["", f"Functions with the most own time ({prof['case']}):", ""]
        lines += _table(["function", "calls", "own s", "% of total"],
                        [[f"`{t['function']}`", _f(t["calls"]), _f(t["own_s"]), f"{t['own_percent']:.1f}"]
                         for t in prof["top_own_time"][:10]])
    return lines


CPU_VARIANTS = ("contrib", "contrib_cop", "ours", "ours_fold")


def _load_env(e) -> str:
    start, end = e.get("loadavg_start"), e.get("loadavg_end")
    text = ""
    if start and end:
        text = f" Load average (1/5/15 min) at the start {'/'.join(f'{x:.1f}' for x in start)}, " \
               f"at the end {'/'.join(f'{x:.1f}' for x in end)}."
    if e.get("cpu_flags"):
        text += f" CPU flags: {' '.join(e['cpu_flags'])}."
    if e.get("env"):
        text += " Environment: " + ", ".join(f"`{k}={v}`" for k, v in e["env"].items()) + "."
    return text


def cpu_inference(data) -> list[str]:
    if "variants" not in data:  # a result file from before the variants were added
        return [_env(data), "", "Result file in an older format; rerun `benchmarks/cpu_inference.py`."]
    native = data["bf16_runs_natively"]
    lines = [_env(data) + _load_env(data["environment"]), ""]
    lines += ["Variants: `contrib` = `mx.contrib.amp.convert_model` default (weights float32, cast at "
              "every run); `contrib_cop` = contrib with `cast_optional_params=True`; `ours` = "
              "`mxnet_amp.convert_model` default (weights stored in bf16); `ours_fold` = ours with "
              "`fold_batchnorm=True`. Paths: `module` = `mx.mod.Module` (MXNet's oneDNN subgraph "
              "fusion applies), `gluon` = hybridized `SymbolBlock` (no fusion), `gluon_mkldnn` = "
              "the same hybridized with `backend='MKLDNN'` (oneDNN fusion). Medians of "
              "interleaved rounds; ratios are medians of per-round ratios.", ""]
    if native:
        rows = []
        for r in data["results"]:
            for path in data["paths"]:
                def ips(v):
                    x = r.get(v, {})
                    if v != "fp32" and not x.get("ok"):
                        return "conversion failed"
                    got = x.get(path, {}).get("items_per_s")
                    return _f(got) if got is not None else "run failed: " + x.get(f"{path}_run_error", "?")
                ours, fold = r["ours"].get(path, {}), r["ours_fold"].get(path, {})
                rows.append([r["case"], path, *(ips(v) for v in ("fp32", *CPU_VARIANTS)),
                             _f(ours.get("speedup_over_fp32")), _f(fold.get("speedup_over_fp32")),
                             _f(ours.get("over_contrib")), _f(ours.get("over_contrib_cop")),
                             _f(fold.get("over_contrib_cop")),
                             _f(r["ours"].get(f"{path}_max_rel_diff_vs_fp32")),
                             _f(r["ours_fold"].get(f"{path}_max_rel_diff_vs_fp32"))])
        lines += _table(["case", "path", "fp32 items/s", "contrib", "contrib_cop", "ours", "ours_fold",
                         "ours/fp32", "fold/fp32", "ours/contrib", "ours/contrib_cop",
                         "fold/contrib_cop", "ours max rel diff", "fold max rel diff"], rows)
        if data.get("targets"):
            lines += ["", "Targets: " + "; ".join(
                f"{k}: **{'met' if v is True else 'NOT met' if v is False else _f(v)}**"
                for k, v in data["targets"].items()) + "."]
    else:
        lines += ["bf16 does not run natively on this CPU: no low precision throughput was "
                  "measured (only fp32 below)."]
    crow = []
    for r in data["results"]:
        cells = []
        for v in CPU_VARIANTS:
            x = r[v]
            cells.append(f"{x['convert_s']:.2f} s, {x['param_bytes'] / 2**20:.1f} MiB, "
                         f"{_casts(x['casts'])}" if x.get("ok") else "failed: " + x.get("error", "?"))
        crow.append([r["case"], f"{r['fp32_param_bytes'] / 2**20:.1f} MiB", *cells])
    lines += ["", "Conversion time, param bytes and casts of each variant:", ""]
    lines += _table(["case", "fp32 params", *CPU_VARIANTS], crow)
    return lines


PATH_NOTES = {
    "fp32_block": "the user's fp32 Gluon block, `hybridize()`",
    "fp32_module": "its checkpoint in `mx.mod.Module` (fused at bind)",
    "ours_block": "`convert_hybrid_block(net, 'bfloat16', fold_batchnorm=True)` as returned",
    "ours_block_unfolded": "the same, `fold_batchnorm=False`, as returned",
    "ours_module": "`ours_block.export()` in `mx.mod.Module`",
    "ours_imports": "that checkpoint, `SymbolBlock.imports` + `hybridize()`",
    "ours_imports_mkldnn": "the same + `hybridize(backend='MKLDNN', static_alloc=True, static_shape=True)`",
    "ours_imports_fused": "`ours_block.export(fused_for='cpu')` (saved partitioned by oneDNN where "
                          "that removes a generic bf16 kernel), `SymbolBlock.imports` + plain `hybridize()`",
    "tuned_block": "`convert_hybrid_block(..., data_shapes=, tune=)` at this batch's shape, as returned",
    "tuned_module": "its export in `mx.mod.Module`",
    "tuned_imports_fused": "its `export(fused_for='cpu')` via `SymbolBlock.imports` + plain `hybridize()`",
    "contrib_best": "`mx.contrib.amp.convert_model(cast_optional_params=True)` in `mx.mod.Module`",
}


def cpu_inference_paths(data) -> list[str]:
    notes = ["oneDNN allowed to use AMX (`mxnet_amp.mx.hardware.enable_amx()`, `--amx`)."
             if data.get("amx_enabled") else "oneDNN's default ISA (no AMX)."]
    if data.get("ours_fp32_ops"):
        notes.append(f"Our conversions with `fp32_ops={data['ours_fp32_ops']}`.")
    if not data.get("complete", True):
        notes.append("Run stopped before its last cases (the cases below are complete).")
    lines = [_env(data) + _load_env(data["environment"]) + " " + " ".join(notes), "",
             "Every way a user runs the model, bf16 against fp32, per batch size: all paths of a "
             "case interleaved round by round in one process; ms per batch is a median, the ratios "
             "(x = fp32 time / this time, above 1 is faster) medians of per-round ratios; error = "
             "max |out - ref| / max |ref|, ref the user's fp32 block on the same batch. Paths: "
             + "; ".join(f"`{k}` = {v}" for k, v in PATH_NOTES.items() if k in _paths_run(data))
             + ".", ""]
    rows = []
    for c in data["results"]:
        for b in c["batches"]:
            for path, r in b["paths"].items():
                name = path
                if path.startswith("ours_block"):
                    name += f" ({c.get(path + '_backend') or 'generic kernels'})"
                rows.append([c["case"], b["batch"], name, _f(r.get("ms_per_batch")),
                             _f(r.get("x_fp32_block")), _f(r.get("x_fp32_module")),
                             _f(r.get("max_rel_err_vs_fp32_block")), r.get("error", "")])
    lines += _table(["case", "bs", "path (ours_block: its backend)", "ms / batch", "x fp32 block",
                     "x fp32 Module", "error vs fp32", "failed"], rows)
    lines += _tuning_lines(data)
    lines += ["", "Load average per case (start → end): " + "; ".join(
        f"{c['case']} {c['load_start'][0]:.1f} → {c['load_end'][0]:.1f}" for c in data["results"]) + "."]
    if data.get("targets"):
        lines += ["", "Targets (ours_block >= 2x the fp32 block and >= 1.8x fp32 Module; no bf16 "
                  "path slower than fp32 on its kind of path):", ""]
        lines += _table(["target", "measured"], [[k, {True: "met", False: "**not met**"}.get(v, v)]
                                                 for k, v in data["targets"].items()])
    return lines


def _paths_run(data) -> set[str]:
    return {p for c in data["results"] for b in c["batches"] for p in b["paths"]}


def _tuning_lines(data) -> list[str]:
    """What ``--tune`` timed per case and batch (absent without it)."""
    rows = []
    for c in data["results"]:
        for b in c["batches"]:
            t = b.get("tuning")
            if not t:
                continue
            kernels = t.get("kernels", [])
            slower = [k for k in kernels if k["low_ms"] > k["fp32_ms"]]
            rows.append([c["case"], b["batch"], len(kernels), len(slower), len(t.get("kept_fp32", [])),
                         _f(t.get("untuned_model_ms")), _f(t.get("tuned_model_ms")),
                         "yes" if t.get("applied", True) else "no (slower beyond the noise)",
                         _f(b.get("tuned_convert_s"))])
    if not rows:
        return []
    return ["", "Tuning per case and batch (`--tune`): distinct bf16 kernels timed, those slower "
            "in bf16 than in fp32 as timed (each alone), nodes kept fp32, the whole model converted "
            "untuned and tuned (ms, `simple_bind`), whether the tuned choices were kept, and the "
            "tuned conversion's seconds (timing included):", ""] + _table(
        ["case", "bs", "kernels", "bf16 slower", "nodes fp32", "untuned ms", "tuned ms", "applied",
         "convert s"], rows)


def zoo_casts(data) -> list[str]:
    keys = ["float16", "float16_cast_optional_params", "bfloat16", "bfloat16_cast_optional_params"]
    rows = []
    for r in data["results"]:
        if not r.get("built"):
            rows.append([r["model"], "not built here: " + r["error"]] + [""] * (len(keys) * 2 - 1))
            continue
        cells = []
        for k in keys:
            conv = r["conversions"][k]
            for w in ("contrib", "ours"):
                x = conv[w]
                cells.append(_casts(x) if x["ok"] else "FAILED: " + x["error"])
        rows.append([r["model"], *cells])
    lines = [_env(data), "", "Cast nodes (`amp_cast` + `amp_multicast`m), contrib then ours:", ""]
    lines += _table(["model"] + [f"{k.replace('_cast_optional_params', ' +opt')} {w}" for k in keys
                                 for w in ("contrib", "ours")], rows)
    lines += ["", "Low precision param MiB with `cast_optional_params=True` (contrib / ours):", ""]
    prow = []
    for r in data["results"]:
        if not r.get("built"):
            continue
        cells = []
        for k in ("float16_cast_optional_params", "bfloat16_cast_optional_params"):
            vals = [r["conversions"][k][w] for w in ("contrib", "ours")]
            cells.append(" / ".join(f"{v['low_precision_param_bytes'] / 2**20:.1f}" if v["ok"] else "failed"
                                    for v in vals))
        prow.append([r["model"], f"{r['fp32_param_bytes'] / 2**20:.1f}", *cells])
    lines += _table(["model", "fp32 param MiB", "fp16 +opt", "bf16 +opt"], prow)
    lines += ["", "Summary (models where both converted; fewer/equal/more = ours vs contrib cast nodes):", ""]
    srows = [[k, s["models"], ", ".join(s["contrib_failed"]) or "none", ", ".join(s["ours_failed"]) or "none",
              s["fewer"], s["equal"], s["more"], s["contrib_casts_total"], s["ours_casts_total"]]
             for k, s in data["summary"].items()]
    lines += _table(["setting", "models", "contrib failed on", "ours failed on", "ours fewer", "equal",
                     "ours more", "contrib casts total", "ours casts total"], srows)
    return lines


def memory(data) -> list[str]:
    rows = [[r["method"], _f(r.get("vmhwm_bytes", 0) / 1e9) if "vmhwm_bytes" in r else "–",
             _f(r.get("peak_over_param_bytes")), _f(r.get("peak_above_baseline_over_param_bytes")),
             _f(r.get("ru_maxrss_over_param_bytes")), _f(r.get("seconds")),
             _f(r.get("output_params_file_over_input")), r.get("error", "")]
            for r in data["results"]]
    return [_env(data), "",
            f"Checkpoint: {data['layers']} x FullyConnected {data['width']}x{data['width']} + bias, "
            f"{data['param_bytes'] / 1e9:.2f} GB of fp32 params; converted to float16 with "
            "`cast_optional_params=True` (`ours_auto_fp32_weights`: False). `ours_auto*`: "
            "`auto_convert_model` on one sample row (float16 checks emulated), the caller's "
            "fp32 dicts alive throughout, so fp32 + the returned fp16 params is its floor. "
            "Target: peak ≤ 1.6x the param bytes."
            + (f" Rows marked *(before)*: the same method with the `mxnet_amp` of "
               f"{data['before_src_label']} (`--before-src`), run just before it on the same "
               "checkpoint." if data.get("before_src_label") else ""), ""] + _table(
        ["method", "peak RSS GB (VmHWM)", "peak / param bytes", "(peak − import baseline) / param bytes",
         "ru_maxrss / param bytes", "seconds", "output file / input file", "error"], rows)


def bf16_kernels(data) -> list[str]:
    rows = [[r["op"], r["bfloat16_category"], _f(r.get("float32_ms")), _f(r.get("bfloat16_ms")),
             _f(r.get("bf16_over_fp32")), r.get("bfloat16_error", r.get("float32_error", ""))]
            for r in data["results"]]
    shape = "x".join(str(d) for d in data["shape"])
    return [_env(data), "",
            f"One op on a {shape} float32 / bfloat16 tensor (a second one, or a per-channel one for "
            "the broadcast forms), interleaved rounds; ms per call (median), bf16 / fp32 the median "
            "of per-round ratios; *bf16 list*: the op's category in `lists/bfloat16.toml`.", ""] + _table(
        ["op", "bf16 list", "fp32 ms", "bf16 ms", "bf16 / fp32", "error"], rows)


def gpu_inference(data) -> list[str]:
    rows = []
    for r in data["results"]:
        for k, v in r["variants"].items():
            rows.append([r["case"], k, _f(v.get("items_per_s")), _f(v.get("latency_ms_median")),
                         _f(v.get("latency_ms_p90")), _f(v.get("speedup_over_fp32")), v.get("error", "")])
    return [_env(data), ""] + _table(["case", "variant", "items/s", "latency ms (median)", "p90 ms",
                                      "x fp32", "error"], rows)


SECTIONS = [("Conversion speed", "conversion_speed", conversion_speed),
            ("CPU inference per path: bfloat16 against fp32, every way a user runs a model",
             "cpu_inference_paths", cpu_inference_paths),
            ("CPU inference per path with AMX (`enable_amx()`)",
             "cpu_inference_paths_amx", cpu_inference_paths),
            ("CPU inference per path with AMX, one thread, low load (the issue-25 table)",
             "cpu_inference_paths_amx_1thread", cpu_inference_paths),
            ("CPU inference per path with `tune=` and the fused checkpoint (issue 34, AMD EPYC, quiet)",
             "cpu_inference_paths_tune", cpu_inference_paths),
            ("CPU inference, bfloat16", "cpu_inference", cpu_inference),
            ("CPU inference, bfloat16, Gluon with oneDNN fusion (`hybridize(backend='MKLDNN')`)",
             "cpu_inference_gluon_mkldnn", cpu_inference),
            ("Cast counts and low precision params across the zoo", "zoo_casts", zoo_casts),
            ("bfloat16 CPU kernels, one op at a time", "bf16_kernels", bf16_kernels),
            ("bfloat16 CPU kernels, one op at a time, on the Xeon of the per-path runs (no AMX)",
             "bf16_kernels_xeon", bf16_kernels),
            ("bfloat16 CPU kernels, one op at a time, with AMX (`--amx`)", "bf16_kernels_amx",
             bf16_kernels),
            ("Memory: converting a 2.68 GB checkpoint", "memory", memory),
            ("GPU inference", "gpu_inference", gpu_inference)]


def render() -> str:
    lines = [START, "", "_Generated by `python benchmarks/render_docs.py` from benchmarks/results/*.json._", ""]
    for title, name, fn in SECTIONS:
        lines += [f"### {title}", ""]
        data = _load(name)
        lines += (fn(data) if data else [f"Not run: no benchmarks/results/{name}.json."])
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--print", action="store_true", help="print instead of writing the doc")
    opts = ap.parse_args(argv)
    text = render()
    if opts.print:
        print(text)
        return 0
    with open(DOC) as f:
        doc = f.read()
    if START not in doc or END not in doc:
        raise SystemExit(f"{DOC} lacks the {START} / {END} markers")
    head, rest = doc.split(START, 1)
    _, tail = rest.split(END, 1)
    with open(DOC, "w") as f:
        f.write(head + text + tail)
    print(f"updated {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
