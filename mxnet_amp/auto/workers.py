"""Running one model over many batches: in this process, in worker processes on every core
(each its own program, :mod:`mxnet_amp.auto.worker_process`), or on a Dask cluster
(:mod:`mxnet_amp.auto.dask_pool`).

A model travels as a :class:`ModelBlob`: its symbol JSON (casts kept) and its params saved
to bytes, and the path it runs (fused as ``Module`` binds it, or op by op), loaded once per
worker and configuration. Batches go round-robin to the workers
(batch ``i`` to worker ``i % n``) with at most two per worker in flight, and the outputs come
back in batch order, so whatever is computed from them (a metric, a closeness check) is the
same for any number of workers.
"""
from __future__ import annotations

import collections
import os
import pickle
import subprocess
import sys
from typing import IO, TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from ..emulation import round_weights_once, with_kernels
from ..errors import AMPError, error_text
from ..files.interrupts import interrupt_deferred, interruptible
from ..ir.dtypes import array_dtype
from ..mx.io import symbol_json
from .deployed import bind_fused, float32_outputs
from .worker_process import receive, send

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet import Context

    from .batches import Batch

__all__ = ["ModelBlob", "InProcess", "ProcessPool", "WorkerError", "run_model", "IN_FLIGHT"]

# batches in flight per worker: one running, one queued (the memory of a fixed number of
# batches, never of the data set)
IN_FLIGHT = 2
# what each worker process runs (mxnet_amp.auto.worker_process's program)
_WORKER_PROGRAM = "import sys; from mxnet_amp.auto.worker_process import main; sys.exit(main())"
# the folder holding the mxnet_amp package, put on each worker process's import path
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class WorkerError(AMPError, RuntimeError):
    """A worker failed to run a batch (its traceback in the message)."""


class ModelBlob:
    """A model to run: ``sym``, its params by name, the dtype of each data input, and the
    loss-label inputs (fed zeros). Pickled, it is its symbol JSON and params bytes; the
    loaded model is kept on the object, so a worker loads it once.

    ``fused``: run it bound as ``Module`` binds it (MXNet's oneDNN fusions, the path the
    written model runs: :mod:`mxnet_amp.auto.deployed`), else op by op through a CachedOp.
    The caller decides it once (:func:`~mxnet_amp.auto.deployed.binds_fused`) and it travels
    in the pickle, so this process, worker processes and Dask workers run the same path.

    Unpickled (a worker's copy), an emulated model's weight round trips are done once as it
    loads (:func:`~mxnet_amp.emulation.round_weights_once`: the same bits, the rounded
    weights replacing the originals it was sent) instead of at every batch."""

    def __init__(self, key: Any, sym: Any, params: Mapping, input_dtypes: Mapping[str, str],
                 zero_inputs: Mapping[str, tuple] | None = None, fused: bool = False) -> None:
        self.key, self.sym, self.params = key, sym, dict(params)
        self.input_dtypes, self.zero_inputs = dict(input_dtypes), dict(zero_inputs or {})
        self.fused = bool(fused)
        self._op: Any = None
        self._loaded = False   # params on the run's context (once)
        # the fused executor and the input shapes it was bound for: one at a time (a last,
        # smaller batch rebinds), so its memory is one batch's whatever the data
        self._bound: tuple[dict, Any] | None = None
        self._state: dict | None = None
        # params of its own (unpickled in a worker), not the caller's arrays: an emulated
        # model's weights may then be rounded once, replacing the originals (no copy)
        self._owns_params = False

    def __getstate__(self) -> dict:
        # serialised once, however many workers it goes to; each array by itself (MXNet's
        # own pickling of an NDArray: its raw bytes, any dtype), not the whole dict in one
        # mx.nd.save: one C call over a 1 GB model took seconds that Ctrl-C had to wait for
        # (each array's copy runs on a helper thread: interruptible), and it went through a
        # temporary file
        if self._state is None:
            self._state = {"key": self.key, "json": symbol_json(self.sym),
                           "params": {name: interruptible(pickle.dumps, array, pickle.HIGHEST_PROTOCOL)
                                      for name, array in self.params.items()},
                           "input_dtypes": self.input_dtypes, "zero_inputs": self.zero_inputs,
                           "fused": self.fused}
        return self._state

    def __setstate__(self, state: dict) -> None:
        import mxnet as mx
        self.key, self.input_dtypes = state["key"], state["input_dtypes"]
        self.zero_inputs, self.fused = state["zero_inputs"], state["fused"]
        self.sym = mx.sym.load_json(state["json"])
        self.params = {name: pickle.loads(data) for name, data in state["params"].items()}
        self._op, self._bound, self._state, self._loaded = None, None, None, False
        self._owns_params = True

    def run(self, inputs: Mapping[str, np.ndarray], ctx: Context | None = None) -> list[np.ndarray]:
        """The model's outputs on one batch, as float32 numpy arrays."""
        import mxnet as mx
        ctx = ctx or mx.cpu()
        if not self._loaded:
            params = self.params
            if self._owns_params:
                # an emulated model's weight roundings, done once for all its batches (the
                # same bits as in the graph; emulation.round_weights_once); the caller's
                # arrays in this process are never copied so (its memory stays the originals)
                self.sym, params = round_weights_once(self.sym, params)
            self.params = {k: v.as_in_context(ctx) for k, v in params.items()}
            self._loaded = True
        rows = next(iter(inputs.values())).shape[0]
        fed = {k: mx.nd.array(v, ctx=ctx, dtype=self.input_dtypes.get(k, "float32"))
               for k, v in inputs.items()}
        fed.update({k: mx.nd.zeros((rows,) + tuple(shape), ctx=ctx)
                    for k, shape in self.zero_inputs.items() if k not in fed})
        if self.fused:
            return self._run_fused(fed, ctx)
        values = {**self.params, **fed}
        if self._op is None:
            # an emulated model's roundings by the compiled kernels where they load here
            # (the same bits; emulation.with_kernels); self.sym stays the model given
            run = with_kernels(self.sym, {k: v.shape for k, v in values.items()},
                               {k: array_dtype(v) for k, v in values.items()})[0]
            self._op = (mx.nd.CachedOp(run), run.list_inputs(), run)
        return run_model(self._op[0], self._op[1], values)

    def _run_fused(self, fed: dict, ctx: Context) -> list[np.ndarray]:
        """One batch through the executor bound fused (rebound when the shapes change)."""
        shapes = {k: v.shape for k, v in fed.items()}
        if self._bound is None or self._bound[0] != shapes:
            self._bound = None   # the old executor goes before the new one binds
            values = {**self.params, **fed}
            _check_inputs(self.sym.list_inputs(), values)
            self._bound = (shapes, bind_fused(self.sym, values, ctx))
        executor = self._bound[1]
        return float32_outputs(executor.forward(
            is_train=False, **{k: v for k, v in fed.items() if k in executor.arg_dict}))


