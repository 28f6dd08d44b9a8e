"""Executions the automatic mode needs to find planted accuracy culprits: the attribution
run (``search='attribution'``, the default) beside the bisection (``search='bisection'``),
in one run, on the same graphs (benchmarks/planted_culprits.py).

For each shape (chain, DAG), N (op nodes) and k (culprits): executions, whether the
float32 set found is exactly the planted culprits, whether the result validated, and wall
time; and, to show each cell is fair, the outputs' error with exactly the planted culprits
in float32 (``oracle_error``, two executions outside the counts): "exact and validated"
is possible only where it is within the tolerance. The check is the default one at
tolerance 0.1: a 5000-layer chain of random orthogonal FullyConnected layers accumulates
0.015-0.03 of plain float16 rounding with no culprit (10 seeds, measured 2026-12-04) and
up to 0.051 with one culprit kept in float32 (seed 5001), beyond float16's default 0.01
and the 0.05 used before, with nothing wrong in it; each culprit alone costs ~1.

    python benchmarks/auto_attribution.py               # k 1,2,4,8 x N 50,400,5000 x chain,dag
    python benchmarks/auto_attribution.py --quick       # seconds
    python benchmarks/auto_attribution.py --bisection-max-n 400 --bisection-max-k 1
        # the bisection at N > 400 only for k <= 1 (it needs ~k log2 N executions)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from _common import default_out, environment, write_between_markers, write_json  # noqa: E402
from planted_culprits import planted  # noqa: E402
from planted_culprits_structured import planted_structured  # noqa: E402
from planted_culprits_attrib import planted_attrib  # noqa: E402
from planted_paired import planted_paired  # noqa: E402

# the independent generators: the first (FC + 2048 cancelled by the next op), the structured
# one (paired channels with look-alikes, folded BatchNorms, wide-range weights, long
# accumulations), issue 41's shape (paired channels, large weights rounding a small
# signal away, look-alikes with the same weights) and the attribution's third (residuals,
# near-one differences, softmax, convolutions with normalisation)
GENERATORS = {"shifted": planted, "structured": planted_structured, "paired": planted_paired,
              "attrib": planted_attrib}

TOLERANCE = 0.1


def _one(p, search: str, accuracy: tuple | None = None) -> dict:
    """One search: executions, exactness (the accuracy nodes kept are the planted accuracy
    culprits ``accuracy``, default all), 1-minimality as the report shows it, and the
    attribution's own hit rate (planted culprits among its top-k ranked nodes, over k)."""
    from mxnet_amp.auto import auto_convert_model
    accuracy = tuple(p.culprits) if accuracy is None else accuracy
    start = time.perf_counter()
    _, _, _, report = auto_convert_model(p.sym, p.arg_params, p.aux_params, p.sample, "float16",
                                         tolerance=TOLERANCE, quiet=True, search=search)
    found = sorted(k.name for k in report.by_reason("accuracy"))
    top = [e.name for e in report.attribution[:len(accuracy)]]
    picks = [s for s in report.steps if s.kind == "validate"]
    return {"executions": report.executions, "exact": found == sorted(accuracy),
            "validated": report.validated, "relative_error": report.relative_error,
            "kept": len(report.kept_fp32),
            "needless": len({k.name for k in report.kept_fp32} - set(p.culprits)),
            "one_minimal": bool(report.minimality and report.minimality.startswith("1-minimal")),
            "minimality": report.minimality,
            "hit_rate": (len(set(top) & set(accuracy)) / len(accuracy)) if top else None,
            "picks_validated": bool(picks and picks[0].passed),
            # the picks were exactly the culprits (validated, as many as them: no range culprit
            # or user exclusion in these graphs, so the validation kept the picks alone)
            "picks_exact": bool(picks and picks[0].passed and picks[0].excluded == len(accuracy)
                                and found == sorted(accuracy)),
            "seconds": round(time.perf_counter() - start, 2),
            "steps": [s.kind for s in report.steps]}


def bounds(op_nodes: int, k: int) -> tuple[int, int]:
    """docs/emulation_and_auto.md, "Execution bounds": ``(right, wrong)``: the attribution
    right, 2 + k + 1 checks and its own run; wrong, the bisection alone on the same graph
    (3 + k (ceil(log2 N) + 1)) plus the attribution's run and failed validation, plus the
    shrinking's check of each culprit alone."""
    return 2 + k + 1 + 1, 3 + k * (math.ceil(math.log2(op_nodes)) + 1) + 2 + k


def within(row: dict) -> bool:
    """Whether the attribution search kept within its bound (the right one when its picks
    were exactly the culprits, else the bisection's; a superset of picks is shrunk within
    the latter too)."""
    a = row["attribution"]
    return a["executions"] <= (row["bound"] if a.get("picks_exact") else row["bound_wrong"])


