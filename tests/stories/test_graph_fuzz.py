"""Property test (issue 33): random mutations of real symbol JSONs (indices, attributes,
heads, node lists, dtypes, arg_nodes, node_row_ptr) each give a typed AMPError or a valid
conversion, never a crash.

The cases run in worker subprocesses (two at a time, for two cores), so that a segmentation
fault inside MXNet fails the test instead of killing it: each worker logs ``start i`` before
case ``i``; a worker that dies leaves its case named, and a new worker goes on after it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import graph_fuzz

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CASES = 1000
SEED = 20261205


def _stream(folder: str, cases_file: str, lo: int, hi: int, tag: str) -> dict[int, str]:
    """Run cases ``lo..hi`` in as many workers as it takes; ``{case: outcome line}``."""
    results: dict[int, str] = {}
    out_file = os.path.join(folder, f"results-{tag}.txt")
    start = lo
    env = {**os.environ, "PYTHONPATH": REPO, "MXNET_SUBGRAPH_VERBOSE": "0", "OMP_NUM_THREADS": "1"}
    while start < hi:
        done = subprocess.run([sys.executable, graph_fuzz.__file__, cases_file,
                               out_file, folder, str(start), str(hi)],
                              env=env, capture_output=True, text=True, timeout=600)
        started = None
        with open(out_file) as f:
            for line in f:
                word, _, rest = line.partition(" ")
                i = int(rest.split()[0])
                if word == "start":
                    started = i
                else:
                    results[i] = line.strip()
                    started = None
        if started is not None:   # the worker died inside this case
            tail = (done.stderr.strip().splitlines() or [""])[-1]
            results[started] = f"crash {started} (exit {done.returncode}): {tail[:300]}"
            start = started + 1
        elif done.returncode != 0:
            pytest.fail(f"fuzz worker failed outside a case: {done.stderr[-2000:]}")
        else:
            start = hi
    return results


def test_mutated_symbol_jsons_give_typed_errors_or_conversions(tmp_path):
    import concurrent.futures
    models = graph_fuzz.base_models(str(tmp_path))
    cases = graph_fuzz.mutations(models, CASES, SEED)
    cases_file = tmp_path / "cases.json"
    cases_file.write_text(json.dumps(cases))
    half = CASES // 2
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        parts = [pool.submit(_stream, str(tmp_path), str(cases_file), lo, hi, tag)
                 for lo, hi, tag in ((0, half, "a"), (half, CASES, "b"))]
        results = {k: v for part in parts for k, v in part.result().items()}
    assert sorted(results) == list(range(CASES))
    bad = [f"{line}\n    model {cases[i][0]}: {cases[i][1]}" for i, line in sorted(results.items())
           if line.split()[0] not in ("ok", "typed")]
    outcomes = [line.split()[0] for line in results.values()]
    assert not bad, f"{len(bad)} of {CASES} mutations crashed or raised an untyped error:\n" \
        + "\n".join(bad[:60])
    # the mutations reach past the parser: some convert, most are refused
    assert outcomes.count("ok") >= 20 and outcomes.count("typed") >= 300, \
        {k: outcomes.count(k) for k in set(outcomes)}