def run_model(op: Any, names: Sequence[str], values: Mapping) -> list[np.ndarray]:
    """Run a CachedOp on ``values`` (by input name, in ``names`` order) for inference;
    the outputs as float32 numpy arrays."""
    import mxnet as mx
    _check_inputs(names, values)
    with mx.autograd.pause(train_mode=False):
        outs = op(*[values[n] for n in names])
    return float32_outputs([outs] if isinstance(outs, mx.nd.NDArray) else outs)


def _check_inputs(names: Sequence[str], values: Mapping) -> None:
    """:class:`WorkerError` naming the model inputs ``values`` holds no array for."""
    missing = [n for n in names if n not in values]
    if missing:
        raise WorkerError(f"no value for the model inputs {missing[:10]}")


class InProcess:
    """Runs every batch here, on ``ctx``, with MXNet's own threads."""

    workers = 1

    def __init__(self, ctx: Context | None = None) -> None:
        self.ctx = ctx

    def map(self, blob: ModelBlob, batches: Iterable[Batch]) -> Iterator[tuple[Batch, list]]:
        """``(batch, outputs)`` for each batch, in order."""
        import mxnet as mx
        for batch in batches:
            try:
                outs = blob.run(batch.inputs, self.ctx)
            except mx.base.MXNetError as err:   # which batch, as a worker process says
                shapes = ", ".join(f"{n} {v.shape}" for n, v in batch.inputs.items())
                raise WorkerError(f"the model cannot run batch {batch.index} ({shapes}): "
                                  f"{error_text(err)}") from None
            yield batch, outs

    def preload(self, blob: ModelBlob) -> None:
        """Nothing to send: the model loads at its first batch, here."""

    def stop(self) -> None:
        """Nothing to stop."""

    def close(self) -> None:
        """Nothing to release."""