def _oracle(p) -> float:
    """The outputs' relative error with exactly the planted culprits kept in float32."""
    from mxnet_amp.auto import auto_convert_model
    _, _, _, report = auto_convert_model(p.sym, p.arg_params, p.aux_params, p.sample, "float16",
                                         tolerance=TOLERANCE, quiet=True,
                                         excluded_sym_names=list(p.culprits))
    return report.relative_error


def run(ns, ks, shapes, bisection_max_n: int, bisection_max_k: int, out: str | None = None,
        generators=tuple(GENERATORS)) -> dict:
    rows: list = []
    cells = [(g, shape, n, k) for g in generators for shape in shapes for n in ns for k in ks]
    for generator, shape, n, k in cells:
        p = GENERATORS[generator](n, k, shape, seed=n + k)
        right, wrong = bounds(p.op_nodes, k)
        row = {"generator": generator, "shape": shape, "n": p.op_nodes, "k": k,
               "bound": right, "bound_wrong": wrong, "oracle_error": _oracle(p),
               "attribution": _one(p, "attribution")}
        if n <= bisection_max_n or k <= bisection_max_k:
            row["bisection"] = _one(p, "bisection")
            row["bisection_bound"] = 3 + k * (math.ceil(math.log2(p.op_nodes)) + 1)
        rows.append(row)
        print(_line(row), flush=True)
        if out:   # what finished so far, in case the run is cut short
            write_json(out, {"rows": rows, "partial": True, "tolerance": TOLERANCE,
                             "environment": environment()})
    return {"rows": rows, "tolerance": TOLERANCE, "environment": environment(),
            "bisection_max_n": bisection_max_n, "bisection_max_k_beyond": bisection_max_k}


def _line(row: dict) -> str:
    a = row["attribution"]
    b = row.get("bisection")
    old = (f"{b['executions']:>4} exec exact={b['exact']!s:5} ok={b['validated']!s:5} "
           f"{b['seconds']:7.1f}s") if b else "   (not run)"
    return (f"{row.get('generator', 'shifted'):10} {row['shape']:5} N={row['n']:5} k={row['k']} oracle {row['oracle_error']:.3f}  "
            f"attribution {a['executions']:>2} exec "
            f"(bound {row['bound']}/{row.get('bound_wrong')}) exact={a['exact']!s:5} "
            f"1-minimal={a.get('one_minimal')!s:5} hit={a.get('hit_rate')} ok={a['validated']!s:5} "
            f"{a['seconds']:6.1f}s | bisection {old}")


