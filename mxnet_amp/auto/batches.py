"""Evaluation data of any size for the automatic mode: batches read one at a time.

:class:`BatchSource` reads an ``mx.io.DataIter`` (``ImageRecordIter`` over a ``.rec``,
``NDArrayIter``, ...), a gluon ``DataLoader``, a folder of ``.npy``/``.npz`` batches
(:class:`NpzFolder`) or any iterable of batches, and yields :class:`Batch` values: the model
inputs by name and the labels, as numpy arrays. Every pass reads the data again (a DataIter
is reset, an iterable iterated anew); a one-shot iterator (a generator) is written to a
temporary folder on the first pass and read back from there, so nothing holds the whole set.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ..errors import InputValueError
from .inputs import loss_labels

__all__ = ["Batch", "BatchSource", "EvalSource", "eval_source", "NpzFolder", "RecordBatches", "LABEL_KEYS", "one_batch_as_list",
           "known_batches"]

# the keys of an .npz batch (or a dict batch) that hold labels, not model inputs
LABEL_KEYS = ("label", "labels", "softmax_label")


@dataclass
class Batch:
    """One batch: ``inputs`` by model input name, ``labels`` (possibly empty), in order."""

    index: int
    inputs: dict[str, np.ndarray]
    labels: list[np.ndarray]

    @property
    def size(self) -> int:
        """Rows (samples) in the batch."""
        return int(next(iter(self.inputs.values())).shape[0]) if self.inputs else 0


class NpzFolder:
    """A folder of ``.npz`` batches (arrays by input name, labels under ``label``) or ``.npy``
    batches (the one input, no labels), read lazily in file name order."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        if not os.path.isdir(self.path):
            raise InputValueError(f"eval data folder not found: {self.path}")
        self.files = sorted(f for f in os.listdir(self.path) if f.endswith((".npz", ".npy")))
        if not self.files:
            raise InputValueError(f"{self.path} holds no .npz or .npy batch files")

    def __len__(self) -> int:
        return len(self.files)

    def __iter__(self) -> Iterator[Any]:
        for name in self.files:
            full = os.path.join(self.path, name)
            try:
                if name.endswith(".npy"):
                    yield np.load(full, allow_pickle=False)
                    continue
                with np.load(full, allow_pickle=False) as data:
                    yield {k: data[k] for k in data.files}
            except (ValueError, OSError) as err:
                raise InputValueError(f"cannot read the batch file {full}: {err}") from None


class RecordBatches:
    """Batches of a RecordIO image file (``.rec``, its ``.idx`` beside it or given) read by
    ``mx.io.ImageRecordIter``, as ``(data, label)`` tuples, exactly its records: MXNet 1.9's
    ``ImageRecordIter`` with ``round_batch=False`` fills its last batch up without saying so
    (``pad`` stays 0), so the rows past the record count (from the ``.idx``) are dropped.

    Parameters
    ----------
    path : str
        The ``.rec`` file.
    data_shape : tuple of int
        ``(channels, height, width)`` the images are cropped/resized to.
    batch_size : int
    idx : str, optional
        The index file (default ``path`` with ``.idx`` for ``.rec``).
    **options
        Any other ``ImageRecordIter`` option (``mean_r``, ``std_r``, ``resize``, ...).
    """

    def __init__(self, path: str, data_shape: Sequence[int], batch_size: int,
                 idx: str | None = None, **options: Any) -> None:
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise InputValueError(f"record file not found: {self.path}")
        found = [f for f in (os.path.splitext(self.path)[0] + ".idx", self.path + ".idx")
                 if os.path.isfile(f)]
        self.idx = idx or (found[0] if found else None)
        self.count = _record_count(self.path, self.idx)
        if not self.count:
            raise InputValueError(f"{self.path} holds no record")
        self.data_shape, self.batch_size = tuple(data_shape), int(batch_size)
        self.options = dict(options)

    def __iter__(self) -> Iterator[tuple]:
        import mxnet as mx
        where = {"path_imgidx": self.idx} if self.idx else {}
        it = mx.io.ImageRecordIter(path_imgrec=self.path, **where,
                                   data_shape=self.data_shape, batch_size=self.batch_size,
                                   round_batch=False, shuffle=False, **self.options)
        left = self.count
        for batch in it:
            keep = min(left, batch.data[0].shape[0])
            yield batch.data[0].asnumpy()[:keep], batch.label[0].asnumpy()[:keep]
            left -= keep
            if left <= 0:
                return