class ProcessPool:
    """``workers`` processes on this machine, each with ``threads`` OpenMP threads (default:
    the cores shared out, so that the workers do not oversubscribe them).

    Each worker is its own program (:mod:`mxnet_amp.auto.worker_process`), started with
    this Python and talking over its stdin and stdout: it never imports the caller's script,
    so no ``__main__`` guard is needed. A worker that dies closes its pipes: the batch it
    held fails with a :class:`WorkerError` at once, and nothing is left for the caller's
    process to wait on when it exits."""

    def __init__(self, workers: int, threads: int | None = None) -> None:
        self.workers = int(workers)
        self.threads = threads or max(1, (os.cpu_count() or 1) // self.workers)
        env = {**os.environ, "OMP_NUM_THREADS": str(self.threads),
               # the worker imports this copy of mxnet_amp, wherever the caller found it
               "PYTHONPATH": os.pathsep.join([_PACKAGE_ROOT] + [
                   p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
        # MXNet (~1.8 s of CPU) loads with the first model, which the parent preloads after its
        # own reference run: imported at once, two workers' imports slowed that run on 2 cores
        # as much as they saved
        # a session of its own: a terminal's Ctrl-C goes to the caller only, which kills the
        # workers at once (close); sent to them too, each printed a KeyboardInterrupt traceback
        # and the caller waited on them. "-c", not "-m": runpy warns that the module is imported
        # already (by the package) before it runs it as the program
        self.processes: list[subprocess.Popen] = []
        self.loaded: list[Any] = [None] * self.workers
        self.stopped = False
        try:
            for _ in range(self.workers):
                with interrupt_deferred():   # each started process is in the list to kill
                    self.processes.append(subprocess.Popen(
                        [sys.executable, "-c", _WORKER_PROGRAM], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, env=env, close_fds=True, start_new_session=True))
        except BaseException:   # Ctrl-C (or a failed start) midway: no worker outlives it
            self.kill()
            raise

    def preload(self, blob: ModelBlob) -> None:
        """Send ``blob`` to every worker now (once per key): each loads it while the caller
        goes on, instead of at its first batch."""
        for w in range(self.workers):
            if self.loaded[w] != blob.key:
                self._send(w, ("model", blob))
                self.loaded[w] = blob.key

    def map(self, blob: ModelBlob, batches: Iterable[Batch]) -> Iterator[tuple[Batch, list]]:
        """``(batch, outputs)`` for each batch, in order (see the module doc)."""
        if self.stopped:
            raise WorkerError("the worker processes were stopped: no more batches run on them")
        self.preload(blob)
        pending: collections.deque = collections.deque()
        try:
            for count, batch in enumerate(batches):
                w = count % self.workers
                self._send(w, ("run", batch.index, batch.inputs), batch.index)
                pending.append((w, batch))
                if len(pending) >= IN_FLIGHT * self.workers:
                    yield self._take(*pending.popleft())
            while pending:
                yield self._take(*pending.popleft())
        except WorkerError:
            # the batches still in flight are taken off, so that the next pass (the caller
            # may run the model again another way) reads only its own outputs
            for w, batch in pending:
                try:
                    self._take(w, batch)
                except WorkerError:
                    pass
            raise

    def _send(self, w: int, message: tuple, index: int | None = None) -> None:
        try:
            send(self.processes[w].stdin, message)   # type: ignore[arg-type]
        except (BrokenPipeError, OSError, ValueError):   # ValueError: the pipe was closed here
            raise self._died(w, index) from None

    def _take(self, w: int, batch: Batch) -> tuple[Batch, list]:
        try:
            status, index, value = receive(self.processes[w].stdout)   # type: ignore[arg-type]
        except (EOFError, OSError, ValueError, pickle.UnpicklingError):
            raise self._died(w, batch.index) from None
        if status != "ok":
            raise WorkerError(f"worker process {w} failed on batch {index}:\n{value}")
        return batch, value

    def _died(self, w: int, index: int | None) -> WorkerError:
        """The error of worker ``w``, gone (its exit code waited for briefly)."""
        process = self.processes[w]
        try:
            code: Any = process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = "none yet: its pipe broke"
        where = f" running batch {index}" if index is not None else ""
        return WorkerError(f"worker process {w} (pid {process.pid}) died (exit code {code}){where}; "
                           "its error, if it printed one, is above. Pass workers=1 to run the "
                           "batches in this process")

    def stop(self) -> None:
        """Tell the workers to exit, without waiting: they wind down (~0.5 s each, MXNet's
        teardown) while the caller finishes; :meth:`close` then waits for them."""
        if not self.stopped:
            for w in range(self.workers):
                try:
                    self._send(w, ("stop",))
                except WorkerError:   # gone already: nothing to tell
                    pass
                _close(self.processes[w].stdin)
            self.stopped = True

    def close(self) -> None:
        """Wait for the workers :meth:`stop` told to exit (one that does not exit in 10 s is
        killed); workers never told (an error or Ctrl-C ended the caller's pass) are killed at
        once: what they run is no longer wanted, and a busy one would read its stop only after
        its batch and the model queued before it (seconds for a large model)."""
        if not self.stopped:
            self.kill()
        try:
            for p in self.processes:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        finally:   # a second Ctrl-C while waiting leaves no worker behind either
            self.kill()
            for p in self.processes:
                _close(p.stdout)

    def kill(self) -> None:
        """Kill every worker still running, now, and close the pipes to them."""
        for p in self.processes:
            if p.poll() is None:
                p.kill()
        for p in self.processes:
            if p.returncode is None:
                p.wait()
            _close(p.stdin)
        self.stopped = True


def _close(pipe: IO[bytes] | None) -> None:
    """Close one end of a worker's pipe (a broken one raises nothing)."""
    if pipe is not None:
        try:
            pipe.close()
        except OSError:   # its buffered bytes could not be written: the worker is gone
            pass
