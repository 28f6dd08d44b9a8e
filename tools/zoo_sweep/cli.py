"""Command line of the zoo sweep (``python tools/zoo_sweep.py --help``)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Sequence

from . import __doc__ as _PACKAGE_DOC
from .common import DTYPES, TOLERANCE
from .render import summarize, write_markdown
from .runner import _worker, read_sweeps, run_sweep, write_json


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=_PACKAGE_DOC.split("\n")[0])
    p.add_argument("--models", nargs="*", help="model names (default: the whole zoo)")
    p.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    p.add_argument("--bn", choices=("calibrated", "identity"), default="calibrated",
                   help="BatchNorm statistics: calibrated layer by layer on sample inputs "
                        "(default), or random-init identity")
    p.add_argument("--tol", type=float, default=TOLERANCE)
    p.add_argument("--auto-dtypes", nargs="*", default=None, choices=list(DTYPES),
                   help="dtypes whose failures auto_convert_model tries to fix (default: all; "
                        "none: give the flag alone)")
    p.add_argument("--timeout", type=float, default=300, help="per-model seconds")
    p.add_argument("--budget", type=float, default=None, help="total wall-clock seconds")
    p.add_argument("--nice", type=int, default=0, help="niceness of the workers")
    p.add_argument("--jobs", type=int, default=1, help="models run at once (worker processes)")
    p.add_argument("--threads", type=int, default=None,
                   help="OMP threads per worker (default: cores / jobs)")
    p.add_argument("--resume", action="store_true",
                   help="keep the records already in --json; run only the models missing there")
    p.add_argument("--json", default=None,
                   help="write the records here (with --report-from: the merged records)")
    p.add_argument("--md", default=None, help="write the markdown report here")
    p.add_argument("--report-from", nargs="+", default=None, metavar="JSON",
                   help="run nothing: report on the records of these sweep JSON files (their "
                        "models only; a model in several files: the last file that ran it)")
    p.add_argument("--wall", type=float, default=0.0, help="with --report-from: the run's seconds")
    p.add_argument("--command", default=None, help="with --report-from: the command that ran")
    p.add_argument("--note", action="append", default=[],
                   help="with --report-from: a line for the report's preamble")
    p.add_argument("--worker", metavar="MODEL", default=None, help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see ``--help``); returns the exit status."""
    p = _parser()
    a = p.parse_args(argv)
    if a.worker:
        _worker(a.worker, a.dtypes, a.tol, a.bn, a.dtypes if a.auto_dtypes is None else a.auto_dtypes)
        return 0
    if a.report_from:
        try:
            records, saved = read_sweeps(a.report_from)
        except (OSError, ValueError) as err:
            p.error(f"--report-from: {err}")
        _report(a, records, saved)
        return 0
    if a.models:
        models = list(a.models)
    else:
        from gluoncv import model_zoo
        models = list(model_zoo.get_model_list())
    done = None
    if a.resume and a.json and os.path.exists(a.json):
        with open(a.json) as f:
            done = {r["model"]: r for r in json.load(f)["records"]
                    if r.get(a.dtypes[0], {}).get("status") not in ("skipped", None)}
        # a resumed run keeps the earlier models the JSON holds beyond this run's list
        models = [m for m in done if m not in models] + models
    t = time.time()
    records = run_sweep(models, dtypes=a.dtypes, tol=a.tol, timeout=a.timeout, budget=a.budget,
                        nice=a.nice, jobs=a.jobs, json_path=a.json, done=done, bn=a.bn,
                        threads=a.threads, auto_dtypes=a.auto_dtypes)
    wall = time.time() - t
    if a.md:
        command = "python tools/zoo_sweep.py " + " ".join(argv if argv is not None else sys.argv[1:])
        write_markdown(a.md, records, dtypes=a.dtypes, tol=a.tol, command=command, wall_s=wall,
                       timeout=a.timeout, bn=a.bn)
    print(json.dumps([summarize(records, d, a.tol) for d in a.dtypes], indent=1))
    return 0


def _report(a: argparse.Namespace, records: list[dict], saved: dict) -> None:
    """``--report-from``: the merged records to ``--json``, the report to ``--md``, the
    summaries to stdout."""
    dtypes, tol = saved["dtypes"], saved["tolerance"]
    if a.json:
        write_json(a.json, records, dtypes, tol, saved.get("timeout_s") or a.timeout, saved["bn"])
    if a.md:
        write_markdown(a.md, records, dtypes=dtypes, tol=tol,
                       command=a.command or "python tools/zoo_sweep.py", wall_s=a.wall,
                       timeout=saved.get("timeout_s") or a.timeout, bn=saved.get("bn") or "calibrated",
                       preamble=a.note)
    print(json.dumps([summarize(records, d, tol) for d in dtypes], indent=1))