def known_batches(data: Any) -> int | None:
    """How many batches ``data`` holds, where it says without being read (a list, a
    DataLoader, an :class:`NpzFolder`, a :class:`RecordBatches`); None elsewhere (a
    generator, a DataIter)."""
    if isinstance(data, RecordBatches):
        return -(-data.count // data.batch_size)
    if isinstance(data, (np.ndarray, tuple, Mapping)) or hasattr(data, "asnumpy"):
        return 1   # one batch (one_batch_as_list)
    try:
        return len(data) if hasattr(data, "__len__") else None
    except TypeError:
        return None


def _known_samples(data: Any) -> int | None:
    """How many samples ``data`` holds, where it says without being read (RecordBatches,
    NDArrayIter); None elsewhere."""
    for attribute in ("count", "num_data"):
        value = getattr(data, attribute, None)
        if isinstance(value, int):
            return value
    return None


def _record_count(path: str, idx: str | None) -> int:
    """Records in a ``.rec``: the lines of its index, else counted by reading it through."""
    if idx is not None:
        if not os.path.isfile(idx):
            raise InputValueError(f"index file not found: {idx}")
        with open(idx) as f:
            return sum(1 for line in f if line.strip())
    import mxnet as mx
    rec, count = mx.recordio.MXRecordIO(path, "r"), 0
    while rec.read() is not None:
        count += 1
    rec.close()
    return count


def _numpy(value: Any) -> np.ndarray:
    return value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value)


class BatchSource:
    """The batches of ``data`` (see the module doc), as :class:`Batch` values.

    Parameters
    ----------
    data : DataIter, DataLoader, iterable of batches, or NpzFolder
        A batch is an array (the one input), a tuple/list (the inputs in ``names`` order,
        then the labels), or a dict by input name (``label``/``labels`` keys: labels).
    names : list of str
        The model inputs a batch must give (loss labels aside).
    """

    def __init__(self, data: Any, names: Sequence[str]) -> None:
        self.data, self.names = data, list(names)
        self.spill_dir: str | None = None
        self.spilled: list[str] = []
        self.batches: int | None = None     # known after the first full pass
        # known ahead where the data says (a progress bar's total and ETA from the start)
        self.samples: int | None = _known_samples(data)
        self._one_shot = _is_one_shot(data)
        self._rest: Iterator[Any] | None = None   # a one-shot iterator, once started
        self._rows: list[int] = []                # rows of each spilled batch

    def __iter__(self) -> Iterator[Batch]:
        if self._one_shot:
            yield from self._one_shot_pass()
            return
        count = rows = 0
        for count, raw in enumerate(self._raw(), start=1):
            batch = self._batch(count - 1, raw)
            rows += batch.size
            yield batch
        self._counted(count, rows)

    def _counted(self, count: int, rows: int) -> None:
        """The size of the data, once a pass has read it all."""
        if self.batches is None:
            if count == 0:
                raise InputValueError("eval_data holds no batch")
            self.batches, self.samples = count, rows

    def _one_shot_pass(self) -> Iterator[Batch]:
        """The batches spilled so far (read back), then the rest of the iterator, spilled
        as they come: a pass stopped early loses nothing."""
        yield from self._read_spilled(len(self.spilled))
        if self.batches is not None:
            return
        if self._rest is None:
            self._rest = iter(self.data)
        for raw in self._rest:
            try:
                batch = self._batch(len(self.spilled), raw)
            except InputValueError:
                self.close()   # a bad batch ends the run: nothing spilled may stay behind
                raise
            self._spill(batch)
            yield batch
        self._counted(len(self.spilled), sum(self._rows))

    def close(self) -> None:
        """Delete the spilled batches (if any)."""
        if self.spill_dir is not None:
            shutil.rmtree(self.spill_dir, ignore_errors=True)
            self.spill_dir, self.spilled, self._rows = None, [], []

    def _raw(self) -> Iterator[Any]:
        data = self.data
        if hasattr(data, "reset") and hasattr(data, "provide_data"):   # an mx.io.DataIter
            data.reset()
            return _data_iter_batches(data)
        return iter(data)

    def _batch(self, index: int, raw: Any) -> Batch:
        if raw is None:
            raise InputValueError(f"batch {index} is None; a batch is an array, a tuple of "
                                  f"arrays ({', '.join(self.names)}, then labels) or a dict")
        if _is_data_batch(raw):
            raw = _data_batch_arrays(raw)
        if isinstance(raw, Mapping):
            inputs = {k: _numpy(v) for k, v in raw.items() if k not in LABEL_KEYS}
            labels = [_numpy(raw[k]) for k in LABEL_KEYS if k in raw]
        elif isinstance(raw, (tuple, list)):
            if len(raw) < len(self.names):
                raise InputValueError(f"batch {index} holds {len(raw)} arrays but the model has "
                                      f"{len(self.names)} inputs {self.names}")
            inputs = {n: _numpy(v) for n, v in zip(self.names, raw)}
            labels = [_numpy(v) for v in raw[len(self.names):]]
        elif len(self.names) == 1 and raw is not None:
            inputs, labels = {self.names[0]: _numpy(raw)}, []
        else:
            raise InputValueError(f"batch {index}: the model has inputs {self.names}; give each "
                                  "batch as a tuple in that order or a dict by input name")
        missing = [n for n in self.names if n not in inputs]
        if missing:
            raise InputValueError(f"batch {index} has no array for the model inputs {missing} "
                                  f"(it gives {sorted(inputs)})")
        batch = Batch(index, {n: inputs[n] for n in self.names}, labels)
        _checked_batch(batch)
        return batch

    def _spill(self, batch: Batch) -> None:
        if self.spill_dir is None:
            self.spill_dir = tempfile.mkdtemp(prefix="mxnet-amp-batches-")
        path = os.path.join(self.spill_dir, f"batch-{batch.index:08d}.npz")
        arrays = {f"in_{k}": v for k, v in enumerate(batch.inputs.values())}
        arrays.update({f"label_{k}": v for k, v in enumerate(batch.labels)})
        np.savez(path, **arrays)
        self.spilled.append(path)
        self._rows.append(batch.size)

    def _read_spilled(self, count: int) -> Iterator[Batch]:
        for index, path in enumerate(self.spilled[:count]):
            with np.load(path) as data:
                inputs = {n: data[f"in_{k}"] for k, n in enumerate(self.names)}
                labels = [data[f"label_{k}"] for k in range(len(data.files) - len(self.names))]
            yield Batch(index, inputs, labels)