def markdown(result: dict) -> str:
    """The table for docs/emulation_and_auto.md."""
    lines = ["| generator | shape | N | k | error, culprits alone float32 | executions | bound: "
             "right (2+k+1, +1 attribution) / wrong (bisection +2 +k) | within | exact | "
             "1-minimal | validated | attribution hit rate (top k) | picks validated | "
             "bisection alone: executions |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    yes = {True: "yes", False: "NO", None: "-"}
    for r in result["rows"]:
        a, b = r["attribution"], r.get("bisection")
        oracle = f"{r['oracle_error']:.3f}" if "oracle_error" in r else "-"
        hit = "-" if a.get("hit_rate") is None else f"{a['hit_rate']:.2f}"
        lines.append(f"| {r.get('generator', 'shifted')} | {r['shape']} | {r['n']} | {r['k']} | "
                     f"{oracle} | {a['executions']} | {r['bound']} / {r.get('bound_wrong', '-')} | "
                     f"{yes[within(r)]} | {yes[a['exact']]} | {yes[a.get('one_minimal')]} | "
                     f"{yes[a['validated']]} | {hit} | {yes[a.get('picks_validated')]} | "
                     + (f"{b['executions']} |" if b else "not run |"))
    return "\n".join(lines)


# issue 41's table: (shape, N, accuracy culprits, overflow culprits), its generator's shape
ISSUE_CELLS = [("chain", 400, 3, 0), ("dag", 700, 2, 0), ("chain", 400, 3, 2),
               ("dag", 700, 1, 1), ("chain", 1000, 4, 0), ("dag", 1000, 8, 0)]


def issue_table(out: str | None = None) -> dict:
    """Issue 41's six cells on :func:`planted_paired` (seed N + k): executions, kept float32,
    needless float32, exactness and 1-minimality."""
    rows = []
    for shape, n, k, overflow in ISSUE_CELLS:
        p = planted_paired(n, k, shape, seed=n + k, overflow=overflow)
        right, wrong = bounds(p.op_nodes, k)
        row = {"generator": "paired", "shape": shape, "n": p.op_nodes, "k": k,
               "overflow": overflow, "bound": right, "bound_wrong": wrong,
               "attribution": _one(p, "attribution", tuple(p.culprits[:k]))}
        rows.append(row)
        a = row["attribution"]
        print(f"{shape:5} N={n} k={k}+{overflow} exec {a['executions']} (bounds {right}/{wrong}) "
              f"kept {a['kept']} needless {a['needless']} exact={a['exact']} "
              f"{a['minimality']} {a['seconds']}s", flush=True)
    result = {"rows": rows, "tolerance": TOLERANCE, "environment": environment()}
    if out:
        write_json(out, result)
    return result


def issue_markdown(result: dict) -> str:
    lines = ["| graph | culprits | executions (bound right / wrong) | kept float32 | needless "
             "float32 | exact | how minimality was shown |", "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        a = r["attribution"]
        culprits = f"{r['k']} accuracy" + (f" + {r['overflow']} overflow" if r["overflow"] else "")
        lines.append(f"| {r['shape']}, {r['n']} nodes | {culprits} | {a['executions']} "
                     f"({r['bound']} / {r['bound_wrong']}) | {a['kept']} | {a['needless']} | "
                     f"{'yes' if a['exact'] else 'NO'} | {a['minimality']} |")
    return "\n".join(lines)


def render(paths: list[str], doc: str) -> None:
    """Write the table of the result files ``paths`` between the markers of ``doc``."""
    rows, envs, commands = [], [], []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        rows += data["rows"]
        envs.append(data.get("environment", {}))
        commands.append(data.get("command", "") + (" (cut short)" if data.get("partial") else ""))
    env = envs[0] if envs else {}
    # one row per cell (a cell measured twice, by two of the files: the first), in order
    order = list(GENERATORS)
    cells: dict = {}
    for r in rows:
        cells.setdefault((order.index(r.get("generator", "shifted")), r["shape"], r["n"], r["k"]), r)
    rows = [cells[key] for key in sorted(cells)]
    unrun = [r for r in rows if "bisection" not in r]
    loads = sorted(e.get("loadavg", [0])[0] for e in envs)
    table = markdown({"rows": rows}) + (
        f"\n\nMeasured from {min(e.get('utc', '?') for e in envs)} on {env.get('cpu', '?')} "
        f"(flags {', '.join(f for f in env.get('cpu_flags', []) if 'bf16' in f or f == 'avx2')}; "
        f"{env.get('cpu_count')} cores shared with other jobs, 1-minute load average "
        f"{loads[0]:.1f} to {loads[-1]:.1f}), tolerance "
        f"{data.get('tolerance', TOLERANCE)}: " + "; ".join(f"`{c}`" for c in commands) + ". "
        + (f"The bisection alone did not run on {len(unrun)} of the {len(rows)} cells (about "
           "3 + k (log2 N + 1) executions of each graph, too slow on this shared machine)."
           if unrun else ""))
    write_between_markers(doc, "auto_attribution", table)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N 50, k 1 and 2")
    ap.add_argument("--bisection-max-n", type=int, default=5000,
                    help="run the bisection only on graphs up to this N (it is slow at 5000)")
    ap.add_argument("--bisection-max-k", type=int, default=8,
                    help="beyond --bisection-max-n, run the bisection only up to this k")
    ap.add_argument("--shapes", default="chain,dag", help="comma-separated: chain, dag")
    ap.add_argument("--generators", default=",".join(GENERATORS),
                    help="comma-separated: " + ", ".join(GENERATORS))
    ap.add_argument("--ns", default="50,400,5000", help="comma-separated N")
    ap.add_argument("--ks", default="1,2,4,8", help="comma-separated k")
    ap.add_argument("--render", nargs="+", metavar="RESULT.json", default=None,
                    help="only write the table of these result files into docs/emulation_and_auto.md")
    ap.add_argument("--out", default=None)
    ap.add_argument("--issue-table", action="store_true",
                    help="issue 41's six cells on benchmarks/planted_paired.py")
    args = ap.parse_args(argv)
    if args.issue_table:
        print(issue_markdown(issue_table(args.out)))
        return 0
    if args.render:
        render(args.render, os.path.join(os.path.dirname(HERE), "docs", "emulation_and_auto.md"))
        return 0
    out = args.out or default_out("auto_attribution", args.quick)
    shapes = args.shapes.split(",")
    generators = args.generators.split(",")
    if args.quick:
        result = run([50], [1, 2], shapes, args.bisection_max_n, args.bisection_max_k, out,
                     generators)
    else:
        ns, ks = [int(n) for n in args.ns.split(",")], [int(k) for k in args.ks.split(",")]
        result = run(ns, ks, shapes,
                     args.bisection_max_n, args.bisection_max_k, out, generators)
    write_json(out, result)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
