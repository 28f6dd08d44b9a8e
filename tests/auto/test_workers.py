"""mxnet_amp.auto.workers: one model run over many batches, here or in worker processes."""
import pickle

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.auto.batches import Batch
from mxnet_amp.auto.workers import InProcess, ModelBlob, WorkerError, run_model


def _blob(key="fc"):
    """data -> fc (3 -> 2), weights fixed, as a ModelBlob."""
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc")
    params = {"fc_weight": mx.nd.array([[1, 0, 0], [0, 1, 1]]), "fc_bias": mx.nd.array([0.5, 0])}
    return ModelBlob(key, sym, params, {"data": "float32"})


def test_a_blob_runs_a_batch_to_float32_numpy():
    """The outputs are numpy float32 arrays computed from the blob's params."""
    out = _blob().run({"data": np.array([[1, 2, 3]], dtype=np.float32)})
    assert out[0].dtype == np.float32
    np.testing.assert_allclose(out[0], [[1.5, 5.0]])


def test_a_pickled_blob_runs_the_same():
    """What a worker receives (symbol JSON and params bytes) runs to the same outputs."""
    blob = _blob()
    again = pickle.loads(pickle.dumps(blob))
    x = {"data": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)}
    np.testing.assert_array_equal(again.run(x)[0], blob.run(x)[0])
    assert again.key == "fc"


def test_in_process_keeps_batch_order():
    """InProcess yields (batch, outputs) in the batches' order."""
    batches = [Batch(k, {"data": np.full((1, 3), k, dtype=np.float32)}, []) for k in range(3)]
    got = list(InProcess().map(_blob(), batches))
    assert [b.index for b, _ in got] == [0, 1, 2]
    assert [float(outs[0][0, 0]) for _, outs in got] == [0.5, 1.5, 2.5]


def test_run_model_names_missing_inputs():
    """A CachedOp input without a value is a WorkerError naming it."""
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc")
    with pytest.raises(WorkerError, match="fc_weight"):
        run_model(mx.nd.CachedOp(sym), sym.list_inputs(), {"data": mx.nd.ones((1, 3))})


def test_after_a_failed_pass_worker_processes_give_only_the_next_pass_outputs():
    """A pass that fails in a worker (here: a param missing) leaves no outputs in flight
    behind: the next pass, the model run another way, gets its own, in order."""
    from mxnet_amp.auto.workers import ProcessPool
    broken = _blob("broken")
    del broken.params["fc_bias"]
    batches = [Batch(k, {"data": np.full((1, 3), k, dtype=np.float32)}, []) for k in range(6)]
    pool = ProcessPool(2, threads=1)
    try:
        with pytest.raises(WorkerError, match="fc_bias"):
            list(pool.map(broken, batches))
        got = list(pool.map(_blob(), batches))
    finally:
        pool.close()
    assert [b.index for b, _ in got] == list(range(6))
    assert [float(outs[0][0, 0]) for _, outs in got] == [0.5 + k for k in range(6)]


def test_a_preloaded_model_is_sent_once_and_a_stopped_pool_runs_nothing_more():
    """preload sends the model to every worker ahead of its batches (map then sends nothing
    again, and the outputs are the model's); after stop, map refuses with a WorkerError and
    close still waits for the workers."""
    from mxnet_amp.auto.workers import ProcessPool
    blob = _blob("preloaded")
    batches = [Batch(k, {"data": np.full((1, 3), k, dtype=np.float32)}, []) for k in range(4)]
    pool = ProcessPool(2, threads=1)
    sent: list[str] = []
    send = pool._send   # what each worker is sent, in order
    pool._send = lambda w, message, index=None: (sent.append(message[0]), send(w, message, index))[1]
    try:
        pool.preload(blob)
        assert sent == ["model", "model"] and pool.loaded == ["preloaded", "preloaded"]
        got = list(pool.map(blob, batches))
        assert [float(outs[0][0, 0]) for _, outs in got] == [0.5, 1.5, 2.5, 3.5]
        assert sent[2:] == ["run"] * 4
        pool.stop()
        with pytest.raises(WorkerError, match="stopped"):
            list(pool.map(blob, batches))
    finally:
        pool.close()
    assert all(p.poll() is not None for p in pool.processes)


def test_in_process_names_the_batch_the_model_cannot_run():
    """A batch shaped unlike the model's input is a WorkerError naming the batch and its
    shapes, as a worker process says, not MXNet's bare error (newcomer audit, #42)."""
    batches = [Batch(0, {"data": np.ones((1, 3), np.float32)}, []),
               Batch(1, {"data": np.ones((1, 5), np.float32)}, [])]
    got = InProcess().map(_blob(), batches)
    assert next(got)[0].index == 0
    with pytest.raises(WorkerError, match=r"cannot run batch 1 \(data \(1, 5\)\): .*[Ss]hape"):
        next(got)


def test_a_worker_killed_mid_run_is_a_worker_error_at_once_and_the_others_go_on():
    """Worker 1 killed after the first outputs: the pass raises a WorkerError naming it and
    its exit code (no wait: its pipe closes), and close() returns."""
    import signal
    import time

    from mxnet_amp.auto.workers import ProcessPool
    batches = [Batch(k, {"data": np.full((1, 3), k, dtype=np.float32)}, []) for k in range(40)]
    pool = ProcessPool(2, threads=1)
    start = time.monotonic()
    try:
        with pytest.raises(WorkerError, match=r"worker process 1 .*died \(exit code -9\)"):
            for batch, _ in pool.map(_blob(), batches):
                if batch.index == 0:
                    pool.processes[1].send_signal(signal.SIGKILL)
    finally:
        pool.close()
    assert time.monotonic() - start < 60
    assert all(p.poll() is not None for p in pool.processes)


