"""The attribution's hit rate on the planted-culprit generators: whether its top-k ranked
nodes are exactly the k planted culprits, per generator, shape, N and k.

For each cell, one ``auto_convert_model`` run (float16, tolerance 0.1, the default search):
``hit`` (the k nodes the attribution ranked first are the culprits), the rank of the last
culprit in its ranking (k where it hit), the *margin* (the smallest culprit's measured
contribution over the largest of any other node: above 1 wherever it hit), whether the
search's result is exactly the culprits and validated, its executions, and wall time.
The generators: ``shifted`` (benchmarks/planted_culprits.py), ``structured``
(benchmarks/planted_culprits_structured.py) and ``attrib``
(benchmarks/planted_culprits_attrib.py).

    python benchmarks/attribution_hit_rate.py                      # N 50,400 x k 1,2,4,8
    python benchmarks/attribution_hit_rate.py --ns 5000 --out x.json
    python benchmarks/attribution_hit_rate.py --quick              # seconds
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from _common import default_out, environment, write_json  # noqa: E402
from planted_culprits import planted  # noqa: E402
from planted_culprits_attrib import planted_attrib  # noqa: E402
from planted_culprits_structured import planted_structured  # noqa: E402

GENERATORS = {"shifted": planted, "structured": planted_structured, "attrib": planted_attrib}
TOLERANCE = 0.1


def cell(generator: str, shape: str, n: int, k: int) -> dict:
    """One cell: the generator's graph (seed ``n + k``, as benchmarks/auto_attribution.py)
    through the automatic mode, and how its attribution ranked the culprits."""
    from mxnet_amp.auto import auto_convert_model
    p = GENERATORS[generator](n, k, shape, seed=n + k)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, _, _, report = auto_convert_model(p.sym, p.arg_params, p.aux_params, p.sample,
                                             "float16", tolerance=TOLERANCE, quiet=True)
    seconds = time.perf_counter() - start
    ranking = [e.name for e in report.attribution]
    culprits = set(p.culprits)
    found = sorted(x.name for x in report.by_reason("accuracy"))
    rank = max((ranking.index(c) + 1 for c in culprits if c in ranking), default=0)
    contributions = {e.name: e.contribution for e in report.attribution}
    lowest = min((contributions.get(c, 0.0) for c in culprits), default=0.0)
    other = max((v for name, v in contributions.items() if name not in culprits), default=0.0)
    # k: the culprits planted (fewer than asked where the graph had no room)
    return {"generator": generator, "shape": shape, "n": p.op_nodes, "k": len(p.culprits),
            "attributed": bool(ranking),
            "hit": set(ranking[:len(culprits)]) == culprits,
            "last_culprit_rank": rank if all(c in ranking for c in culprits) else None,
            "margin": lowest / other if other > 0 else math.inf,
            "exact": found == sorted(p.culprits), "validated": report.validated,
            # 2 + k + 1 checks (reference, check, validation, each culprit returned alone: the
            # shrinking's proof of 1-minimality), the attribution's own run beside them
            "executions": report.executions, "bound": 2 + len(culprits) + 1 + 1,
            "seconds": round(seconds, 2)}


def markdown(rows: list[dict]) -> str:
    """A table of the cells, and the hit rate per generator and per k."""
    lines = ["| generator | shape | N | k | hit (top-k = culprits) | last culprit's rank | "
             "margin | exact, validated | executions (2+k+1 checks + the attribution run) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['generator']} | {r['shape']} | {r['n']} | {r['k']} | "
                     f"{'yes' if r['hit'] else 'NO'} | {r['last_culprit_rank']} | "
                     f"{r['margin']:.3g} | {'yes' if r['exact'] else 'NO'}, "
                     f"{'yes' if r['validated'] else 'NO'} | {r['executions']} ({r['bound']}) |")
    lines.append("")
    for key in ("generator", "k", "n"):
        groups: dict = {}
        for r in rows:
            groups.setdefault(r[key], []).append(r["hit"])
        lines.append(f"hit rate by {key}: " + ", ".join(
            f"{g}: {sum(v)}/{len(v)}" for g, v in groups.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--generators", default=",".join(GENERATORS))
    ap.add_argument("--shapes", default="chain,dag")
    ap.add_argument("--ns", default="50,400")
    ap.add_argument("--ks", default="1,2,4,8")
    ap.add_argument("--quick", action="store_true", help="N 50, k 1 and 2")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    ns = [50] if args.quick else [int(n) for n in args.ns.split(",")]
    ks = [1, 2] if args.quick else [int(k) for k in args.ks.split(",")]
    out = args.out or default_out("attribution_hit_rate", args.quick)
    rows: list[dict] = []
    for generator in args.generators.split(","):
        for shape in args.shapes.split(","):
            for n in ns:
                for k in ks:
                    rows.append(cell(generator, shape, n, k))
                    print(rows[-1], flush=True)
                    write_json(out, {"rows": rows, "partial": True, "tolerance": TOLERANCE,
                                     "environment": environment()})
    write_json(out, {"rows": rows, "tolerance": TOLERANCE, "environment": environment()})
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
