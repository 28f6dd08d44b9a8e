"""Running the sweep: one worker process per model, per-model timeouts, the budget, resuming."""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from typing import Sequence

from .common import DTYPES, TOLERANCE, _first_line
from .models import cost_rank, family_of
from .sweep import _for_all, sweep_one


def _worker(name: str, dtypes: Sequence[str], tol: float, bn: str, auto_dtypes: Sequence[str]) -> None:
    """Sweep ``name``; write its JSON record as one line on stdout."""
    out = sys.stdout
    sys.stdout = sys.stderr  # library prints must not corrupt the record
    try:
        rec = sweep_one(name, dtypes, tol, bn=bn, auto_dtypes=auto_dtypes)
    except BaseException as err:  # noqa: BLE001 - a record, not a traceback
        rec = _for_all(dtypes, {"model": name, "family": family_of(name)}, status="fail",
                       reason="sweep crashed: " + _first_line(err))
    out.write(json.dumps(rec) + "\n")
    out.flush()


class _Worker:
    """A worker process sweeping one model, asynchronously: one process per model, as in
    a long-lived one, state MXNet kept from earlier models made later ones crash or go
    non-finite (each of them alone is fine)."""

    def __init__(self, name: str, timeout: float, dtypes: Sequence[str], tol: float, nice: int,
                 threads: int, bn: str, auto_dtypes: Sequence[str]):
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = str(threads)
        env.pop("MXNET_SUBGRAPH_BACKEND", None)  # chosen per bind (_subgraph_backend)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_repo_root(), env.get("PYTHONPATH")]))
        cmd = [sys.executable, _ENTRY, "--worker", name,
               "--dtypes", *dtypes, "--tol", str(tol), "--bn", bn, "--auto-dtypes", *auto_dtypes]
        self.model, self.dtypes, self.started = name, tuple(dtypes), time.time()
        self.deadline = self.started + timeout
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, text=True,
                                     preexec_fn=(lambda: os.nice(nice)) if nice else None)

    def result(self) -> dict:
        """The model's record (call once the process's stdout is readable)."""
        line = self.proc.stdout.readline()
        return json.loads(line) if line else _for_all(
            self.dtypes, {"model": self.model, "family": family_of(self.model)}, status="fail",
            reason="worker died (crash or out of memory)")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


_TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ENTRY = os.path.join(_TOOLS, "zoo_sweep.py")  # the command line entry, run per model


def _repo_root() -> str:
    return os.path.dirname(_TOOLS)