# a script with no __main__ guard, run as a user runs one: {0} is what it does with workers
_SCRIPT = """
import mxnet as mx, numpy as np
from mxnet_amp import auto_convert_model
from mxnet_amp.auto.workers import ProcessPool
from mxnet_amp.auto.batches import Batch
print("script body ran")
rng = np.random.RandomState(0)
d = mx.sym.var("data")
h = mx.sym.relu(mx.sym.FullyConnected(d, num_hidden=32, name="fc1"), name="relu1")
sym = mx.sym.FullyConnected(h, num_hidden=10, name="fc2")
args = {{"fc1_weight": mx.nd.array(rng.randn(32, 16) * 0.3), "fc1_bias": mx.nd.zeros(32),
        "fc2_weight": mx.nd.array(rng.randn(10, 32) * 0.3), "fc2_bias": mx.nd.zeros(10)}}
x = rng.randn(64, 16).astype(np.float32)
labels = mx.nd.FullyConnected(mx.nd.relu(mx.nd.FullyConnected(mx.nd.array(x), args["fc1_weight"],
    args["fc1_bias"], num_hidden=32)), args["fc2_weight"], args["fc2_bias"], num_hidden=10).argmax(1)
def batches():
    for i in range(4):
        yield x[16 * i:16 * i + 16], labels[16 * i:16 * i + 16].asnumpy()
{0}
"""
_CONVERT = """
_, _, _, report = auto_convert_model(sym, args, {}, target_dtype="bfloat16", eval_data=batches(),
                                     metric=mx.metric.Accuracy(), max_drop=0.01, workers=2,
                                     quiet=True)
print("validated", report.validated, "workers", report.workers)
"""
_KILL = """
import os, signal
from mxnet_amp.auto.workers import ModelBlob
blob = ModelBlob("m", sym, args, {"data": "float32"})
pool = ProcessPool(2, threads=1)
for batch, _ in pool.map(blob, [Batch(k, {"data": x[:4]}, []) for k in range(40)]):
    if batch.index == 0:
        os.kill(pool.processes[0].pid, signal.SIGKILL)
"""


def _run_script(tmp_path, body):
    import os
    import subprocess
    import sys
    script = tmp_path / "plain_script.py"
    script.write_text(_SCRIPT.format(body))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=240, env=env, cwd=str(tmp_path))


def test_a_script_without_a_main_guard_converts_over_eval_data_on_worker_processes(tmp_path):
    """The issue's plain script (no ``if __name__ == '__main__':``): auto_convert_model with
    eval_data, a metric and two worker processes converts, and the process exits (a hang
    would be subprocess.TimeoutExpired). The workers never run the script: its body printed
    once."""
    done = _run_script(tmp_path, _CONVERT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("script body ran") == 1
    assert "validated True workers 2" in done.stdout


def test_a_script_whose_worker_is_killed_fails_typed_and_exits(tmp_path):
    """A worker killed mid-run: the script ends with the WorkerError (exit code 1), not a
    hang on workers that are gone."""
    done = _run_script(tmp_path, _KILL)
    assert done.returncode == 1
    assert "mxnet_amp.auto.workers.WorkerError: worker process 0" in done.stderr
    assert "died (exit code -9)" in done.stderr


def test_a_pool_never_told_to_stop_kills_its_workers_at_once_and_they_miss_a_terminal_ctrl_c():
    """close() after a pass cut short (an error, Ctrl-C: stop was never called) kills the
    workers (exit -9) instead of asking them to finish first: a busy one read its stop only
    after its batch and the model queued before it (#42: 12 s on a 1 GB model). They run in a
    process group of their own, so a terminal's Ctrl-C reaches only the caller."""
    import os
    import signal

    from mxnet_amp.auto.workers import ProcessPool
    batches = [Batch(k, {"data": np.full((1, 3), k, dtype=np.float32)}, []) for k in range(6)]
    pool = ProcessPool(2, threads=1)
    try:
        assert all(os.getpgid(p.pid) != os.getpgid(0) for p in pool.processes)
        with pytest.raises(KeyboardInterrupt):
            for batch, _ in pool.map(_blob(), batches):
                if batch.index == 1:
                    raise KeyboardInterrupt   # as Ctrl-C would, mid-pass
    finally:
        pool.close()
    assert [p.returncode for p in pool.processes] == [-signal.SIGKILL] * 2


def test_a_stopped_pool_lets_its_workers_exit_by_themselves():
    """After stop (the pass done), close waits: the workers exit with code 0, not killed."""
    from mxnet_amp.auto.workers import ProcessPool
    pool = ProcessPool(2, threads=1)
    try:
        pool.stop()
    finally:
        pool.close()
    assert [p.returncode for p in pool.processes] == [0, 0]


def test_a_pickled_blob_keeps_each_params_dtype_and_bits():
    """The params travel array by array (MXNet's own NDArray pickling): float16 and
    bfloat16 arrays arrive with their dtype and the same bits."""
    from mxnet_amp.ir.dtypes import array_dtype, array_values
    from mxnet_amp.mx.params import cast_array
    blob = _blob()
    blob.params = {"fc_weight": cast_array(blob.params["fc_weight"] + 0.3, "bfloat16"),
                   "fc_bias": blob.params["fc_bias"].astype("float16")}
    again = pickle.loads(pickle.dumps(blob))
    for name, array in blob.params.items():
        assert array_dtype(again.params[name]) == array_dtype(array)
        np.testing.assert_array_equal(array_values(again.params[name]), array_values(array))