@dataclass(frozen=True)
class EvalSource:
    """What :func:`eval_source` returns: the batches of ``eval_data`` (None without), the
    sample inputs ranges and attribution run on, and how many of ``eval_data``'s samples
    those are (None: the caller's own)."""

    source: BatchSource | None
    sample_inputs: Any
    rows: int | None


def eval_source(eval_data: Any, sample_inputs: Any, data_names: Sequence[str], original: Any,
                attribution_samples: int) -> EvalSource:
    """The :class:`BatchSource` of ``eval_data`` (None without) and the sample inputs (the
    caller's, else ``eval_data``'s first ``attribution_samples`` samples)."""
    if eval_data is None:
        return EvalSource(None, sample_inputs, None)
    names = [n for n in data_names if n not in loss_labels(original)]
    source = BatchSource(one_batch_as_list(eval_data), names)
    if sample_inputs is not None:
        return EvalSource(source, sample_inputs, None)
    first: list = []
    for batch in source:   # a batch shaped unlike the first cannot join it
        if first and any(batch.inputs[n].shape[1:] != first[0].inputs[n].shape[1:] for n in names):
            break
        first.append(batch)
        if sum(b.size for b in first) >= attribution_samples:
            break
    joined = {n: np.concatenate([b.inputs[n] for b in first])[:attribution_samples] for n in names}
    return EvalSource(source, joined, len(joined[names[0]]))


def _checked_batch(batch: Batch) -> None:
    """:class:`InputValueError` naming the batch and the array, where MXNet or numpy would
    fail later with no word of which batch: an input or label that is not numbers, or whose
    row count is not the inputs'. (Batches may differ past the rows: a model reading
    sequences or images of any size takes them.)"""
    named = [(f"input {n!r}", v) for n, v in batch.inputs.items()]
    named += [(f"label {k}", v) for k, v in enumerate(batch.labels)]
    rows = batch.size
    for what, array in named:
        if array.dtype.kind not in "biuf":
            raise InputValueError(f"batch {batch.index}: {what} holds {array.dtype} values; "
                                  "inputs and labels must be numbers")
        if array.ndim == 0 or array.shape[0] != rows:
            raise InputValueError(f"batch {batch.index}: {what} has shape {array.shape}, "
                                  f"expected {rows} rows as the model inputs have")


def one_batch_as_list(data: Any) -> Any:
    """``data`` as an iterable of batches: one array (numpy or NDArray), a tuple or a dict
    of arrays is one batch (iterating it would give rows or names); anything else is
    already batches."""
    if isinstance(data, (np.ndarray, tuple, Mapping)) or hasattr(data, "asnumpy"):
        return [data]
    return data


def _is_one_shot(data: Any) -> bool:
    """An iterator that is its own iterable (a generator): it can be read once only. A
    DataIter is an iterator too, but resettable."""
    if hasattr(data, "reset") and hasattr(data, "provide_data"):
        return False
    return iter(data) is data if hasattr(data, "__iter__") else False


def _data_iter_batches(data: Any) -> Iterator[tuple]:
    """An mx.io.DataIter's batches as ``(data..., labels...)`` tuples, the padding rows of
    the last batch dropped."""
    for batch in data:
        yield _data_batch_arrays(batch)


def _is_data_batch(raw: Any) -> bool:
    """True for an ``mx.io.DataBatch`` (what a DataIter yields, and what scripts written for
    Module often yield from a generator of their own)."""
    return hasattr(raw, "data") and hasattr(raw, "label") and hasattr(raw, "pad")


def _data_batch_arrays(batch: Any) -> tuple:
    """An ``mx.io.DataBatch`` as a ``(data..., labels...)`` tuple, its padding rows dropped."""
    keep = batch.data[0].shape[0] - (batch.pad or 0)
    arrays = list(batch.data) + list(batch.label or [])
    return tuple(_numpy(a)[:keep] for a in arrays)