def _load_avg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def run_sweep(models: Sequence[str], *, dtypes: Sequence[str] = DTYPES, tol: float = TOLERANCE,
              timeout: float = 120, budget: float | None = None, nice: int = 0, jobs: int = 1,
              json_path: str | None = None, progress: bool = True,
              done: dict[str, dict] | None = None, bn: str = "calibrated",
              threads: int | None = None, auto_dtypes: Sequence[str] | None = None) -> list[dict]:
    """Sweep ``models`` (cheapest first) in ``jobs`` worker processes of ``threads`` threads
    each (default ``cpu_count // jobs``); the records, in list order. ``done``: records kept from an earlier run
    (those models are not run again). Each record notes the 1-minute load average when its
    model finished (``load_avg``), to read its timings by."""
    records: dict[str, dict] = dict(done or {})
    queue = [m for m in sorted(models, key=cost_rank) if m not in records]
    threads = threads or max(1, (os.cpu_count() or 1) // jobs)
    auto_dtypes = tuple(dtypes if auto_dtypes is None else auto_dtypes)
    start = time.time()
    workers: list[_Worker] = []

    def finish(worker: _Worker, rec: dict) -> None:
        rec["wall_s"] = round(time.time() - worker.started, 1)
        rec["load_avg"] = _load_avg()
        rec["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        records[rec["model"]] = rec
        if progress:
            cells = "  ".join(f"{d}: {rec[d]['status']} {rec[d].get('max_rel_err', '')!s:.8s}"
                              for d in dtypes if d in rec)
            print(f"[{time.time() - start:6.0f}s] {rec['model']:45s} {cells}  "
                  f"{next((rec[d].get('reason', '') for d in dtypes if rec.get(d, {}).get('reason')), '')[:80]}",
                  flush=True)
        if json_path:
            write_json(json_path, [records[m] for m in models if m in records], dtypes, tol, timeout, bn)

    while queue or workers:
        left = None if budget is None else budget - (time.time() - start)
        if left is not None and left < 5:
            for name in queue:
                records[name] = _for_all(dtypes, {"model": name, "family": family_of(name)},
                                         status="skipped",
                                         reason="sweep wall-clock budget spent (heaviest models run last)")
            queue = []
        while queue and len(workers) < jobs:
            workers.append(_Worker(queue.pop(0), timeout if left is None else min(timeout, left),
                                   dtypes, tol, nice, threads, bn, auto_dtypes))
        if not workers:
            continue
        wait = max(0.0, min(w.deadline for w in workers) - time.time())
        ready, _, _ = select.select([w.proc.stdout for w in workers], [], [], wait)
        for worker in list(workers):
            if worker.proc.stdout in ready:
                rec = worker.result()
            elif time.time() >= worker.deadline:
                timed_out = worker.deadline - worker.started >= timeout
                rec = _for_all(dtypes, {"model": worker.model, "family": family_of(worker.model)},
                               status="timeout" if timed_out else "skipped",
                               reason=(f"over the per-model timeout of {timeout:g} s"
                                       if timed_out else "sweep wall-clock budget spent"))
            else:
                continue
            worker.kill()
            workers.remove(worker)
            finish(worker, rec)
    if json_path:  # the models the budget left unrun are recorded too
        write_json(json_path, [records[m] for m in models if m in records], dtypes, tol, timeout, bn)
    return [records[m] for m in models]


def write_json(path: str, records: list[dict], dtypes: Sequence[str], tol: float,
                timeout: float, bn: str) -> None:
    """Write the sweep's ``records`` and settings to ``path`` as JSON (atomically: a reader
    never sees half a file, and an interrupted write leaves the old one)."""
    from mxnet_amp.files.atomic import atomic_write
    body = json.dumps({"dtypes": list(dtypes), "tolerance": tol, "timeout_s": timeout, "bn": bn,
                       "records": records}, indent=1)

    def write(tmp):
        with open(tmp, "w") as f:
            f.write(body)
    atomic_write(path, write)


_UNFINISHED = ("skipped", "timeout")


def read_sweeps(paths: Sequence[str]) -> tuple[list[dict], dict]:
    """The records of the sweep JSON files ``paths``, one per model, and their shared
    settings (``dtypes``, ``tolerance``, ``timeout_s``, ``bn``).

    A model in several files keeps the record of the last file that ran it (a ``skipped``
    or ``timeout`` record never replaces one that ran: a rerun that did not finish says
    nothing new); the order is the first file's, then each new model
    in its file's order. Files swept with other dtypes, tolerance or BatchNorm setting cannot
    be merged: ``ValueError`` naming the file."""
    records: dict[str, dict] = {}
    settings: dict | None = None
    for path in paths:
        with open(path) as f:
            saved = json.load(f)
        mine = {k: saved.get(k) for k in ("dtypes", "tolerance", "bn")}
        if settings is not None and {k: settings[k] for k in mine} != mine:
            raise ValueError(f"{path}: swept with {mine}, not as the files before it "
                             f"({ {k: settings[k] for k in mine} }): records not comparable")
        if settings is None:
            settings = {**mine, "timeout_s": saved.get("timeout_s")}
        for rec in saved["records"]:
            old = records.get(rec["model"])
            if old is None or rec.get(mine["dtypes"][0], {}).get("status") not in _UNFINISHED:
                records[rec["model"]] = rec
    if settings is None:
        raise ValueError("no sweep JSON given")
    return list(records.values()), settings
