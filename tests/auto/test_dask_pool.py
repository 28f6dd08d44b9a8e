"""mxnet_amp.auto.dask_pool: batches run as tasks of a Dask client, outputs in batch order.

The client here is a stand-in with the three methods the pool calls (scatter, submit,
cancel), running each task at once: the pool's ordering, scattering and release are what
is tested, not Dask."""
import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.auto.batches import Batch
from mxnet_amp.auto.dask_pool import DaskPool, run_on_worker
from mxnet_amp.auto.workers import ModelBlob
from mxnet_amp.errors import ArgumentError


class _Done:
    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


class _Client:
    """What DaskPool uses of distributed.Client, run synchronously."""

    def __init__(self, workers=2):
        self.info = {"workers": {f"w{k}": {} for k in range(workers)}}
        self.scattered, self.cancelled, self.submitted = [], [], 0

    def scheduler_info(self):
        return self.info

    def scatter(self, blob, broadcast, hash):
        self.scattered.append(blob.key)
        return blob

    def submit(self, fn, model, inputs, pure):
        self.submitted += 1
        return _Done(fn(model, inputs))

    def cancel(self, model):
        self.cancelled.append(model.key)


def _blob(key="m"):
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=1, name="fc")
    params = {"fc_weight": mx.nd.array([[1.0, 1.0]]), "fc_bias": mx.nd.array([0.0])}
    return ModelBlob(key, sym, params, {"data": "float32"})


def _batches(n):
    return [Batch(k, {"data": np.full((1, 2), k, dtype=np.float32)}, []) for k in range(n)]


def test_outputs_come_back_in_batch_order_and_the_model_is_scattered_once():
    """Five batches over two workers: results in order, one scatter per model key."""
    client = _Client()
    pool = DaskPool(client)
    got = list(pool.map(_blob(), _batches(5)))
    assert [b.index for b, _ in got] == list(range(5))
    assert [float(outs[0][0, 0]) for _, outs in got] == [0, 2, 4, 6, 8]
    list(pool.map(_blob(), _batches(2)))
    assert client.scattered == ["m"] and client.submitted == 7 and pool.workers == 2


def test_close_releases_the_scattered_model():
    """close() cancels the scattered model; a new key scatters again."""
    client = _Client()
    pool = DaskPool(client)
    list(pool.map(_blob("a"), _batches(1)))
    list(pool.map(_blob("b"), _batches(1)))
    pool.close()
    assert client.scattered == ["a", "b"] and client.cancelled == ["b"]


def test_something_that_is_no_client_is_refused():
    """An object without scatter/submit is an ArgumentError naming it."""
    with pytest.raises(ArgumentError, match="distributed.Client"):
        DaskPool(object())


def test_run_on_worker_runs_the_blob():
    """The task function is the blob's own run."""
    out = run_on_worker(_blob(), {"data": np.ones((1, 2), dtype=np.float32)})
    assert float(out[0][0, 0]) == 2.0
