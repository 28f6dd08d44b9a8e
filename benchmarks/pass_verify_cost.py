"""What the passes' postcondition costs: a conversion with every pass's output checked by
``verify_graph`` (``mxnet_amp.passes.kernel.GraphPass``, the default) against the same
conversion with the check replaced by a no-op, interleaved in one process; the ratio is the
median of the per-round ratios checked / unchecked.

    python benchmarks/pass_verify_cost.py           # synthetic 100k nodes (3 rounds)
    python benchmarks/pass_verify_cost.py --quick   # synthetic 1k nodes (seconds)
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common as C  # noqa: E402
from synthetic import synthetic_model  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import mxnet_amp as amp
    import mxnet_amp.passes.kernel as kernel
    from mxnet_amp.ir.verify import verify_graph

    nodes, repeats = (1_000, 3) if args.quick else (100_000, 3)
    sym, arg_params, aux_params = synthetic_model(nodes)
    calls = [0]

    def counted(graph, **kw):
        calls[0] += 1
        return verify_graph(graph, **kw)

    def skipped(graph, **kw):
        return graph

    def convert(check):
        def run():
            kernel.verify_graph = check
            try:
                amp.convert_model(sym, arg_params, aux_params, target_dtype="bfloat16")
            finally:
                kernel.verify_graph = verify_graph
        return run

    times = C.interleaved_times({"checked": convert(counted), "unchecked": convert(skipped)}, repeats)
    checks_per_conversion = calls[0] // (repeats + 1)   # + the warm-up round
    result = {"case": f"synthetic_{nodes}", "nodes": C.num_nodes(sym),
              "checked_s": C.median(times["checked"]), "unchecked_s": C.median(times["unchecked"]),
              "checked/unchecked": C.paired_ratio(times["checked"], times["unchecked"]),
              "checks_per_conversion": checks_per_conversion, "rounds": repeats}
    C.print_table(list(result), [list(result.values())])
    C.write_json(args.out or C.default_out("pass_verify_cost", args.quick),
                 {"environment": C.environment(), "results": [result]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
