"""The per-batch job of :mod:`mxnet_amp.auto.workers` on a Dask ``distributed`` cluster
(the optional extra ``dist``): for a validation set one machine cannot get through."""
from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import numpy as np

from ..errors import ArgumentError
from .workers import IN_FLIGHT, ModelBlob

if TYPE_CHECKING:
    from .batches import Batch

__all__ = ["DaskPool", "run_on_worker"]


def run_on_worker(blob: ModelBlob, inputs: dict) -> list[np.ndarray]:
    """The task each batch becomes: the model (scattered once to every worker, loaded there
    once) run on one batch."""
    return blob.run(inputs)


class DaskPool:
    """Runs batches as tasks of a ``distributed.Client``; outputs in batch order."""

    def __init__(self, client: Any) -> None:
        if not hasattr(client, "scatter") or not hasattr(client, "submit"):
            raise ArgumentError(f"client must be a distributed.Client, got {client!r}")
        self.client = client
        self.workers = max(1, len(client.scheduler_info().get("workers", {})))
        self._model: tuple[Any, Any] | None = None

    def preload(self, blob: ModelBlob) -> None:
        """Scatter ``blob`` to every worker now (once per key)."""
        if self._model is None or self._model[0] != blob.key:
            self._model = (blob.key, self.client.scatter(blob, broadcast=True, hash=False))

    def map(self, blob: ModelBlob, batches: Iterable[Batch]) -> Iterator[tuple[Batch, list]]:
        """``(batch, outputs)`` for each batch, in order, at most two per worker in flight."""
        self.preload(blob)
        assert self._model is not None
        model = self._model[1]
        pending: collections.deque = collections.deque()
        for batch in batches:
            pending.append((batch, self.client.submit(run_on_worker, model, batch.inputs,
                                                      pure=False)))
            if len(pending) >= IN_FLIGHT * self.workers:
                done, future = pending.popleft()
                yield done, future.result()
        while pending:
            done, future = pending.popleft()
            yield done, future.result()

    def stop(self) -> None:
        """Nothing to stop: the cluster is the caller's."""

    def close(self) -> None:
        """Release the scattered model (the client stays the caller's)."""
        if self._model is not None:
            self.client.cancel(self._model[1])
            self._model = None
