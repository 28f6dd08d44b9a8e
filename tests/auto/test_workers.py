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
    for box in pool.inboxes:   # what each inbox is given, in order
        box.put = (lambda message, put=box.put: (sent.append(message[0]), put(message))[1])
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
    assert not any(p.is_alive() for p in pool.processes)


def test_in_process_names_the_batch_the_model_cannot_run():
    """A batch shaped unlike the model's input is a WorkerError naming the batch and its
    shapes, as a worker process says, not MXNet's bare error (newcomer audit, #42)."""
    batches = [Batch(0, {"data": np.ones((1, 3), np.float32)}, []),
               Batch(1, {"data": np.ones((1, 5), np.float32)}, [])]
    got = InProcess().map(_blob(), batches)
    assert next(got)[0].index == 0
    with pytest.raises(WorkerError, match=r"cannot run batch 1 \(data \(1, 5\)\): .*[Ss]hape"):
        next(got)
